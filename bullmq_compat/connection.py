"""Where a facade object gets its engine handle: ``opts["connection"]`` as a DSN, a dict of
asyncpg connection arguments, a shared ``pgjobs.JobQueue`` or an ``asyncpg.Pool``; else the
environment (PGJOBS_DSN, then DATABASE_URL), else a local server. A pool the user passed is
never closed by the facade; one it built is."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg

import pgjobs
from pgjobs import DEFAULT_SCHEMA, create_pool, dsn_from_env


class Connection:
    def __init__(self, opts: dict[str, Any]) -> None:
        self._given = opts.get("connection")
        default_schema = (
            self._given.schema if isinstance(self._given, pgjobs.JobQueue) else DEFAULT_SCHEMA
        )
        self._schema = opts.get("schema", default_schema)
        self._jobs: pgjobs.JobQueue | None = None
        self._owned_pool: asyncpg.Pool | None = None
        self._lock = asyncio.Lock()

    async def open(self, registry: pgjobs.Registry) -> pgjobs.JobQueue:
        """A JobQueue on the configured database and schema (checked to be migrated). A failure
        leaves nothing half-open: a pool already made is kept for the next call."""
        async with self._lock:
            if self._jobs is not None:
                return self._jobs
            given = self._given
            if isinstance(given, pgjobs.JobQueue):
                pool = given.pool
            elif isinstance(given, asyncpg.Pool):
                pool = given
            elif self._owned_pool is not None:
                pool = self._owned_pool
            elif isinstance(given, dict):
                args = dict(given)
                if "dbname" in args:
                    args["database"] = args.pop("dbname")
                pool = self._owned_pool = await create_pool(None, min_size=1, max_size=10, **args)
            elif given is None or isinstance(given, str):
                dsn = given or dsn_from_env()
                pool = self._owned_pool = await create_pool(dsn, min_size=1, max_size=10)
            else:
                raise TypeError(
                    "opts['connection'] must be a PostgreSQL DSN, a dict of connection arguments, "
                    f"a pgjobs.JobQueue or an asyncpg.Pool, not {type(given).__name__}"
                )
            jobs = await pgjobs.JobQueue.connect(pool=pool, schema=self._schema, registry=registry)
            await jobs.check_schema()
            self._jobs = jobs
            return jobs

    async def close(self) -> None:
        if self._owned_pool is not None:
            await self._owned_pool.close()
            self._owned_pool = None
        self._jobs = None
