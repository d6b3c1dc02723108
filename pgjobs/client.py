"""JobQueue: the entry point for producers and operators."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import asyncpg

from pgjobs import jsonvalue, migrate
from pgjobs.config import DEFAULT_SCHEMA, dsn_from_env
from pgjobs.enqueue import JobSpec, insert_many, insert_one, prepare
from pgjobs.errors import SchemaMissing
from pgjobs.executor import Connection, Database
from pgjobs.kinds import Kind, Registry
from pgjobs.models import EnqueueResult, JobRow, Status
from pgjobs.worker import Worker


def _job_row(record: asyncpg.Record) -> JobRow:
    values = dict(record)
    for column in ("payload", "output", "metadata", "progress", "last_error", "backoff"):
        values[column] = jsonvalue.loads(values[column])
    values["status"] = Status(values["status"])
    return JobRow(**values)


class JobQueue:
    """Enqueue typed jobs, read them back, and build workers, on one schema of one database.

    >>> jobs = await JobQueue.connect("postgresql://...", registry=registry)
    >>> await jobs.migrate()
    >>> result = await jobs.enqueue("send_email", {"to": "a@example.com"}, priority=5)
    """

    def __init__(self, db: Database, registry: Registry | None = None) -> None:
        self.db = db
        self.registry = registry if registry is not None else Registry()

    @classmethod
    async def connect(
        cls,
        dsn: str | None = None,
        *,
        registry: Registry | None = None,
        schema: str = DEFAULT_SCHEMA,
        pool: asyncpg.Pool | None = None,
        min_size: int = 1,
        max_size: int = 10,
    ) -> JobQueue:
        """Open a pool on ``dsn`` (default: ``PGJOBS_DSN``, then ``DATABASE_URL``, then local),
        or use ``pool``, which is then left open by ``close()``."""
        if pool is not None:
            return cls(Database(pool, schema, owns_pool=False), registry)
        resolved = dsn or dsn_from_env()
        assert resolved is not None
        return cls(
            await Database.connect(resolved, schema, min_size=min_size, max_size=max_size), registry
        )

    async def close(self) -> None:
        await self.db.close()

    async def __aenter__(self) -> JobQueue:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def schema(self) -> str:
        return self.db.schema

    async def migrate(self) -> list[int]:
        """Apply pending schema migrations (idempotent, safe to run concurrently)."""
        async with self.db.pool.acquire() as conn:
            return await migrate.apply_migrations(conn, self.db.schema)

    async def check_schema(self) -> None:
        """Raise SchemaMissing, saying what to run, unless the schema is fully migrated."""
        version = await self.db.schema_version()
        if version is None or version < migrate.latest_version():
            raise SchemaMissing(self.db.schema, version, migrate.latest_version())

    # -- enqueue ---------------------------------------------------------------------------

    async def enqueue(
        self,
        kind: str | Kind[Any],
        input: Any,
        *,
        connection: Connection | None = None,
        **options: Any,
    ) -> EnqueueResult:
        """Validate and enqueue one job; return its id.

        Options: ``queue``, ``priority`` (higher first), ``run_at`` or ``delay`` (seconds),
        ``max_attempts``, ``backoff``, ``max_deferrals``, ``name``, ``dedup_key``,
        ``group_key``, ``tenant``, ``metadata``. With ``connection``, the job is written in
        the caller's transaction: it exists (and wakes workers) only if that commits.
        With ``dedup_key``, an in-flight job holding the key is returned with
        ``duplicate=True`` instead of a new one.
        """
        return await insert_one(
            self.db, prepare(JobSpec(kind, input, **options), self.registry), connection
        )

    async def enqueue_many(
        self, specs: Iterable[JobSpec], *, connection: Connection | None = None
    ) -> list[EnqueueResult]:
        """Validate every spec, then write them all in one statement; results in input order.

        If any spec is invalid, nothing is written.
        """
        prepared = [prepare(spec, self.registry) for spec in specs]
        return await insert_many(self.db, prepared, connection)

    # -- reads -----------------------------------------------------------------------------

    async def get(
        self, job_id: int, *, tenant: str | None = None, any_tenant: bool = False
    ) -> JobRow | None:
        """The job, if it exists and belongs to ``tenant`` (None: only jobs without a tenant).

        Another tenant's job is reported as absent, never as forbidden. ``any_tenant=True``
        is for internal operators only.
        """
        if isinstance(job_id, bool) or not isinstance(job_id, int):
            return None
        record = await self.db.fetchrow("get_job", job_id, tenant, any_tenant)
        return None if record is None else _job_row(record)

    async def get_by_dedup_key(
        self, queue: str, dedup_key: str, *, tenant: str | None = None
    ) -> JobRow | None:
        """The pending or running job holding ``dedup_key`` in ``queue`` for ``tenant``."""
        record = await self.db.fetchrow("get_by_dedup_key", queue, dedup_key, tenant)
        return None if record is None else _job_row(record)

    # -- workers ---------------------------------------------------------------------------

    def worker(self, **options: Any) -> Worker:
        """A Worker for this queue's registry; see Worker for the options."""
        return Worker(self.db, self.registry, **options)
