"""Where a facade object gets its engine: ``opts["connection"]`` as a PostgreSQL DSN, a dict of
asyncpg connection arguments, a shared ``pgjobs.JobQueue`` or an ``asyncpg.Pool``; else the
environment (PGJOBS_DSN, then DATABASE_URL), else a local server.

How long to wait on a silent network: a DSN's libpq parameters (``connect_timeout``,
``keepalives_idle``, ``keepalives_interval``, ``keepalives_count``, ``tcp_user_timeout``), and
in a dict a ``timeouts`` entry (a ``pgjobs.Timeouts`` or a dict of its fields) for the
statement deadlines as well. A DSN with several hosts and ``target_session_attrs=read-write``
follows a failover.

Facade objects of one event loop that name the same database and schema share one pool, opened
by the first and closed by the last to close, so closing a Queue never takes the connections
of a Worker still finishing its jobs. A pool or JobQueue the user passed is never closed.
"""

from __future__ import annotations

import asyncio
import weakref
from dataclasses import dataclass, field
from typing import Any

import asyncpg

import pgjobs
from pgjobs import DEFAULT_SCHEMA, create_pool, dsn_from_env

POOL_MAX_SIZE = 20
"""Connections of a shared pool: enough for a process's queues, workers (each holds one to
listen) and QueueEvents (one each, to listen) without starving outcome writes."""


@dataclass
class _Shared:
    pool: asyncpg.Pool
    users: int = 0
    checked: set[str] = field(default_factory=set)  # schemas checked to be migrated


_POOLS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[Any, _Shared]] = (
    weakref.WeakKeyDictionary()
)
_OPENING: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
    weakref.WeakKeyDictionary()
)


def _key(given: Any) -> Any:
    if isinstance(given, dict):
        return ("args", tuple(sorted((k, repr(v)) for k, v in given.items())))
    return ("dsn", given or dsn_from_env())


def _timeouts(given: Any) -> pgjobs.Timeouts:
    """The ``timeouts`` entry of a dict connection (the defaults otherwise); a bad one raises
    InvalidOption naming the field."""
    value = given.get("timeouts") if isinstance(given, dict) else None
    return pgjobs.Timeouts.of(value)


class EngineConnection:
    """One facade object's handle on the engine: ``open(registry)`` gives a JobQueue on the
    configured database and schema (checked to be migrated), ``close()`` lets it go."""

    def __init__(self, opts: dict[str, Any]) -> None:
        self._given = opts.get("connection")
        if isinstance(self._given, str) and self._given.startswith(("redis://", "rediss://")):
            self._redis_url = True
        else:
            self._redis_url = False
        default_schema = (
            self._given.schema if isinstance(self._given, pgjobs.JobQueue) else DEFAULT_SCHEMA
        )
        self.schema: str = opts.get("schema", default_schema)
        # BullMQ's `telemetry` option (bullmq-otel there): a pgjobs.telemetry.Telemetry here;
        # a JobQueue given as the connection brings its own.
        self._telemetry: Any = opts.get("telemetry") or (
            self._given.telemetry if isinstance(self._given, pgjobs.JobQueue) else None
        )
        self._pool: asyncpg.Pool | None = None
        self._timeouts: pgjobs.Timeouts | None = None  # a JobQueue given brings its own
        self._jobs: dict[int, pgjobs.JobQueue] = {}  # by id of the registry they were opened with
        self._shared: tuple[asyncio.AbstractEventLoop, Any] | None = None
        self._lock = asyncio.Lock()

    def _check_given(self) -> None:
        given = self._given
        if self._redis_url:
            raise TypeError(
                f"opts['connection'] is a Redis URL ({given!r}): bullmq_compat runs on "
                "PostgreSQL; pass a PostgreSQL DSN (see docs/porting.md)"
            )
        if not (
            given is None
            or isinstance(given, str | dict | asyncpg.Pool)
            or isinstance(given, pgjobs.JobQueue)
        ):
            raise TypeError(
                "opts['connection'] must be a PostgreSQL DSN, a dict of connection arguments, "
                f"a pgjobs.JobQueue or an asyncpg.Pool, not {type(given).__name__}"
            )

    async def open(self, registry: pgjobs.Registry) -> pgjobs.JobQueue:
        """A JobQueue with ``registry`` on the engine, which is opened (and its schema checked)
        on first use. A failure leaves nothing half-open: the next call tries again."""
        known = self._jobs.get(id(registry))
        if known is not None:
            return known
        async with self._lock:
            if self._pool is None:
                await self._open_pool(registry)
            assert self._pool is not None
            jobs = self._jobs.get(id(registry))
            if jobs is None:
                jobs = await pgjobs.JobQueue.connect(
                    pool=self._pool,
                    schema=self.schema,
                    registry=registry,
                    telemetry=self._telemetry,
                    timeouts=self._timeouts,
                )
                self._jobs[id(registry)] = jobs
            return jobs

    async def _open_pool(self, registry: pgjobs.Registry) -> None:
        self._check_given()
        given = self._given
        if isinstance(given, pgjobs.JobQueue | asyncpg.Pool):
            pool = given.pool if isinstance(given, pgjobs.JobQueue) else given
            self._timeouts = given.timeouts if isinstance(given, pgjobs.JobQueue) else None
            jobs = await pgjobs.JobQueue.connect(
                pool=pool, schema=self.schema, registry=registry, timeouts=self._timeouts
            )
            await jobs.check_schema()
            self._pool = pool
            return
        self._timeouts = _timeouts(given)
        shared = await self._acquire_shared()
        if self.schema not in shared.checked:
            jobs = await pgjobs.JobQueue.connect(
                pool=shared.pool, schema=self.schema, registry=registry
            )
            try:
                await jobs.check_schema()
            except BaseException:
                await self._release_shared()
                raise
            shared.checked.add(self.schema)
        self._pool = shared.pool

    async def _acquire_shared(self) -> _Shared:
        loop = asyncio.get_running_loop()
        lock = _OPENING.setdefault(loop, asyncio.Lock())
        key = _key(self._given)
        async with lock:
            pools = _POOLS.setdefault(loop, {})
            shared = pools.get(key)
            if shared is None or shared.pool.is_closing():
                if isinstance(self._given, dict):
                    args = dict(self._given)
                    if "dbname" in args:
                        args["database"] = args.pop("dbname")
                    args["timeouts"] = self._timeouts
                    dsn = args.pop("dsn", None)
                    pool = await create_pool(dsn, min_size=1, max_size=POOL_MAX_SIZE, **args)
                else:
                    dsn = key[1]
                    pool = await create_pool(dsn, min_size=1, max_size=POOL_MAX_SIZE)
                shared = pools[key] = _Shared(pool)
            shared.users += 1
            self._shared = (loop, key)
            return shared

    async def _release_shared(self) -> None:
        if self._shared is None:
            return
        loop, key = self._shared
        self._shared = None
        pools = _POOLS.get(loop, {})
        shared = pools.get(key)
        if shared is None:
            return
        shared.users -= 1
        if shared.users <= 0:
            del pools[key]
            await shared.pool.close()

    @property
    def opened(self) -> bool:
        return self._pool is not None

    async def close(self) -> None:
        """Let the engine go; a shared pool closes with its last user. Idempotent."""
        async with self._lock:
            self._jobs = {}
            self._pool = None
            await self._release_shared()
