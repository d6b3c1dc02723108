"""Claiming: due jobs for a worker's free slots, one statement per look, and when to look again.

The claimer knows nothing of running jobs: the worker (``Slots``) says how many slots are
free, takes what was claimed, and gives back what it claimed ahead when it pauses. Wake-ups come
from LISTEN (the worker sets ``wake``) with a slow poll as the safety net.

Waiting: a claimer about to wait registers (idle_state), and only then do writes of jobs for
its queues notify them (sql/schema/wake.sql); its look for due jobs comes after the
registration, so a job written just before is found by the look instead.

Hand-offs: the registration offers the free slots; an enqueue may then write a job already
leased to this worker and notify it alone with the row, saving the claim's round trip
(sql/schema/enqueue_job.sql). The next claim withdraws the registration and returns the
hand-offs whose notification had not arrived, so a lost notification costs time, never a job,
and a job is never taken twice (tokens seen are remembered for a while).

A rate limit of the worker's own (``rate_limit``: max starts per period) goes with each claim
(sql/schema/claim_jobs.sql): it counts in, and is held by, the window its queues share among
the workers that claim with one; nothing of it is written onto the queues. Such a worker
registers without free slots, so it is never handed a job (a hand-off would escape the count).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

import asyncpg

from pgjobs.executor import TRANSIENT_ERRORS, Database
from pgjobs.models import ClaimedRow
from pgjobs.retrying import Outage, retry_delay

logger = logging.getLogger("pgjobs.worker")

CLAIM_AHEAD_BELOW_SECONDS = 0.05
"""A worker claims ahead of its free slots only while its handlers take less than this on
average, and only as many as its slots work through in about this long: a job claimed ahead
waits for a slot, and that wait must stay short."""

HANDED_REMEMBERED_SECONDS = 60.0
"""How long the token of a hand-off is remembered, so that a notification arriving after the
claim that collected the same job is recognised (and the job not started twice)."""


def handed_row(payload: str) -> dict[str, Any]:
    """The row a hand-off notification carries (sql/schema/hand_offs.sql), with the types a
    claim's row has: JSON columns as text, timestamps as datetimes, the token as a UUID."""
    row: dict[str, Any] = json.loads(payload)
    row["run_at"] = datetime.fromisoformat(row["run_at"])
    row["created_at"] = datetime.fromisoformat(row["created_at"])
    row["lock_token"] = uuid.UUID(row["lock_token"])
    # a job handed off as it is enqueued has never stalled
    row.setdefault("stalls", 0)
    row.setdefault("deferred_failure", None)
    row.setdefault("last_error", None)
    return row


class Slots(Protocol):
    """What the claim loop needs of its worker."""

    @property
    def paused(self) -> bool: ...

    def free(self) -> int:
        """Slots without a running job."""

    def take(self, rows: list[ClaimedRow], leased_at: float) -> None:
        """Claimed rows, best first: start what fits, keep the rest for later. ``leased_at``:
        when the claim was sent (monotonic seconds), from which their lease runs."""

    def fill(self) -> None:
        """Start kept jobs while slots are free."""

    async def give_back_unstarted(self) -> None:
        """Return the jobs claimed ahead and not started (pending again, in their place)."""

    def running(self) -> bool:
        """A handler of this worker is running."""

    def working(self) -> bool:
        """A job of this worker (handler, outcome write or listener) is still in flight."""


@dataclass(frozen=True, slots=True)
class IdleState:
    """After a claim that filled fewer slots than it could."""

    until_due: float | None
    """Seconds (by the database's clock) until a claim may find something; None: nothing."""
    capped: bool
    """A due queue is at its concurrency cap: only a finish (which notifies) frees it."""
    busy: bool
    """A job of these queues and kinds is running or pending with its prerequisites met."""


