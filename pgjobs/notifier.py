"""One LISTEN connection per worker: wakes claimers within milliseconds of an enqueue's commit.

Notifications are a latency optimisation only; the worker's poll is the safety net, so a
dropped connection loses time, never jobs. On reconnect every listener is woken once,
because notifications sent while disconnected are gone.

The connection is checked, not trusted: a quiet one is probed with a round trip under the
database's deadline, and one that does not answer is closed and replaced (the worker polls
meanwhile). When the notifier stops, a connection that has been answering is given back to
the pool, its listeners removed within the loop deadline (a new connection would cost the next
statements their server-side caches); any other is closed at once, never handed back: an
UNLISTEN on a connection gone silent would wait on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import asyncpg

from pgjobs import network
from pgjobs.executor import Database, terminate
from pgjobs.retrying import retry_delay

logger = logging.getLogger("pgjobs.notifier")

PROBE_SECONDS = 5.0
"""How often the LISTEN connection is probed: a silent one is noticed within this plus the
probe's deadline."""
CLOSING_CHECK_SECONDS = 1.0
"""How often the notifier looks whether its pool is being closed (which waits for it)."""


class Notifier:
    """For each channel of ``listeners``, calls its listener with the payload of every NOTIFY,
    and with None after a reconnect (anything may have been missed). One connection listens
    to them all."""

    def __init__(self, db: Database, listeners: dict[str, Callable[[str | None], None]]) -> None:
        self._db = db
        self._pool: asyncpg.Pool = db.pool
        self._listeners = listeners
        self._channels = ", ".join(listeners)
        self._task: asyncio.Task[None] | None = None
        self._listening = asyncio.Event()
        self._stopping = False
        self._handover: tuple[Any, Any] | None = None  # what stop() gives back to the pool
        self.connected = False
        """True while the LISTEN is in place (False from the moment its connection fails)."""

    async def start(self) -> None:
        """Start listening; returns once the first LISTEN is in place (or after a short wait)."""
        self._task = asyncio.create_task(self._run(), name="pgjobs-notifier")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._listening.wait(), timeout=5.0)

    async def stop(self) -> None:
        if self._task is not None:
            self._stopping = True
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        handover, self._handover = self._handover, None
        if handover is not None:
            await self._give_back(*handover)

    def _deliver(self, _conn: Any, _pid: int, channel: str, payload: str) -> None:
        self._listeners[channel](payload)

    async def _run(self) -> None:
        failures = 0
        first = True
        while True:
            conn: Any = None
            lost = asyncio.Event()
            on_lost: Callable[[Any], None] | None = None
            try:
                conn = await self._connect()
                on_lost = _setting(lost)
                conn.add_termination_listener(on_lost)
                for channel in self._listeners:
                    await conn.add_listener(channel, self._deliver)
                if not first:
                    logger.info("LISTEN %s re-established", self._channels)
                    for listener in self._listeners.values():
                        listener(None)
                first = False
                failures = 0
                self.connected = True
                self._listening.set()
                # A LISTEN connection that dies silently (a server restart, a network gone
                # quiet) is only noticed when used, so probe it now and then. A pool being
                # closed waits for this connection: give it back within a second, and wake every
                # listener (its next statement finds the pool closed).
                quiet = 0.0
                while not lost.is_set():
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(lost.wait(), timeout=CLOSING_CHECK_SECONDS)
                    if self._db.closed:
                        connection, conn = conn, None
                        self._disconnect(connection)
                        for listener in self._listeners.values():
                            listener(None)
                        return
                    quiet += CLOSING_CHECK_SECONDS
                    if not lost.is_set() and quiet >= PROBE_SECONDS:
                        quiet = 0.0
                        await self._db.fetchval("ping", conn=conn)
                raise ConnectionError("LISTEN connection closed")
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if self._db.closed:
                    return  # the owner closed the pool: nothing left to listen with
                failures += 1
                delay = retry_delay(failures, first=0.1)
                logger.warning(
                    "LISTEN %s lost (%s); reconnecting in %.1fs", self._channels, exc, delay
                )
                await asyncio.sleep(delay)
            finally:
                answering = self.connected and not lost.is_set()
                self.connected = False
                if conn is not None:
                    if self._stopping and answering and self._db.listen_dsn is None:
                        self._handover = (conn, on_lost)
                    else:
                        with contextlib.suppress(Exception):
                            self._disconnect(conn)

    async def _connect(self) -> Any:
        """The LISTEN connection: a session of its own on ``listen_dsn`` if the database has
        one (behind a transaction-mode pooler), else one of the pool's."""
        if self._db.listen_dsn is not None:
            return await network.connect(self._db.listen_dsn, self._db.timeouts)
        return await self._pool.acquire()

    async def _give_back(self, conn: Any, on_lost: Callable[[Any], None] | None) -> None:
        """Remove the listeners of the pool's ``conn`` and give it back, within the loop
        deadline; a connection that does not answer in time is closed instead."""
        try:
            if on_lost is not None:
                conn.remove_termination_listener(on_lost)
            async with asyncio.timeout(self._db.timeouts.loop):
                for channel in self._listeners:
                    await conn.remove_listener(channel, self._deliver)
            await self._pool.release(conn)
        except Exception:
            terminate(conn)

    def _disconnect(self, conn: Any) -> None:
        """Close the connection at once, listeners and all; a pool's connection gives its slot
        back (a pool being closed waits for every connection it lent), and the pool opens a
        new one when next needed."""
        terminate(conn)


def _setting(event: asyncio.Event) -> Callable[[Any], None]:
    """A termination listener that sets ``event``."""
    return lambda _conn: event.set()
