"""The worker: wires LISTEN (notifier.py) -> claim (claimer.py) -> run (runner.py) -> write
(completer.py), keeps its leases (lease.py), and shuts down gracefully. It owns the slots: which
jobs run, which wait claimed ahead, and what goes back when it stops or pauses."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypedDict

import asyncpg

from pgjobs import jsonvalue, runner, validation
from pgjobs.claimer import Claimer, handed_row
from pgjobs.completer import Completer, Written
from pgjobs.config import cancels_channel, notify_channel
from pgjobs.context import JobContext
from pgjobs.enqueue import record_kinds
from pgjobs.errors import InvalidOption, PendingPrerequisites, PoolClosed
from pgjobs.executor import TRANSIENT_ERRORS, Database
from pgjobs.kinds import Kind, Registry
from pgjobs.lease import LeaseKeeper
from pgjobs.maintenance import SweepInput, sweep_metrics
from pgjobs.models import ClaimedRow, Durability
from pgjobs.notifier import Notifier
from pgjobs.outcomes import Outcome, decide
from pgjobs.retrying import Outage, retry_delay, wait_or_stop
from pgjobs.schedules import Schedules
from pgjobs.telemetry import Telemetry

logger = logging.getLogger("pgjobs.worker")

DEFAULT_CONCURRENCY = 10
CLAIM_AHEAD_PER_SLOT = 4
"""The default ``claim_ahead`` per slot (Celery's default prefetch multiplier is 4 too)."""
DEFAULT_LEASE_SECONDS = 30.0
"""A running job whose worker has not heartbeated for this long is rescued by another worker."""
DEFAULT_POLL_SECONDS = 1.0
"""Safety-net poll when no notification arrives (notifications normally wake within ms)."""
LISTEN_PROBE = "probe"
"""What a worker sends itself on its hand-off channel once it listens: its arrival shows that
notifications reach the worker (none do behind a transaction-mode pooler), which hand-offs
need. Queue notifications cannot show it: they come only to a worker already waiting."""
QUEUE_GAUGE_SECONDS = 15.0
"""With telemetry, how often a worker refreshes its queues' depth and lag gauges."""
FOLD_SECONDS = 10.0
"""How often a worker folds the finished counts (one worker at a time: fold_finished_counts),
so that reading a count sums one row per queue and status plus at most this long's changes."""
SWEEP_SECONDS = 60.0
"""How often a worker sweeps finished jobs into the metrics rollup (one at a time), so that
charts read the rollup plus at most this long's live rows, with no maintenance job set up."""
DEFAULT_SHUTDOWN_SECONDS = 30.0


WorkerEvent = str
"""``active`` (handler starting), then once its outcome is written: ``completed``, ``retrying``
(back to pending after a failure), ``deferred``, ``failed`` (dead), or ``lost`` (the write was
refused: the job had been taken over)."""

EventListener = Callable[[WorkerEvent, JobContext, dict[str, Any]], Any]
RescueListener = Callable[[list[asyncpg.Record]], Any]
ErrorListener = Callable[[BaseException], Any]
RenewalListener = Callable[[list[JobContext]], Any]
"""Called after each heartbeat with the jobs (running or claimed ahead) whose lease it
renewed."""


class WorkerOptions(TypedDict, total=False):
    """The options of ``JobQueue.worker`` (Worker's keyword arguments), so that a type checker
    catches a misspelt one."""

    queues: list[str] | None
    concurrency: int
    lease: float
    heartbeat_interval: float | None
    rescue_interval: float | None
    poll_interval: float
    shutdown_timeout: float
    on_event: EventListener | None
    claim_ahead: int | None
    on_rescue: RescueListener | None
    name: str | None
    durability: Durability | str
    telemetry: Telemetry | None
    deadline: float | None
    on_error: ErrorListener | None
    on_renewed: RenewalListener | None
    rate_limit: int | None
    rate_period: float | None
    group_concurrency: int | None
    group_rate_limit: int | None
    group_rate_period: float | None


"""Called with the jobs a rescue of this worker put back or failed: id, status (``pending``
or ``dead``), queue, job_key."""


@dataclass(slots=True)
class WorkerStats:
    """Counters since the worker started. ``lost`` counts writes refused because another
    actor had taken the job over (lease expiry, cancel, purge); ``handed`` counts the jobs
    that reached it by hand-off (claimer.py), also counted in ``claimed``."""

    claimed: int = 0
    handed: int = 0
    completed: int = 0
    retried: int = 0
    deferred: int = 0
    dead: int = 0
    lost: int = 0
    rescued: int = 0


class Worker:
    """Runs the handlers of ``registry`` for jobs of ``queues``.

    Guarantees: a job is run by at most one worker at a time as long as its lease is
    renewed; every write about a running job is fenced by its claim's lock token; a job
    whose worker dies is rescued after ``lease`` seconds; ``stop()`` lets in-flight handlers
    finish up to a timeout and puts the rest back to pending without using an attempt, in
    their place in the queue.

    Claiming ahead: while handlers are short (under ``claimer.CLAIM_AHEAD_BELOW_SECONDS`` on
    average), each claim also takes up to ``claim_ahead`` jobs (default: 4 per slot, Celery's
    prefetch multiplier) to start as slots free, so that short jobs are claimed in larger
    batches; never more than the slots work through in about 50 ms. They are leased and
    heartbeated like running ones and given back (pending, attempt refunded, place kept) on
    ``stop()`` and ``pause()``; queues with a concurrency cap or a rate limit are never claimed
    ahead. ``claim_ahead=0`` turns it off.

    ``durability``: how the outcomes this worker writes commit (see Durability); ``async``
    may lose the outcomes of the last moments in a server crash, and those jobs run again.

    A database gone silent: every statement of the worker's loops has a deadline
    (``deadline`` seconds, default the connection's ``Timeouts.loop``, 10 s; never more than
    the lease, and for a heartbeat never more than the heartbeat interval), after which its
    connection is closed and the statement retried on a new one. A job whose lease runs out
    before a heartbeat can renew it is no longer this worker's: its handler is cancelled (its
    fenced writes refused from then on) and it is left to the stalled-job rescue. The worker
    logs the outage once, calls ``on_error(error)`` once per outage, and claims again as soon
    as the database answers.

    ``on_renewed(contexts)`` hears of every heartbeat that renewed leases, with the jobs it
    renewed (running or claimed ahead).

    ``rate_limit`` starts per ``rate_period`` seconds (both or neither): a limit of this
    worker's own, passed with each of its claims and never written onto its queues, so it ends
    with the worker. All workers of a queue that have one share one fleet-wide window per queue
    (BullMQ's limiter key): each starts jobs only while the window's count is under its own
    ``rate_limit``, and the claim that opens a window gives it its own ``rate_period``. Workers
    without one neither count in that window nor wait for it; a queue's ``set_rate_limit``
    holds every worker, these included. Such a worker claims nothing ahead and is never handed
    a job as it is enqueued.

    In a grouped queue (jobs with a ``group_key``), claims serve the groups in turn (see
    docs/concepts.md, "Groups"). ``group_concurrency`` caps the running jobs of each group,
    fleet-wide, where the group has no cap of its own (``set_group_settings``) and before the
    queue's ``set_group_concurrency``; ``group_rate_limit`` starts per ``group_rate_period``
    seconds (both or neither) limit each group that has no limit of its own, counted in the
    group's window, which every start of the group counts in. Both are this worker's, passed
    with its claims (BullMQ Pro's worker ``group`` options).

    ``heartbeat_interval`` (default a third of the lease) may be at or past the lease: then
    no lease is renewed in time, and a job that runs longer than its lease lapses as above
    (its handler cancelled, the event ``lost``, the job left to the stalled-job rescue), as
    BullMQ's ``lockRenewTime`` past ``lockDuration`` lets a lock expire. Nothing is claimed
    ahead then (jobs waiting for a slot would lapse unrun): ``claim_ahead`` must be 0.
    """

    def __init__(
        self,
        db: Database,
        registry: Registry,
        *,
        queues: list[str] | None = None,
        concurrency: int = DEFAULT_CONCURRENCY,
        lease: float = DEFAULT_LEASE_SECONDS,
        heartbeat_interval: float | None = None,
        rescue_interval: float | None = None,
        poll_interval: float = DEFAULT_POLL_SECONDS,
        shutdown_timeout: float = DEFAULT_SHUTDOWN_SECONDS,
        on_event: EventListener | None = None,
        claim_ahead: int | None = None,
        on_rescue: RescueListener | None = None,
        name: str | None = None,
        durability: Durability | str = Durability.DURABLE,
        telemetry: Telemetry | None = None,
        deadline: float | None = None,
        on_error: ErrorListener | None = None,
        on_renewed: RenewalListener | None = None,
        rate_limit: int | None = None,
        rate_period: float | None = None,
        group_concurrency: int | None = None,
        group_rate_limit: int | None = None,
        group_rate_period: float | None = None,
    ) -> None:
        handled = [kind for kind in registry if kind.handler is not None]
        if not handled:
            raise InvalidOption("registry", "has no kind with a handler: nothing to run")
        self.queues = sorted(
            set(queues) if queues is not None else {kind.queue for kind in handled}
        )
        if not self.queues or not all(isinstance(q, str) and q for q in self.queues):
            raise InvalidOption(
                "queues", f"must be a non-empty list of queue names, got {queues!r}"
            )
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise InvalidOption("concurrency", f"must be an integer >= 1, got {concurrency!r}")
        if not lease > 0:
            raise InvalidOption("lease", f"must be > 0 seconds, got {lease!r}")
        heartbeat_interval = lease / 3 if heartbeat_interval is None else heartbeat_interval
        if not heartbeat_interval > 0:
            raise InvalidOption(
                "heartbeat_interval", f"must be > 0 seconds, got {heartbeat_interval!r}"
            )
        lapsing = heartbeat_interval >= lease  # no lease is renewed in time
        if claim_ahead is None:
            claim_ahead = 0 if lapsing else CLAIM_AHEAD_PER_SLOT * concurrency
        if isinstance(claim_ahead, bool) or not isinstance(claim_ahead, int) or claim_ahead < 0:
            raise InvalidOption("claim_ahead", f"must be an integer >= 0, got {claim_ahead!r}")
        if lapsing and claim_ahead:
            raise InvalidOption(
                "claim_ahead",
                f"must be 0 with a heartbeat_interval at or past the lease ({lease}s): jobs "
                "claimed ahead would lapse before they start",
            )
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise InvalidOption("name", f"must be a non-empty string, got {name!r}")
        if not poll_interval > 0:
            raise InvalidOption("poll_interval", f"must be > 0 seconds, got {poll_interval!r}")
        own_limit = None
        if rate_limit is not None or rate_period is not None:
            own_limit = validation.rate_limit(
                rate_limit, rate_period, ("rate_limit", "rate_period")
            )
        self.rate_limit = own_limit
        """This worker's own rate limit, (max starts, per seconds), or None."""
        group_limit = None
        if group_rate_limit is not None or group_rate_period is not None:
            group_limit = validation.rate_limit(
                group_rate_limit, group_rate_period, ("group_rate_limit", "group_rate_period")
            )
        if group_concurrency is not None:
            validation.integer("group_concurrency", group_concurrency, 1, 2**31 - 1)
        deadline = db.timeouts.loop if deadline is None else deadline
        if isinstance(deadline, bool) or not isinstance(deadline, int | float) or not deadline > 0:
            raise InvalidOption("deadline", f"must be > 0 seconds, got {deadline!r}")
        self.deadline = min(float(deadline), float(lease))
        """Seconds any statement of this worker's loops may go unanswered (heartbeats: also at
        most the heartbeat interval)."""
        self.name = name or f"{socket.gethostname()}:{os.getpid()}"
        self._on_error = on_error
        self._outage = Outage(logger, f"worker {self.name!r}", self._report_error)
        db = db.with_deadline(self.deadline)
        self._db = db
        self._kinds: dict[str, Kind[Any]] = {kind.name: kind for kind in handled}
        self.concurrency = concurrency
        self.shutdown_timeout = float(shutdown_timeout)
        self.stats = WorkerStats()
        self._channel = notify_channel(db.schema)
        worker_uuid = uuid.uuid4()
        self.id = str(worker_uuid)
        """This worker in ``JobQueue.list_workers`` (while it runs)."""
        self._claimer = Claimer(
            db,
            self.queues,
            sorted(self._kinds),
            lease=float(lease),
            claim_ahead=claim_ahead,
            slots=concurrency,
            poll_interval=float(poll_interval),
            worker_id=worker_uuid,
            worker_name=self.name,
            outage=self._outage,
            rate_limit=own_limit,
            group_concurrency=group_concurrency,
            group_rate_limit=group_limit,
        )
        self._leases = LeaseKeeper(
            db,
            self._channel,
            lease=float(lease),
            heartbeat_interval=float(heartbeat_interval),
            rescue_interval=float(
                rescue_interval if rescue_interval is not None else min(lease / 2, 15.0)
            ),
            held=self._held,
            on_lost=self._taken_over,
            on_lapsed=self._leases_lapsed,
            on_rescued=self._count_rescued,
            outage=self._outage,
            on_beat=self._report_presence,
            on_renewed=on_renewed,
        )
        self._advancing: dict[int, asyncio.Task[None]] = {}
        self._stopping = asyncio.Event()
        self._hurry = asyncio.Event()  # a second stop(): release running handlers now
        self._finished = asyncio.Event()
        self._finished.set()  # not running
        self._paused = False
        self._until_drained = False
        self._running: dict[int, tuple[JobContext, asyncio.Task[None]]] = {}
        self._settling = 0
        """Slots held by jobs whose outcome, due again at once (an immediate retry), is being
        written: the next claim then sees them among the queue's due jobs, in their place."""
        self._ahead: deque[tuple[JobContext, ClaimedRow]] = deque()  # claimed, not started
        self._tasks: set[asyncio.Task[None]] = set()
        self._releasing = False
        self._abandoning = False
        self.durability = validation.durability(durability)
        self._commit = validation.commit_setting(self.durability)
        self._completer = Completer(db, self._lost, self._commit, self._outage)
        self._schedules = Schedules(db, registry)
        self._main: asyncio.Task[None] | None = None
        self._on_event = on_event
        self._telemetry = telemetry
        self._gauges_due = 0.0
        self._on_rescue = on_rescue

    @property
    def lease(self) -> float:
        return self._claimer.lease

    @property
    def claim_ahead(self) -> int:
        return self._claimer.claim_ahead

    @property
    def poll_interval(self) -> float:
        return self._claimer.poll_interval

    @property
    def heartbeat_interval(self) -> float:
        return self._leases.heartbeat_interval

    @property
    def rescue_interval(self) -> float:
        return self._leases.rescue_interval

    # -- lifecycle -------------------------------------------------------------------------

    async def run(self, *, until_drained: bool = False) -> None:
        """Work until ``stop()`` is called; with ``until_drained``, also return once no job of
        these queues and kinds is running or pending with its prerequisites met (delayed ones
        included: the worker waits for them). A missing or outdated schema raises SchemaMissing;
        a database that cannot be reached at start is retried (logged) until it answers. A pool
        closed under the worker ends it as a kill would (handlers cancelled, their jobs left to
        their lease) and raises PoolClosed."""
        self._finished.clear()
        try:
            await self._run(until_drained)
        finally:
            self._finished.set()

    async def _run(self, until_drained: bool) -> None:
        if not await self._schema_checked():
            return  # stopped while waiting for the database
        notifier = Notifier(
            self._db,
            {
                self._channel: self._on_notify,
                cancels_channel(self._db.schema): self._on_cancel,
                self._claimer.handoff_channel: self._on_handoff,
            },
        )
        self._until_drained = until_drained
        self._claimer.hand_offs = not until_drained
        self._claimer.listening = lambda: notifier.connected
        self._completer.start()
        await notifier.start()
        if notifier.connected:  # whether notifications reach us: a pooler may swallow them
            with contextlib.suppress(*TRANSIENT_ERRORS):
                await self._db.fetch("notify_queues", [LISTEN_PROBE], self._claimer.handoff_channel)
        self._leases.start()
        # A run until drained is a batch, not part of the fleet: it leaves upkeep to the fleet.
        upkeep = (
            None if until_drained else asyncio.create_task(self._upkeep(), name="pgjobs-upkeep")
        )
        with contextlib.suppress(*TRANSIENT_ERRORS):
            await self._report_presence()
            await record_kinds(self._db, self._kinds.values())  # for enqueues from SQL
        try:
            await self._claimer.run(self, self._stopping, until_drained=until_drained)
            pool_closed = self._db.closed and not self._stopping.is_set()
            if pool_closed:  # nothing can be written any more: stop as a killed worker would
                self._abandoning = True
                self._hurry.set()
        finally:
            if upkeep is not None:
                upkeep.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await upkeep
            if not self._db.closed:
                await self.give_back_unstarted()
            await self._drain_running()
            await self._leases.stop()
            await self._completer.stop()
            await notifier.stop()
            with contextlib.suppress(*TRANSIENT_ERRORS):
                await self._db.fetch("worker_gone", self.id)
        if pool_closed:
            raise self._pool_closed()

    def _pool_closed(self) -> PoolClosed:
        return PoolClosed(
            f"worker {self.name!r}",
            "it stopped, and the jobs it was running come back when their lease ends",
        )

    async def _upkeep(self) -> None:
        """Upkeep the fleet shares, done by whichever worker gets to it (each step takes a lock
        and is skipped while another session holds it): fold the finished counts every
        FOLD_SECONDS and sweep the metrics rollup every SWEEP_SECONDS, so that counts and
        charts stay fast with nothing but workers running. A failure is logged and retried
        at the next turn; it never stops the worker."""
        sweep_due = 0.0
        while True:
            try:
                await self._db.fetchval("fold_finished_counts")
                if time.monotonic() >= sweep_due:
                    sweep_due = time.monotonic() + SWEEP_SECONDS
                    await sweep_metrics(self._db, SweepInput())
            except TRANSIENT_ERRORS as exc:
                logger.warning("upkeep (finished counts, metrics) failed: %s; retrying", exc)
            except Exception:
                logger.exception("upkeep (finished counts, metrics) failed")
            await asyncio.sleep(FOLD_SECONDS)

    async def _report_presence(self) -> None:
        if self._telemetry is not None:
            now = time.monotonic()
            if now >= self._gauges_due:  # counting every in-flight job: not at every beat
                self._gauges_due = now + QUEUE_GAUGE_SECONDS
                try:
                    rows = await self._db.fetch("queue_gauges", self.queues)
                    self._telemetry.record_queues(self.queues, rows)
                except Exception:  # telemetry never stops the presence report
                    logger.exception("telemetry: reading the queue gauges failed")
        await self._db.fetch(
            "worker_seen",
            self.id,
            self.name,
            socket.gethostname(),
            os.getpid(),
            self.queues,
            self.concurrency,
            len(self._running) + len(self._ahead),
            self.heartbeat_interval,
        )

    async def _schema_checked(self) -> bool:
        """Refuse a missing or outdated schema (SchemaMissing); wait out a database that cannot
        be reached (logged, with backoff) until it answers (True) or ``stop()`` is called."""
        failures = 0
        while True:
            try:
                await self._db.check_schema()
                return True
            except TRANSIENT_ERRORS as exc:
                if self._db.closed:
                    raise self._pool_closed() from exc
                failures += 1
                delay = retry_delay(failures)
                logger.warning("schema check failed (%s); retrying in %.1fs", exc, delay)
                if await wait_or_stop(delay, self._stopping):
                    return False

    def start(self) -> asyncio.Task[None]:
        """Run in the background; ``stop()`` ends it."""
        self._main = asyncio.create_task(self.run(), name="pgjobs-worker")
        return self._main

    async def stop(self, timeout: float | None = None, *, release: bool = True) -> None:  # noqa: ASYNC109
        """Stop claiming; let running handlers finish for up to ``timeout`` seconds (default
        ``shutdown_timeout``), then put the rest back to pending without using an attempt
        (keeping their place in the queue). With ``release=False`` the rest are abandoned as a
        killed worker would leave them: running until their lease ends, then rescued as
        stalled (BullMQ's ``close(force)``). A second call while stopping releases the running
        handlers at once (what a second SIGTERM does to ``pgjobs worker``). Returns once
        ``run()`` has returned, however it was started: every outcome is written by then."""
        if self._stopping.is_set():
            self._hurry.set()  # a second stop: running handlers are released now
        if timeout is not None:
            self.shutdown_timeout = timeout
        self._abandoning = not release
        self._stopping.set()
        self._claimer.wake.set()
        if self._main is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._main
        await self._finished.wait()

    async def pause(self, *, wait_for_running: bool = True) -> None:
        """Stop claiming (running handlers go on); with ``wait_for_running``, return once they
        have all finished. Queue-wide pausing is ``JobQueue.pause``."""
        self._paused = True
        await self.give_back_unstarted()
        if wait_for_running:
            while self._tasks:
                await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def resume(self) -> None:
        """Claim again after ``pause``."""
        self._paused = False
        self._claimer.wake.set()

    @property
    def paused(self) -> bool:
        return self._paused

    # -- slots (the claimer's side of the worker) -------------------------------------------

    def _on_notify(self, queue: str | None) -> None:
        if queue is not None:  # None: the LISTEN connection came back, no notification
            self._claimer.notified = True
        if queue is None or queue in self.queues:
            self._claimer.wake.set()

    def _on_handoff(self, payload: str | None) -> None:
        """A job an enqueue handed to this worker (claimer.py, hand-offs): started like a
        claimed one. None: the LISTEN connection came back and hand-offs may have been missed;
        the claim the wake-up brings collects them. While pausing or stopping, nothing is
        started: withdrawing the registration gives such a job back."""
        if payload is None:
            self._claimer.wake.set()
            return
        if payload == LISTEN_PROBE:  # our own, sent at start: notifications reach us
            self._claimer.notified = True
            return
        if self._paused or self._stopping.is_set():
            return
        try:
            row = handed_row(payload)
        except (ValueError, KeyError, TypeError):
            logger.exception("unreadable hand-off notification; its job comes with the next claim")
            self._claimer.wake.set()
            return
        if self._claimer.handed(row["lock_token"]):
            self.stats.handed += 1
            self.take([row], time.monotonic())

    def _on_cancel(self, job_id: str | None) -> None:
        """A job was cancelled or purged while running: tell its handler now."""
        if job_id is not None and job_id.isdigit():
            self.cancel_job(int(job_id), "cancelled")

    def cancel_job(self, job_id: int, reason: Any = None) -> bool:
        """Signal the handler of ``job_id``, if this worker runs it, to stop (``ctx.cancelled``,
        ``ctx.cancel_reason``); True if it did. Nothing is written: what becomes of the job is
        what the handler does next (a job cancelled through ``JobQueue.cancel`` is already
        cancelled, and its late outcome is a fenced no-op)."""
        running = self._running.get(job_id)
        return running is not None and running[0].cancel(reason)

    def cancel_all_jobs(self, reason: Any = None) -> int:
        """``cancel_job`` for every handler this worker runs; how many were signalled."""
        return sum(ctx.cancel(reason) for ctx, _ in list(self._running.values()))

    def free(self) -> int:
        """How many of the worker's slots are free (a slot whose job is due again at once is
        free once that outcome is written)."""
        return self.concurrency - len(self._running) - self._settling

    def running(self) -> bool:
        """Whether any handler is running."""
        return bool(self._running)

    def working(self) -> bool:
        """Whether any task of the worker (a handler, a schedule's advance) is still under way."""
        return bool(self._tasks)

    def take(self, rows: list[ClaimedRow], leased_at: float) -> None:
        """Accept claimed rows: each becomes a handler task as a slot frees (the rows beyond the
        free slots wait, claimed ahead)."""
        for row in rows:
            self.stats.claimed += 1
            ctx = JobContext(self._db, row, self.lease, self._commit, leased_at)
            self._ahead.append((ctx, row))
        scheduled = [row for row in rows if row["schedule"] is not None]
        if scheduled:  # runs of materialized schedules: enqueue their next runs
            task = asyncio.create_task(self._advance_schedules(scheduled))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            for row in scheduled:
                self._advancing[row["id"]] = task
        self.fill()

    async def _advance_schedules(self, rows: list[ClaimedRow]) -> None:
        failures = 0
        while True:
            try:
                await self._schedules.started(rows)
                return
            except TRANSIENT_ERRORS as exc:
                failures += 1
                if failures >= 5:  # a scheduler loop repairs it (Schedules.emit_due)
                    logger.error("could not enqueue the next run of a schedule: %s", exc)
                    return
                await asyncio.sleep(retry_delay(failures))
            except Exception:
                logger.exception("could not enqueue the next run of a schedule")
                return

    def fill(self) -> None:
        """Start claimed jobs, best first, while slots are free."""
        while self._ahead and self.free() > 0:
            ctx, row = self._ahead.popleft()
            task = asyncio.create_task(self._execute(ctx, row), name=f"pgjobs-job-{ctx.id}")
            self._running[ctx.id] = (ctx, task)
            self._tasks.add(task)
            task.add_done_callback(self._job_done)

    async def give_back_unstarted(self) -> None:
        """Give back the jobs claimed but not started, and those handed to this worker and not
        yet seen (its registration for hand-offs ends): pending again, attempt refunded (a
        failed write leaves them to lease expiry)."""
        ahead, self._ahead = self._ahead, deque()
        for ctx, _ in ahead:
            self._advancing.pop(ctx.id, None)
        unstarted = [ctx for ctx, _ in ahead]
        try:
            handed = await self._claimer.withdraw()
        except Exception:  # the registration expires; its hand-offs come back by lease expiry
            logger.exception("could not withdraw this worker's registration for hand-offs")
            handed = []
        unstarted += [JobContext(self._db, row, self.lease, self._commit) for row in handed]
        if unstarted:
            await asyncio.gather(
                *(self._completer.submit(_given_back(ctx)) for ctx in unstarted),
                return_exceptions=True,
            )

    def _job_done(self, task: asyncio.Task[None]) -> None:
        """A job's task ended (its outcome written). Once every task has, an until-drained run
        must look again at once: its last look saw these jobs still running. Any other run
        looked when the handler returned (its slot was free then), and needs no second look."""
        self._tasks.discard(task)
        if not self._tasks and self._until_drained:
            self._claimer.wake.set()

    def _emit(self, event: WorkerEvent, ctx: JobContext, detail: dict[str, Any]) -> None:
        """Tell ``on_event``; a listener's error is logged, never allowed to disturb the job."""
        if self._on_event is None:
            return
        try:
            result = self._on_event(event, ctx, detail)
            if asyncio.iscoroutine(result):
                task = asyncio.ensure_future(result)
                self._tasks.add(task)
                task.add_done_callback(self._listener_done)
        except Exception:
            logger.exception("on_event listener failed on %r for job %s", event, ctx.id)

    def _listener_done(self, task: asyncio.Future[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("on_event listener failed", exc_info=task.exception())

    async def _execute(self, ctx: JobContext, row: ClaimedRow) -> None:
        kind = self._kinds[ctx.kind]
        outcome: Outcome | None = None
        if self._on_event is not None:
            self._emit("active", ctx, {})
        started = time.monotonic()
        spanning = self._telemetry.job_span(ctx) if self._telemetry else contextlib.nullcontext()
        try:
            with spanning as span:
                try:
                    advancing = self._advancing.pop(ctx.id, None)
                    if advancing is not None:  # a schedule's run starts once its next run exists
                        await asyncio.shield(advancing)
                    outcome = await runner.run(kind, row["payload"], row["backoff"], ctx, self.name)
                except asyncio.CancelledError:
                    # Cancelled by stop() past its timeout (release it, unless abandoning) or by
                    # a lost heartbeat (drop it).
                    releasing = self._releasing and not self._abandoning
                    outcome = None if ctx.lost or not releasing else _given_back(ctx)
                if span is not None:
                    span.finish(outcome)
        finally:
            self._claimer.record_run(time.monotonic() - started)
            self._running.pop(ctx.id, None)
            # A job due again at once (a retry without backoff) keeps its slot until that is
            # written, so that the claim the slot makes sees it (a higher-priority retry runs
            # before lower-priority jobs that came due meanwhile); a failure path only: a
            # completion or a retry after a backoff frees the slot as the handler returns.
            settling = outcome is not None and outcome.status == "pending" and outcome.delay == 0
            if settling:
                self._settling += 1
            else:
                self._claimer.wake.set()
        try:
            if outcome is None:
                if ctx.completed:  # by ctx.completing(), in the handler's own transaction
                    self.stats.completed += 1
                    self._emit(
                        "completed", ctx, {"output": ctx.output, "error": None, "delay": 0.0}
                    )
                elif ctx.lost:
                    self.stats.lost += 1
                    self._emit("lost", ctx, {})
                return
            try:
                written = await self._completer.submit(outcome)
                if written == "refused":
                    outcome, written = await self._refused(ctx, row)
            except Exception:  # logged by the completer; the lease brings the job back
                return
            if written == "written":
                self._count(outcome)
                _log_outcome(ctx, outcome)
                if self._on_event is not None:
                    self._emit(_event_of(outcome), ctx, _detail_of(outcome))
            else:
                self._emit("lost", ctx, {})
        finally:
            if settling:
                self._settling -= 1
                self._claimer.wake.set()

    async def _refused(self, ctx: JobContext, row: ClaimedRow) -> tuple[Outcome, Written]:
        """The job returned with prerequisites still pending (attached while it ran): its
        completion was refused, and the attempt fails as if it had raised that."""
        outcome = decide(ctx, row["backoff"], PendingPrerequisites(ctx.id), self.name)
        return outcome, await self._completer.submit(outcome)

    def _count(self, outcome: Outcome) -> None:
        if outcome.status == "completed":
            self.stats.completed += 1
        elif outcome.status == "dead":
            self.stats.dead += 1
        elif outcome.deferred:
            self.stats.deferred += 1
        elif not outcome.refund_attempt:
            self.stats.retried += 1

    def _lost(self, outcome: Outcome) -> None:
        self.stats.lost += 1
        logger.warning(
            "job %s: outcome %r discarded: job taken over (lease expired, cancelled, purged)",
            outcome.job_id,
            outcome.status,
        )

    async def _drain_running(self) -> None:
        tasks = [task for _, task in self._running.values()]
        if tasks:
            await self._wait_unless_hurried(tasks)
            late = [task for task in tasks if not task.done()]
            if late:
                if self._db.closed:
                    logger.error(
                        "the pool was closed: stopping %d running job(s), left to their lease",
                        len(late),
                    )
                else:
                    logger.warning(
                        "releasing %d job(s) still running after %.1fs",
                        len(late),
                        self.shutdown_timeout,
                    )
                self._releasing = True
                for task in late:
                    task.cancel()
        # Wait for every task, including those only waiting on the completer.
        if self._tasks:
            await asyncio.wait(list(self._tasks))

    async def _wait_unless_hurried(self, tasks: list[asyncio.Task[None]]) -> None:
        """Until ``tasks`` are done, ``shutdown_timeout`` has passed, or a second ``stop()``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.shutdown_timeout
        hurry = asyncio.ensure_future(self._hurry.wait())
        pending: set[asyncio.Future[Any]] = set(tasks)
        try:
            while pending and not self._hurry.is_set():
                left = deadline - loop.time()
                if left <= 0:
                    break
                _, pending = await asyncio.wait(
                    pending | {hurry}, timeout=left, return_when=asyncio.FIRST_COMPLETED
                )
                pending.discard(hurry)
        finally:
            hurry.cancel()

    # -- leases (the lease keeper's side) ---------------------------------------------------

    def _held(self) -> list[JobContext]:
        """Jobs whose lease to renew: running ones not yet completed nor lost, and those
        claimed ahead."""
        held = [c for c, _ in self._running.values() if not c.completed and not c.lost]
        return held + [c for c, _ in self._ahead]

    def _taken_over(self, ctx: JobContext) -> None:
        """A heartbeat found ``ctx``'s job no longer held by its claim: stop its handler, or
        forget it if it had not started."""
        running = self._running.get(ctx.id)
        if running is not None and running[0] is ctx:
            ctx.lost = True
            logger.warning("job %s: lost ownership (taken over); stopping its handler", ctx.id)
            running[1].cancel()
        elif any(item[0] is ctx for item in self._ahead):
            ctx.lost = True
            self._ahead = deque(item for item in self._ahead if item[0] is not ctx)
            self.stats.lost += 1
            logger.warning("job %s: lost ownership before it started", ctx.id)

    def _leases_lapsed(self, lapsed: list[JobContext]) -> None:
        """The leases of ``lapsed`` ran out before a heartbeat could renew them (the database
        is out of reach): another worker may rescue those jobs, so this one stops acting as
        their owner. A handler is cancelled (its context refuses fenced writes); a job claimed
        ahead is forgotten. Both are left to the stalled-job rescue."""
        ids = []
        for ctx in lapsed:
            ctx.lost = True
            ids.append(ctx.id)
            running = self._running.get(ctx.id)
            if running is not None and running[0] is ctx:
                running[1].cancel()
            elif any(item[0] is ctx for item in self._ahead):
                self._ahead = deque(item for item in self._ahead if item[0] is not ctx)
                self.stats.lost += 1
        logger.warning(
            "worker %r: the lease of %d job(s) ran out before a heartbeat could renew it (%s): "
            "they are no longer this worker's; their handlers are stopped and the jobs are "
            "left to the stalled-job rescue",
            self.name,
            len(ids),
            ", ".join(map(str, ids[:20])) + (" ..." if len(ids) > 20 else ""),
            extra={"job_ids": ids, "outcome": "lapsed"},
        )

    def _report_error(self, error: BaseException) -> None:
        """The first failure of an outage: tell ``on_error`` (a listener's own error is
        logged)."""
        if self._on_error is None:
            return
        result = self._on_error(error)
        if asyncio.iscoroutine(result):
            task = asyncio.ensure_future(result)
            self._tasks.add(task)
            task.add_done_callback(self._listener_done)

    def _count_rescued(self, rescued: list[asyncpg.Record]) -> None:
        self.stats.rescued += len(rescued)
        if self._on_rescue is not None:
            try:
                result = self._on_rescue(rescued)
                if asyncio.iscoroutine(result):
                    task = asyncio.ensure_future(result)
                    self._tasks.add(task)
                    task.add_done_callback(self._listener_done)
            except Exception:
                logger.exception("on_rescue listener failed")


def _given_back(ctx: JobContext) -> Outcome:
    """A job handed back unrun or unfinished: pending in its place, its attempt refunded."""
    return Outcome(ctx.id, ctx.lock_token, "pending", delay=None, refund_attempt=1)


def _event_of(outcome: Outcome) -> WorkerEvent:
    if outcome.status == "completed":
        return "completed"
    if outcome.status == "dead":
        return "failed"
    return "deferred" if outcome.deferred else "retrying"


def _detail_of(outcome: Outcome) -> dict[str, Any]:
    return {
        "output": jsonvalue.loads(outcome.output_json),
        "error": jsonvalue.loads(outcome.error_json),
        "delay": outcome.delay,
    }


def _log_outcome(ctx: JobContext, outcome: Outcome) -> None:
    """One log line per written outcome: a dead job at ERROR, a failed attempt that will be
    retried at WARNING, a completion or a deferral at DEBUG. The fields are also given as
    ``extra`` (job_id, kind, queue, attempt, max_attempts, outcome, error) for structured
    formatters (``pgjobs worker --log-format json``)."""
    error = jsonvalue.loads(outcome.error_json) if outcome.error_json else None
    described = f"{error.get('type')}: {error.get('message')}" if isinstance(error, dict) else ""
    fields = {
        "job_id": ctx.id,
        "kind": ctx.kind,
        "queue": ctx.queue,
        "attempt": ctx.attempts,
        "max_attempts": ctx.max_attempts,
        "outcome": outcome.status if not outcome.deferred else "deferred",
        "error": described or None,
    }
    where = (
        f"job {ctx.id} ({ctx.kind}, queue {ctx.queue}) attempt {ctx.attempts}/{ctx.max_attempts}"
    )
    if outcome.status == "dead":
        logger.error("%s failed for good: %s", where, described, extra=fields)
    elif outcome.status == "pending" and error is not None and not outcome.refund_attempt:
        delay = f"{outcome.delay:.1f}s" if outcome.delay is not None else "its due time"
        logger.warning("%s failed, retrying in %s: %s", where, delay, described, extra=fields)
    else:
        logger.debug("%s %s", where, fields["outcome"], extra=fields)
