"""Leases: a worker renews the lease of every job it holds in one statement, and rescues jobs
whose lease ended (their worker stopped heartbeating) in another.

A heartbeat that finds a job no longer held by its claim (lease lapsed and reclaimed, cancelled,
purged) reports it lost, so the worker stops that handler. The rescue itself is one SQL
function (sql/schema/rescue_stalled_jobs.sql): stall budget, dependents and wake-ups included.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

import asyncpg

from pgjobs.context import JobContext
from pgjobs.executor import TRANSIENT_ERRORS, Database

logger = logging.getLogger("pgjobs.worker")

RESCUE_BATCH = 1000


class LeaseKeeper:
    """Runs the heartbeat and rescue loops of one worker between ``start()`` and ``stop()``.

    ``held()`` returns the contexts whose lease to renew; ``on_lost(ctx)`` is called for each
    one a heartbeat found taken over; ``on_rescued(rows)`` with the rows (id, status, queue,
    job_key) of each rescue that put jobs back.
    """

    def __init__(
        self,
        db: Database,
        channel: str,
        *,
        lease: float,
        heartbeat_interval: float,
        rescue_interval: float,
        held: Callable[[], list[JobContext]],
        on_lost: Callable[[JobContext], None],
        on_rescued: Callable[[list[asyncpg.Record]], None],
        on_beat: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._db = db
        self._channel = channel
        self.lease = lease
        self.heartbeat_interval = heartbeat_interval
        self.rescue_interval = rescue_interval
        self._held = held
        self._on_lost = on_lost
        self._on_rescued = on_rescued
        self._on_beat = on_beat
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._heartbeat_loop(), name="pgjobs-heartbeat"),
            asyncio.create_task(self._rescue_loop(), name="pgjobs-rescue"),
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []

    async def heartbeat(self) -> None:
        """Renew every held lease once; report the jobs no longer held."""
        held = self._held()
        if not held:
            return
        rows = await self._db.fetch(
            "heartbeat_relaxed", [c.id for c in held], [c.lock_token for c in held], self.lease
        )
        owned = {row["id"] for row in rows}
        for ctx in held:
            if ctx.id not in owned:
                self._on_lost(ctx)

    async def rescue(self) -> list[asyncpg.Record]:
        """Put back the jobs whose lease ended (of any worker): id, status, queue, job_key."""
        return await self._db.fetch("rescue_stalled", RESCUE_BATCH, self._channel)

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_interval)
            try:
                await self.heartbeat()
                if self._on_beat is not None:
                    await self._on_beat()
            except TRANSIENT_ERRORS as exc:
                logger.warning("heartbeat failed (%s); will retry", exc)
            except Exception:
                logger.exception("heartbeat failed unexpectedly; will retry")

    async def _rescue_loop(self) -> None:
        while True:
            try:
                rescued = await self.rescue()
                if rescued:
                    self._on_rescued(rescued)
                    for row in rescued:
                        logger.warning(
                            "job %s (queue %s) stalled: its lease expired; now %s",
                            row["id"],
                            row["queue"],
                            row["status"],
                            extra={
                                "job_id": row["id"],
                                "queue": row["queue"],
                                "outcome": "stalled",
                                "status": row["status"],
                            },
                        )
            except TRANSIENT_ERRORS as exc:
                logger.warning("stalled-job rescue failed (%s); will retry", exc)
            except Exception:
                logger.exception("stalled-job rescue failed unexpectedly; will retry")
            await asyncio.sleep(self.rescue_interval)
