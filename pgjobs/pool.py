"""asyncpg's pool with a spare lane: a connection released in a clean state (no transaction,
no listener, not closed, not released because of an error) is kept aside, up to SPARE, and the
next acquire takes it back at once. asyncpg's own acquire and release cost a timer, a future
and a shielded task each (about 40 µs, a fifth of a one-statement enqueue on a local server).

A connection is only kept aside while no caller is in asyncpg's acquire, so it never holds
back a caller waiting for a connection; ``close``,
``terminate`` and ``expire_connections`` give the spares back first, and ``drop_idle`` closes them
with the idle ones. Every acquirer goes
through ``acquire`` (asyncpg's own ``fetch``, ``execute`` ... included), so a spare is just a
connection taken early. Requires the engine's rule for shared pools: no session state left on
a released connection (see ``executor.create_pool``). It reads asyncpg's internals (a proxy's
connection and its listener lists, the pool's connection holders), which is why asyncpg is
pinned below 0.33;
tests/engine/test_pool.py fails if they move."""

from __future__ import annotations

from collections.abc import Generator
from types import TracebackType
from typing import Any

import asyncpg
from asyncpg.pool import Pool as AsyncpgPool

SPARE = 4
"""Connections kept aside at most."""


class Pool(AsyncpgPool):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._spare: list[Any] = []
        self._keeping = True
        self.waiting = 0
        """Callers in asyncpg's acquire: while there is one, releases go to asyncpg."""

    def acquire(self, *, timeout: float | None = None) -> _Acquire:  # type: ignore[override]
        return _Acquire(self, timeout)

    async def _take(self, timeout: float | None) -> Any:  # noqa: ASYNC109 (asyncpg's)
        while self._spare:
            connection = self._spare.pop()
            if connection._con is None:
                continue  # closed by the server meanwhile: asyncpg took its slot back
            if not connection.is_closed():
                return connection
            await AsyncpgPool.release(self, connection)
        self.waiting += 1  # no spare: asyncpg's queue (a release now goes there)
        try:
            return await AsyncpgPool.acquire(self, timeout=timeout)
        finally:
            self.waiting -= 1

    def _can_keep(self, connection: Any) -> bool:
        inner = getattr(connection, "_con", None)
        return (
            self._keeping
            and len(self._spare) < SPARE
            and inner is not None
            and not inner.is_closed()
            and not inner.is_in_transaction()
            and not inner._listeners
            and not inner._log_listeners
            and not self.waiting
        )

    async def release(
        self,
        connection: Any,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 (asyncpg's signature)
    ) -> None:
        if self._can_keep(connection):
            self._spare.append(connection)
            return
        await AsyncpgPool.release(self, connection, timeout=timeout)

    async def _give_back(self) -> None:
        spare, self._spare = self._spare, []
        for connection in spare:
            await AsyncpgPool.release(self, connection)

    async def close(self) -> None:
        self._keeping = False
        await self._give_back()
        await super().close()

    def terminate(self) -> None:
        self._keeping = False
        self._spare = []
        super().terminate()

    async def expire_connections(self) -> None:
        await self._give_back()
        await super().expire_connections()

    def drop_idle(self) -> None:
        """Close every connection no caller holds (the spares and asyncpg's idle ones) at once,
        without a goodbye to the server: after one connection went silent, the others opened
        over the same network are suspect, and a graceful close of a dead one would wait on
        it. The next acquire opens a new connection."""
        spare, self._spare = self._spare, []
        for connection in spare:
            connection.terminate()
        for holder in self._holders:  # type: ignore[attr-defined]
            inner = holder._con
            if holder._in_use is None and inner is not None and not inner.is_closed():
                inner.terminate()


class _Acquire:
    """``async with pool.acquire() as conn`` and ``conn = await pool.acquire()``. A block left
    by an exception releases through asyncpg (its reset and cancellation handling)."""

    __slots__ = ("_connection", "_pool", "_timeout")

    def __init__(self, pool: Pool, timeout: float | None) -> None:
        self._pool = pool
        self._timeout = timeout
        self._connection: Any = None

    async def __aenter__(self) -> Any:
        self._connection = await self._pool._take(self._timeout)
        return self._connection

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        connection, self._connection = self._connection, None
        if kind is None:
            await self._pool.release(connection)
        else:
            await AsyncpgPool.release(self._pool, connection)

    def __await__(self) -> Generator[Any, None, Any]:
        return self._pool._take(self._timeout).__await__()


async def create(dsn: str | None, *, min_size: int, max_size: int, **kwargs: Any) -> Pool:
    """A started Pool; arguments as ``asyncpg.create_pool``'s."""
    options: dict[str, Any] = {
        "max_queries": 50000,
        "max_inactive_connection_lifetime": 300.0,
        "connect": None,
        "setup": None,
        "init": None,
        "reset": None,
        "loop": None,
        "connection_class": asyncpg.Connection,
        "record_class": asyncpg.Record,
    }
    options.update(kwargs)
    pool = Pool(dsn, min_size=min_size, max_size=max_size, **options)
    await pool
    return pool
