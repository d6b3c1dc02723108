"""Leases: a worker renews the lease of every job it holds in one statement, and rescues jobs
whose lease ended (their worker stopped heartbeating) in another.

A heartbeat that finds a job no longer held by its claim (lease lapsed and reclaimed, cancelled,
purged) reports it lost, so the worker stops that handler. The rescue itself is one SQL
function (sql/schema/rescue_stalled_jobs.sql): stall budget, dependents and wake-ups included.

The worker also keeps each lease's end on its own clock (``JobContext.lease_until``: when the
statement that set it was sent, plus the lease, so never later than the database's). When
heartbeats cannot land before that end (the database is out of reach), the job is no longer the
worker's: another worker may rescue it. A watch of its own (not the heartbeat loop, which may
be waiting on a dead connection or a connect) reports it lapsed at that moment, without asking
the database, and the worker stops acting as its owner.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

import asyncpg

from pgjobs.context import JobContext
from pgjobs.executor import TRANSIENT_ERRORS, Database
from pgjobs.retrying import Outage, retry_delay

logger = logging.getLogger("pgjobs.worker")

RESCUE_BATCH = 1000


class LeaseKeeper:
    """Runs the heartbeat and rescue loops of one worker between ``start()`` and ``stop()``.

    ``held()`` returns the contexts whose lease to renew; ``on_lost(ctx)`` is called for each
    one a heartbeat found taken over; ``on_lapsed(contexts)`` with those whose lease ran out
    before a heartbeat could renew it; ``on_rescued(rows)`` with the rows (id, status, queue,
    job_key) of each rescue that put jobs back; ``on_renewed(contexts)`` with those whose
    lease a heartbeat renewed. ``outage`` hears of every failure and answer.
    ``db``'s deadline bounds each statement; a heartbeat's is also bounded by the heartbeat
    interval and by the nearest lease end, so that a second try still lands inside the lease.
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
        on_lapsed: Callable[[list[JobContext]], None],
        on_rescued: Callable[[list[asyncpg.Record]], None],
        outage: Outage,
        on_beat: Callable[[], Awaitable[None]] | None = None,
        on_renewed: Callable[[list[JobContext]], None] | None = None,
    ) -> None:
        self._db = db
        self._channel = channel
        self.lease = lease
        self.heartbeat_interval = heartbeat_interval
        self.rescue_interval = rescue_interval
        self._held = held
        self._on_lost = on_lost
        self._on_lapsed = on_lapsed
        self._on_rescued = on_rescued
        self._outage = outage
        self._on_beat = on_beat
        self._on_renewed = on_renewed
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._heartbeat_loop(), name="pgjobs-heartbeat"),
            asyncio.create_task(self._rescue_loop(), name="pgjobs-rescue"),
            asyncio.create_task(self._lapse_loop(), name="pgjobs-lease-watch"),
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []

    async def heartbeat(self) -> None:
        """Renew every held lease once; report the jobs no longer held, and those whose lease
        ran out before the renewal could land."""
        held = self._lapse()
        if not held:
            return
        sent = time.monotonic()
        deadline = self.heartbeat_interval
        if self._db.deadline is not None:
            deadline = min(deadline, self._db.deadline)
        deadline = min(deadline, min(c.lease_until for c in held) - sent)
        try:
            rows = await self._db.fetch(
                "heartbeat_relaxed",
                [c.id for c in held],
                [c.lock_token for c in held],
                self.lease,
                deadline=deadline,
            )
        finally:
            self._lapse()
        owned = {row["id"] for row in rows}
        renewed = []
        for ctx in held:
            if ctx.id in owned:
                ctx.lease_until = max(ctx.lease_until, sent + self.lease)
                renewed.append(ctx)
            else:
                self._on_lost(ctx)
        if renewed and self._on_renewed is not None:
            try:
                self._on_renewed(renewed)
            except Exception:  # a listener's error never disturbs the heartbeat
                logger.exception("on_renewed listener failed")

    def _lapse(self) -> list[JobContext]:
        """Report the held jobs whose lease has run out on this worker's clock; the others."""
        held = self._held()
        now = time.monotonic()
        lapsed = [c for c in held if c.lease_until <= now and not c.lost]
        if lapsed:
            self._on_lapsed(lapsed)
            held = [c for c in held if c.lease_until > now]
        return held

    async def rescue(self) -> list[asyncpg.Record]:
        """Put back the jobs whose lease ended (of any worker): id, status, queue, job_key."""
        return await self._db.fetch("rescue_stalled", RESCUE_BATCH, self._channel)

    async def _heartbeat_loop(self) -> None:
        failures = 0
        while True:
            await asyncio.sleep(
                self.heartbeat_interval if not failures else retry_delay(failures, first=0.25)
            )
            sent = time.monotonic()
            try:
                await self.heartbeat()
                self._outage.answered()
                failures = 0
                if self._on_beat is not None:
                    await self._on_beat()
            except TRANSIENT_ERRORS as exc:
                failures += 1
                self._outage.failed("heartbeat", exc, sent)
            except Exception:
                failures += 1
                logger.exception("heartbeat failed unexpectedly; will retry")

    async def _lapse_loop(self) -> None:
        """Wake at the nearest lease end (a job taken meanwhile ends a lease from now at the
        earliest; a heartbeat interval may be longer) and report the leases that ran out."""
        while True:
            now = time.monotonic()
            ends = [c.lease_until for c in self._held()]
            wake = now + min(self.heartbeat_interval, self.lease)
            await asyncio.sleep(max(min([wake, *ends]) - now, 0.001))
            self._lapse()

    async def _rescue_loop(self) -> None:
        while True:
            sent = time.monotonic()
            try:
                rescued = await self.rescue()
                self._outage.answered()
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
                self._outage.failed("stalled-job rescue", exc, sent)
            except Exception:
                logger.exception("stalled-job rescue failed unexpectedly; will retry")
            await asyncio.sleep(self.rescue_interval)