class Claimer:
    """Claims for one worker's ``queues`` and ``kinds`` with a lease of ``lease`` seconds."""

    def __init__(
        self,
        db: Database,
        queues: list[str],
        kinds: list[str],
        *,
        lease: float,
        claim_ahead: int,
        slots: int,
        poll_interval: float,
        worker_id: uuid.UUID | None = None,
        worker_name: str | None = None,
        outage: Outage | None = None,
        rate_limit: tuple[int, float] | None = None,
        group_concurrency: int | None = None,
        group_rate_limit: tuple[int, float] | None = None,
    ) -> None:
        self._db = db
        self.outage = outage or Outage(logger, "claimer")
        self.queues = queues
        self.kinds = kinds
        self.lease = lease
        self.claim_ahead = claim_ahead
        self.slots = slots
        self.poll_interval = poll_interval
        self.rate_limit = rate_limit
        """The worker's own rate limit, (max starts, per seconds), or None."""
        self.group_concurrency = group_concurrency
        """The worker's cap on running jobs per group of a grouped queue, or None."""
        self.group_rate_limit = group_rate_limit
        """The worker's rate limit per group of a grouped queue, (max, per seconds), or None."""
        self.handler_seconds: float | None = None
        """Moving average of handler run times (None until one has run)."""
        self.wake = asyncio.Event()
        self.notified = False
        """Set once a notification has reached this worker (LISTEN works)."""
        self._found_by_polling = 0
        self._warned_about_listen = False
        self.worker_id = worker_id
        """The worker's id, under which it registers for hand-offs (None: it never does)."""
        self.worker_name = worker_name
        """The worker's name, recorded on each job it starts (``JobRow.worker``)."""
        self.hand_offs = False
        """Register for hand-offs when idle (the worker sets it for a run, not an until-drained
        one)."""
        self.listening: Callable[[], bool] = lambda: False
        """True while the worker's LISTEN connection is up (hand-offs need it)."""
        self._registered = False
        self._registered_at = 0.0  # when the registering statement was sent (monotonic)
        self._seen: list[uuid.UUID] = []  # tokens of hand-offs received since registering
        self._remembered: dict[uuid.UUID, float] = {}  # token -> when it was taken

    @property
    def handoff_channel(self) -> str:
        """The worker's own notification channel, on which hand-offs come."""
        return f"pgjobs_w{self.worker_id.hex}" if self.worker_id is not None else ""

    def record_run(self, seconds: float) -> None:
        average = self.handler_seconds
        self.handler_seconds = seconds if average is None else 0.9 * average + 0.1 * seconds

    def ahead_wanted(self) -> int:
        """How many jobs to claim beyond the free slots: none until handlers are known short,
        then up to ``claim_ahead``, as many as the slots finish in CLAIM_AHEAD_BELOW_SECONDS."""
        average = self.handler_seconds
        if average is None or average >= CLAIM_AHEAD_BELOW_SECONDS:
            return 0
        within = self.slots * CLAIM_AHEAD_BELOW_SECONDS / max(average, 1e-6)
        return min(self.claim_ahead, max(1, int(within)))

    async def claim(self, free: int) -> list[ClaimedRow]:
        """Up to ``free`` jobs plus those claimed ahead, best first (priority, due time, id);
        the hand-offs not yet seen since the last registration among them."""
        registered = self._registered
        max_jobs, per_seconds = self.rate_limit or (None, None)
        group_max, group_seconds = self.group_rate_limit or (None, None)
        claimed = await self._db.fetch(
            "claim_for_worker",
            self.queues,
            self.kinds,
            free,
            self.lease,
            self.ahead_wanted(),
            self.worker_id if registered else None,
            self._seen,
            max_jobs,
            per_seconds,
            self.worker_name,
            self.group_concurrency,
            group_max,
            group_seconds,
        )
        rows: list[ClaimedRow] = list(claimed)
        if registered:
            self._registered = False
            self._seen = []
            rows = self._not_taken(claimed)
        return sorted(rows, key=lambda r: (-r["priority"], r["run_at"], r["id"]))

    async def idle_state(self, free: int = 0) -> IdleState:
        """When to look again. A worker (with an id) whose LISTEN connection is up also
        registers as waiting, so that writes of jobs for its queues notify it, and offers its
        ``free`` slots for hand-offs once a notification has reached it (they come that way);
        jobs written before the registration are counted in what it returns."""
        register = self.worker_id is not None and self.listening()
        sent = time.monotonic()
        row = await self._db.fetchrow(
            "idle_state",
            self.queues,
            self.kinds,
            self.worker_id if register else None,
            free if self.hand_offs and self.notified and self.rate_limit is None else 0,
            3 * self.poll_interval,
            self.lease,
            self.handoff_channel,
            self.rate_limit[0] if self.rate_limit is not None else None,
        )
        assert row is not None
        if row["registered"]:
            self._registered = True
            self._registered_at = sent
        return IdleState(row["until_due"], bool(row["capped"]), bool(row["busy"]))

    def handed(self, token: uuid.UUID) -> bool:
        """A hand-off notification for the job leased under ``token``: True if this worker has
        not taken it yet (then it is recorded as taken)."""
        if token in self._remembered:
            return False
        self._remember(token)
        self._seen.append(token)
        return True

    async def withdraw(self) -> list[ClaimedRow]:
        """End the registration, if any; the hand-offs not yet seen (for the worker to give
        back: it is pausing or stopping)."""
        if not self._registered:
            return []
        rows = await self._db.fetch("withdraw_idle_worker", self.worker_id, self._seen)
        self._registered = False
        self._seen = []
        return self._not_taken(rows)

    def _not_taken(self, rows: list[asyncpg.Record]) -> list[ClaimedRow]:
        """``rows`` less the hand-offs whose notification arrived while the statement ran
        (taken already); the others are remembered as taken."""
        fresh: list[ClaimedRow] = []
        for row in rows:
            if row["lock_token"] not in self._remembered:
                self._remember(row["lock_token"])
                fresh.append(row)
        return fresh

    def _remember(self, token: uuid.UUID) -> None:
        now = time.monotonic()
        self._remembered[token] = now
        cutoff = now - HANDED_REMEMBERED_SECONDS
        while self._remembered:
            oldest = next(iter(self._remembered))
            if self._remembered[oldest] >= cutoff:
                break
            del self._remembered[oldest]

    def _check_listen(self, rows: list[ClaimedRow]) -> None:
        """Jobs due at once (run_at = created_at) found by a poll, while no notification has
        ever arrived: LISTEN is not working (a transaction-mode pooler such as pgbouncer drops
        it). Warn once, after three such finds, since latency is now the poll interval."""
        if self.notified or self._warned_about_listen:
            return
        if any(r["run_at"] <= r["created_at"] for r in rows):
            self._found_by_polling += 1
        if self._found_by_polling >= 3:
            self._warned_about_listen = True
            logger.warning(
                "new jobs are reaching this worker only by polling (every %.1fs): no LISTEN "
                "notification has arrived. Behind a transaction-mode pooler (pgbouncer), "
                "connect workers to PostgreSQL directly or through a session-mode pool",
                self.poll_interval,
            )

    async def run(self, slots: Slots, stopping: asyncio.Event, *, until_drained: bool) -> None:
        """Claim whenever slots are free and work may be due, until ``stopping`` (or, with
        ``until_drained``, until nothing of these queues is running or claimable, or until a
        claim fails because the pool was closed)."""
        failures = 0
        polled = False  # this claim follows a wait that ended by timeout, not by a wake-up
        while not stopping.is_set():
            self.wake.clear()
            if slots.paused:
                await slots.give_back_unstarted()
                await self.wake.wait()
                continue
            slots.fill()
            free = slots.free()
            if free <= 0:  # every slot busy; a claim comes only once the buffer is empty
                await self.wake.wait()
                continue
            # Their lease runs from the claim, or for hand-offs it collects, from the enqueue
            # that leased them, which came after the registration.
            sent = time.monotonic()
            leased_at = self._registered_at if self._registered else sent
            rows: list[ClaimedRow] = []  # kept if only the look that follows the claim fails
            try:
                rows = await self.claim(free)
                sleep = self.poll_interval
                if len(rows) < free:
                    idle = await self.idle_state(free - len(rows))
                    if until_drained and not idle.busy and not rows and not slots.working():
                        return
                    if idle.until_due is not None and (idle.until_due > 0 or not idle.capped):
                        # Due jobs we could not take are worth an immediate retry: written
                        # after the claim looked, by a writer that did not see this worker
                        # waiting (and so woke nobody), or held by another claimer. A queue at
                        # its cap is not: we wait to be woken.
                        sleep = min(sleep, max(idle.until_due, 0.0))
                failures = 0
                self.outage.answered()
            except TRANSIENT_ERRORS as exc:
                if self._db.closed:
                    return  # the worker stops: its pool was closed under it
                failures += 1
                sleep = retry_delay(failures)
                self.outage.failed("claim", exc, sent)
            except Exception:  # never let the worker die silently: log it and back off
                failures += 1
                sleep = retry_delay(failures)
                logger.exception("claim failed unexpectedly; retrying in %.1fs", sleep)
            if polled:
                self._check_listen(rows)
            slots.take(rows, leased_at)
            polled = False
            if len(rows) >= free or slots.paused:
                # paused meanwhile: the registration just made is withdrawn at the top
                continue
            if sleep > 0:
                try:
                    await asyncio.wait_for(self.wake.wait(), timeout=sleep)
                except TimeoutError:
                    polled = True
