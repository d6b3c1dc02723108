"""Worker: runs a BullMQ processor ``async def process(job, token[, signal])`` on a pgjobs
worker, or hands jobs out by hand (``Worker(name, None, opts)`` + ``getNextJob``)."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn, cast

import pgjobs
from bullmq_compat.abort_controller import AbortController
from bullmq_compat.connection import EngineConnection
from bullmq_compat.custom_errors import (
    DelayedError,
    RateLimitError,
    UnrecoverableError,
    WaitingChildrenError,
)
from bullmq_compat.emitter import EventEmitter
from bullmq_compat.job import Job, error_message, job_id_of
from bullmq_compat.job_scheduler import JobScheduler
from bullmq_compat.mapping import (
    DIALECT,
    KIND,
    durability,
    engine_queue,
    events_max_len,
    json_data,
    keep_rule,
    kind_defaults,
    worker_group,
    worker_limiter,
)
from bullmq_compat.queue import Queue
from bullmq_compat.types import QueueBaseOptions, WorkerOptions
from pgjobs import Delayed, JobContext, WaitForPrerequisites

Processor = Callable[..., Awaitable[Any]]

# A worker keeps its queue's event log to its ``streams.events.maxLen``, as BullMQ trims its
# event stream while it writes: within maxLen plus what a second's outcomes write, without
# waiting for the engine's GC (which a facade deployment does not schedule).
TRIM_EVENTS_EVERY = 256
"""Outcomes since the last trim that make the next one due."""
TRIM_EVENTS_INTERVAL = 1.0
"""Seconds between two trims at the least: a trim reads about maxLen rows of the log."""

DRAIN_DELAY_SECONDS = 5
"""How long ``getNextJob`` waits for a job before answering None (BullMQ's ``drainDelay``)."""


def _wants_signal(processor: Processor | None) -> bool:
    """Whether the processor takes a third parameter, the job's AbortSignal."""
    if processor is None:
        return False
    try:
        parameters = list(inspect.signature(processor).parameters.values())
    except (TypeError, ValueError):
        return False
    positional = [
        p
        for p in parameters
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
    ]
    return len(positional) >= 3 or any(p.kind is p.VAR_POSITIONAL for p in positional)


class WorkerBackend:
    """The part of BullMQ 6's ``worker.backend`` (its datastore layer) that the facade gives:
    ``getJobData``."""

    def __init__(self, queue: Queue) -> None:
        self._queue = queue

    async def getJobData(self, job_id: str) -> dict[str, str] | None:
        """Job ``job_id``'s stored fields as BullMQ's job hash holds them (``Job.raw_data``),
        for ``Worker.nextJobFromJobData``; None when there is no such job."""
        job = await self._queue.getJob(job_id)
        return None if job is None else job.raw_data()


class Worker(EventEmitter):
    """``Worker(name, processor, opts)``. Options: ``connection``, ``prefix``, ``schema``,
    ``concurrency`` (1), ``autorun`` (True: starts at once, so build it inside a running event
    loop), ``lockDuration`` (ms, the lease; 30000), ``lockRenewTime`` (ms between renewals
    of the locks of running jobs; default a third of lockDuration; at or past lockDuration a
    job running longer than its lock loses it: its processor is cancelled and ``error`` says
    ``Missing lock for job <id>. moveToFinished``), ``stalledInterval`` (ms
    between checks for jobs whose worker stopped; 30000), ``maxStalledCount`` (1: a job whose
    worker died runs
    again without using an attempt, and fails once it has stalled more times than this),
    ``limiter`` ``{max, duration}`` (at most ``max`` jobs started per ``duration`` ms, counted
    in one window per queue that every worker with a ``limiter`` shares, as BullMQ's limiter
    key; passed with this worker's claims, it holds no worker without one and ends with this
    worker; a limit for every worker is ``Queue.setGlobalRateLimit``), ``group``
    ``{concurrency, limit: {max, duration}}`` (BullMQ Pro's: at most ``concurrency`` active
    jobs per group, fleet-wide, and ``max`` starts per ``duration`` ms per group, for groups
    without their own ``setGroupConcurrency`` / ``setGroupRateLimit``),
    ``removeOnComplete`` / ``removeOnFail`` (for jobs added without them), ``settings``
    ``{backoffStrategy}`` (for jobs whose backoff type is custom), ``name`` (how
    ``Queue.getWorkers`` lists it; default host:pid), ``durability`` (``"durable"`` or
    ``"async"``: how its outcomes commit; default: the connection's). Events: ``active`` (job,
    prev), ``completed`` (job, result), ``failed`` (job, err) after every failed attempt,
    ``stalled`` (jobId), ``locksRenewed`` ({count, jobIds}), ``error`` (err), ``paused``,
    ``resumed``, ``closed``. A job that stalled more than ``maxStalledCount`` times is failed
    by the next worker that takes it (``active``, then ``failed`` with
    ``UnrecoverableError('job stalled more than allowable limit')``), unrun, as in BullMQ.

    A processor taking a third parameter receives the job's ``AbortSignal``; ``cancelJob``
    and an engine cancel of the job abort it. A processor that replaced ``job.moveToFailed``
    on its job has its failure recorded by that (see ``_fail_through_job``), as BullMQ's
    worker records every failure; other failures go in the engine's batched outcome write.

    Start-up waits out a database that cannot be reached (or a connection lost meanwhile): each
    failed try is emitted on ``error`` and retried with backoff, until the worker runs or is
    closed, as BullMQ's worker waits for Redis. Once running, a database that goes silent is
    emitted on ``error`` once per outage (a ``pgjobs.DatabaseTimeout`` or the connection's
    error): the worker retries on new connections and takes jobs again as soon as it answers;
    a job whose lock ran out meanwhile is left to the stalled-job check (see
    ``pgjobs.Timeouts`` for the deadlines, and the connection's ``timeouts``)."""

    def __init__(
        self, name: str, processor: Processor | None = None, opts: WorkerOptions | None = None
    ) -> None:
        super().__init__()
        self.name = name
        self.processor = processor
        self.opts: dict[str, Any] = {
            "concurrency": 1,
            "lockDuration": 30000,
            "stalledInterval": 30000,
            "maxStalledCount": 1,
            "autorun": True,
            **(opts or {}),
        }
        self.prefix = self.opts.get("prefix", "bull")
        self.qualifiedName = engine_queue(self.prefix, name)
        for option in ("lockDuration", "stalledInterval"):
            value = self.opts[option]
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise pgjobs.InvalidOption(option, f"must be milliseconds > 0, got {value!r}")
        self._durability = durability(self.opts)
        self._limiter = worker_limiter(self.opts)
        """This worker's ``limiter`` as (max starts, per seconds), or None."""
        self._group_cap, self._group_limit = worker_group(self.opts)
        """This worker's ``group`` options: the cap per group, the limit per group (max
        starts, per seconds); each None without one."""
        self._retention: list[tuple[str, str, pgjobs.Keep]] = []
        """The worker's own removeOnComplete / removeOnFail: (option, status, rule)."""
        for option, status in (("removeOnComplete", "completed"), ("removeOnFail", "dead")):
            rule = keep_rule(option, self.opts.get(option))
            if rule is not None:
                self._retention.append((option, status, rule))
        self._events_max_len = events_max_len(self.opts)
        self._untrimmed_outcomes = 0
        self._trimmed_at = -TRIM_EVENTS_INTERVAL  # monotonic seconds: the first may come at once
        self._trimming: asyncio.Future[None] | None = None
        worker_name = self.opts.get("name")
        if worker_name is not None and (not isinstance(worker_name, str) or not worker_name):
            raise pgjobs.InvalidOption("name", f"must be a non-empty string, got {worker_name!r}")
        stalls = self.opts["maxStalledCount"]
        if isinstance(stalls, bool) or not isinstance(stalls, int) or stalls < 0:
            raise pgjobs.InvalidOption(
                "maxStalledCount", f"must be an integer >= 0, got {stalls!r}"
            )
        self.running = False
        self.closing = False
        self.closed = False
        self.connection = EngineConnection(self.opts)
        self._queue = Queue(name, cast(QueueBaseOptions, self.opts), connection=self.connection)
        self._wants_signal = _wants_signal(processor)
        # Running jobs by their claim's lock token, not the engine id: a retry may be claimed
        # again (and start) before the event of its previous attempt's outcome arrives.
        self._jobs: dict[Any, Job] = {}
        self._controllers: dict[Any, AbortController] = {}
        self._engine_worker: pgjobs.Worker | None = None
        self._scheduler: pgjobs.Scheduler | None = None
        self._started = asyncio.Event()
        self._close_requested = asyncio.Event()
        self._closed = asyncio.Event()
        self._task: asyncio.Future[None] | None = None
        self._backend: WorkerBackend | None = None
        self._job_scheduler: JobScheduler | None = None
        if processor is not None and self.opts.get("autorun", True):
            self._task = asyncio.ensure_future(self.run())

    # -- running ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Take and process the queue's jobs until ``close``. Raises ``RuntimeError`` if the worker
        already runs or has no processor; an error that stops it is emitted on ``error`` and
        raised."""
        if self.running:
            raise RuntimeError("Worker is already running.")
        if self.processor is None:
            raise RuntimeError("No process function is defined.")
        self.running = True
        try:
            jobs = await self._start_up(handled=True)
            if jobs is None or self._close_requested.is_set():
                return  # closed before the database answered
            self._engine_worker = jobs.worker(
                queues=[self.qualifiedName],
                concurrency=int(self.opts["concurrency"]),
                lease=self.opts["lockDuration"] / 1000,
                rescue_interval=self.opts["stalledInterval"] / 1000,
                on_event=self._on_engine_event,
                on_rescue=self._on_rescue,
                on_error=lambda error: self.emit("error", error),
                on_renewed=self._on_renewed,
                heartbeat_interval=self._renew_interval(),
                name=self.opts.get("name"),
                durability=self._durability or jobs.durability,
                rate_limit=self._limiter[0] if self._limiter else None,
                rate_period=self._limiter[1] if self._limiter else None,
                **self._group_options(),
            )
            self._scheduler = jobs.scheduler(poll_interval=1.0)
            self._scheduler.start()
            self._started.set()
            try:
                await self._engine_worker.run()
            finally:
                await self._scheduler.stop()
        except Exception as exc:
            self.emit("error", exc)
            raise
        finally:
            self.running = False
            self._started.set()

    async def _start_up(self, *, handled: bool) -> pgjobs.JobQueue | None:
        """Open the engine and apply the queue settings this worker's options ask for, retrying
        transient failures (each emitted on ``error``) until done or ``close()``."""
        registry = pgjobs.Registry()
        defaults = kind_defaults()
        if handled:
            registry.kind(KIND, input=Any, queue=self.qualifiedName, **defaults)(self._handle)
        else:
            registry.declare(KIND, input=Any, queue=self.qualifiedName, **defaults)
        failures = 0
        while not self._close_requested.is_set():
            try:
                jobs = await self.connection.open(registry)
                await jobs.set_max_stalls(self.qualifiedName, int(self.opts["maxStalledCount"]))
                await jobs.describe_queue(self.qualifiedName, label=self.name, dialect=DIALECT)
                return jobs
            except pgjobs.TRANSIENT_ERRORS as exc:
                failures += 1
                self.emit("error", exc)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(
                        self._close_requested.wait(), pgjobs.retry_delay(failures)
                    )
        return None

    def _job_for(self, ctx: JobContext, data: Any) -> Job:
        job = Job.from_context(self._queue, ctx, data)
        job.worker = self
        for option in ("removeOnComplete", "removeOnFail"):
            if option not in job.opts and option in self.opts:
                job.opts[option] = self.opts[option]
        return job

    async def _inherit_retention(self, ctx: JobContext) -> None:
        """A job added without ``removeOnComplete`` / ``removeOnFail`` finishes under this
        worker's, as BullMQ's worker applies its own to it: written onto the job, fenced by
        its claim, before it can finish (one statement, only when the worker has either)."""
        if not self._retention:
            return
        metadata = ctx.metadata if isinstance(ctx.metadata, dict) else {}
        opts = metadata.get("opts") or {}
        rules = {status: rule for option, status, rule in self._retention if option not in opts}
        if rules:
            await ctx.keep(completed=rules.get("completed"), dead=rules.get("dead"))

    async def _handle(self, ctx: JobContext, data: Any) -> Any:
        await self._inherit_retention(ctx)
        job = self._job_for(ctx, data)
        self._jobs[ctx.lock_token] = job
        self.emit("active", job, "waiting")
        assert self.processor is not None
        try:
            if job.deferredFailure:
                # A failParentOnFailure child failed (a job migrated in that state): the
                # parent fails unrun, as BullMQ's worker fails it.
                raise UnrecoverableError(job.deferredFailure)
            if self._wants_signal:
                controller = self._controllers[ctx.lock_token] = AbortController(ctx)
                result = await self.processor(job, job.token, controller.signal)
            else:
                result = await self.processor(job, job.token)
            # A value json.dumps refuses fails the attempt with Python's message, as in BullMQ.
            return json_data(result, "returnvalue")
        except DelayedError:
            raise job.deferral() from None
        except RateLimitError:
            # After worker.rateLimit(ms): back to waiting, no attempt used; the queue's limit
            # keeps every worker from taking it before the window ends.
            raise Delayed(0, "rate limited") from None
        except WaitingChildrenError:
            # counted: BullMQ's attemptsStarted counts this run (deferrals + attempts + stalls)
            raise WaitForPrerequisites(counted=True) from None
        except Exception as exc:
            if "moveToFailed" in vars(job):  # replaced on this job: BullMQ's worker calls it
                await self._fail_through_job(ctx, job, exc)
            job.record_failure(exc)
            raise job.engine_failure(exc) from exc
        finally:
            self._controllers.pop(ctx.lock_token, None)
            await job.flush_logs()

    async def _fail_through_job(self, ctx: JobContext, job: Job, exc: Exception) -> NoReturn:
        """Record a processor's failure through ``job.moveToFailed`` replaced on the job
        instance, as BullMQ's worker records every failure: ``failed`` (job, err) once it
        returns; ``error`` (its error, job) and no ``failed`` when it raises. The worker then
        writes nothing more: what the replacement did stands, and a job it left active is
        renewed no longer, left to the stalled-job check (BullMQ's worker untracks its lock).
        Any other failure keeps the engine's batched outcome write."""
        self._jobs.pop(ctx.lock_token, None)
        try:
            await job.moveToFailed(exc, job.token)
        except Exception as err:
            self.emit("error", err, job)
        else:
            self._count_outcome()
            self.emit("failed", job, exc)
        raise pgjobs.JobLost(ctx.id)  # the engine writes no outcome for this run

    def _on_engine_event(self, event: str, ctx: JobContext, detail: dict[str, Any]) -> None:
        if event == "active":
            if ctx.deferred_failure is not None:
                # It stalled more than maxStalledCount, or a failParentOnFailure child of it
                # failed: the engine fails it unrun, as BullMQ's worker fails a job with a
                # deferred failure (active, then failed).
                doomed = self._job_for(ctx, ctx.payload)
                reason = error_message(ctx.deferred_failure) or "job stalled"
                doomed.deferredFailure = reason
                doomed.error = UnrecoverableError(reason)
                self._jobs[ctx.lock_token] = doomed
                self.emit("active", doomed, "waiting")
            return
        if event == "lost":
            job = self._jobs.pop(ctx.lock_token, None)
            if job is not None and not ctx.cancelled.is_set():
                # Its lock ran out (lockRenewTime past lockDuration, a database out of reach)
                # or another worker took it: BullMQ's moveToFinished finds no lock of its own.
                self.emit("error", Exception(f"Missing lock for job {job.id}. moveToFinished"))
            return
        self._count_outcome()
        job = self._jobs.pop(ctx.lock_token, None)
        if job is None:
            return
        job.finishedOn = int(time.time() * 1000)
        if event == "completed":
            job.returnvalue = detail.get("output")
            job.attemptsMade = ctx.attempts
            self.emit("completed", job, job.returnvalue)
        elif event in ("failed", "retrying"):
            job.attemptsMade = ctx.attempts
            if event == "retrying" and detail.get("delay"):
                job.delay = round(detail["delay"] * 1000)  # the backoff, as BullMQ records it
            reason = error_message(detail.get("error") or {}, str(job.id)) or "failed"
            if job.error is None:  # not raised by the processor: refused by the engine
                job.failedReason = reason
            error = job.error or Exception(reason)
            self.emit("failed", job, error)

    def _count_outcome(self) -> None:
        """Trim the queue's event log once ``TRIM_EVENTS_EVERY`` outcomes have come since the
        last trim, at most every ``TRIM_EVENTS_INTERVAL`` seconds, one trim at a time; never
        when the queue records no events."""
        if not self._events_max_len:
            return
        self._untrimmed_outcomes += 1
        now = time.monotonic()
        if (
            self._untrimmed_outcomes >= TRIM_EVENTS_EVERY
            and now - self._trimmed_at >= TRIM_EVENTS_INTERVAL
            and (self._trimming is None or self._trimming.done())
        ):
            self._untrimmed_outcomes = 0
            self._trimmed_at = now
            self._trimming = asyncio.ensure_future(self._trim_events())

    async def _trim_events(self) -> None:
        try:
            jobs = await self._queue.engine()
            await jobs.trim_events(self.qualifiedName, self._events_max_len)
        except Exception as exc:  # a database out of reach, a pool closed under it
            self.emit("error", exc)  # the next trim takes these rows too

    def _renew_interval(self) -> float | None:
        """Seconds between lock renewals: ``lockRenewTime`` (ms), else the engine's default (a
        third of the lease). At or past ``lockDuration`` a job running longer than its lock
        loses it, as in BullMQ (``error``: ``Missing lock for job <id>. moveToFinished``)."""
        renew = self.opts.get("lockRenewTime")
        if isinstance(renew, bool) or not isinstance(renew, int | float):
            return None
        return renew / 1000 if renew > 0 else None

    def _on_renewed(self, contexts: list[JobContext]) -> None:
        """``locksRenewed`` ``{count, jobIds}`` for the processed jobs a renewal kept, as
        BullMQ's lock manager emits it (jobs claimed ahead and not started are left out)."""
        renewed = [self._jobs[c.lock_token].id for c in contexts if c.lock_token in self._jobs]
        if renewed:
            self.emit("locksRenewed", {"count": len(renewed), "jobIds": renewed})

    def _on_rescue(self, rows: list[Any]) -> None:
        """A stalled-job check of this worker put jobs back (or failed them): ``stalled``."""
        for row in rows:
            if row["queue"] == self.qualifiedName:
                self.emit("stalled", job_id_of(row["id"], row["job_key"]))

    # -- cancelling the jobs this worker runs ------------------------------------------------

    def cancelJob(self, job_id: str, reason: Any = None) -> bool:
        """Abort the signal of job ``job_id`` if this worker is running it and its processor
        takes one; the processor decides what the job becomes (raising ``AbortError`` fails
        the attempt). False otherwise."""
        for token, job in list(self._jobs.items()):
            if job.id == str(job_id) and token in self._controllers:
                self._controllers[token].abort(reason)
                return True
        return False

    def cancelAllJobs(self, reason: Any = None) -> None:
        """``cancelJob`` for every job this worker is running."""
        for controller in list(self._controllers.values()):
            controller.abort(reason)

    # -- processing by hand ----------------------------------------------------------------

    async def getNextJob(self, token: str, opts: dict[str, Any] | None = None) -> Job | None:
        """Take the next job of the queue for ``token`` (``moveToCompleted``/``moveToFailed``
        then need the same token), waiting up to ``drainDelay`` seconds for one unless
        ``opts["block"]`` is False. Emits ``active``. The job is leased for ``lockDuration``;
        ``job.extendLock`` keeps it longer."""
        opts = opts or {}
        jobs = await self._manual_engine()
        deadline = time.monotonic() + float(self.opts.get("drainDelay", DRAIN_DELAY_SECONDS))
        while True:
            taken = await jobs.claim(
                [self.qualifiedName],
                kinds=[KIND],
                lease=self.opts["lockDuration"] / 1000,
                durability=self._durability,
                rate_limit=self._limiter[0] if self._limiter else None,
                rate_period=self._limiter[1] if self._limiter else None,
                **self._group_options(),
            )
            if taken:
                break
            if not opts.get("block", True) or time.monotonic() >= deadline:
                return None
            await asyncio.sleep(0.05)
        ctx = taken[0]
        await self._inherit_retention(ctx)
        job = self._job_for(ctx, ctx.payload)
        job.token = token
        job.manual = True
        self.emit("active", job, "waiting")
        return job

    async def next_job_data(self, token: str) -> list[Any] | None:
        """For ``fetchNext``: the next job taken for ``token``, as BullMQ's raw
        ``[jobData, jobId, limitUntil, delayUntil]``; None when none is waiting."""
        job = await self.getNextJob(token, {"block": False})
        if job is None:
            return None
        data = {
            "name": job.name,
            "data": json.dumps(job.data, separators=(",", ":")),
            "opts": json.dumps(job.opts, separators=(",", ":")),
            "timestamp": job.timestamp,
            "attemptsMade": job.attemptsMade,
        }
        return [data, job.id, 0, 0]

    @property
    def backend(self) -> WorkerBackend:
        """BullMQ 6's ``worker.backend``, as far as the facade has one: ``getJobData``."""
        if self._backend is None:
            self._backend = WorkerBackend(self._queue)
        return self._backend

    @property
    def jobScheduler(self) -> JobScheduler:
        """The scheduler API of this worker's queue, made on first use (BullMQ 6)."""
        if self._job_scheduler is None:
            self._job_scheduler = JobScheduler(self._queue)
        return self._job_scheduler

    async def nextJobFromJobData(
        self,
        job_data: dict[str, Any] | None = None,
        job_id: str | None = None,
        limit_until: int = 0,
        delay_until: int = 0,
        token: str | None = None,
    ) -> Job | None:
        """The Job of raw stored fields (``backend.getJobData``, a ``fetchNext`` answer), with
        ``token``; None without any. A job a scheduler made advances that scheduler to its next
        iteration, as BullMQ's worker does, if it is still the scheduler's pending iteration (a
        job this worker took has already advanced it: a second call changes nothing). A failure
        to advance is emitted on ``error`` and the job still returned. ``limit_until`` and
        ``delay_until`` are BullMQ's fetch hints, which the facade's fetching does not need."""
        if not job_data:
            return None
        job = Job.fromJSON(self._queue, job_data, job_id)
        job.token = token
        job.worker = self
        if job.repeatJobKey:
            try:
                await self.jobScheduler.upsertJobScheduler(
                    job.repeatJobKey,
                    (job.opts or {}).get("repeat") or {},
                    job.name,
                    job.data,
                    job.opts,
                    override=False,
                    producer_id=job.id,
                )
            except Exception as err:
                self.emit(
                    "error",
                    RuntimeError(f"Failed to add repeatable job for next iteration: {err}"),
                )
        return job

    async def _manual_engine(self) -> pgjobs.JobQueue:
        if self._engine_worker is None and not self.running:
            jobs = await self._start_up(handled=False)
            if jobs is None:
                raise RuntimeError("Worker is closed")
            return jobs
        return await self._queue.engine()

    # -- lifecycle -------------------------------------------------------------------------

    async def close(self, force: bool = False) -> None:
        """Stop fetching and wait for the jobs in flight (for up to the ``shutdownTimeout``
        option, ms, a pgjobs extension; then they are given back to waiting without using an
        attempt), then release the connection and emit ``closed``. With ``force``, stop at
        once: running jobs are abandoned as a killed worker leaves them, to the stalled-job
        check once their lock ends (as BullMQ does). A second call while the first waits gives
        the running jobs back at once (abandons them, with ``force``)."""
        if self.closed:
            return
        if self.closing:  # a second close while the first waits for running jobs
            if self._engine_worker is not None:
                # give them back now (pending, no attempt used), or abandon them with force
                await self._engine_worker.stop(timeout=0, release=not force)
            await self._closed.wait()
            return
        self.closing = True
        self._close_requested.set()
        if self._engine_worker is not None:
            if force:
                await self._engine_worker.stop(timeout=0, release=False)
            else:
                # shutdownTimeout (pgjobs): how long running jobs get before they are given back
                timeout = self.opts.get("shutdownTimeout")
                await self._engine_worker.stop(
                    timeout=3600 if timeout is None else float(timeout) / 1000
                )
        if self._task is not None:
            with contextlib.suppress(Exception):  # already reported on "error"
                await self._task
        if self._trimming is not None:
            await self._trimming  # it reports its own failure on "error"
        await self.settle()
        await self.connection.close()
        self.closed = True
        self._closed.set()
        self.emit("closed")

    RateLimitError = RateLimitError

    async def rateLimit(self, expire_time_ms: int) -> None:
        """Hand out no job of this queue, to any worker, for ``expire_time_ms``; then raise
        ``Worker.RateLimitError()`` from the processor to put the current job back."""
        await self._queue.rateLimit(expire_time_ms)

    async def rateLimitGroup(self, job: Job, expireTimeMs: int) -> None:
        """BullMQ Pro's: start no job of ``job``'s group, on any worker, for ``expireTimeMs``;
        then raise ``Worker.RateLimitError()`` from the processor to put the job back."""
        group = (job.opts.get("group") or {}).get("id") if isinstance(job.opts, dict) else None
        if not group:
            raise ValueError("Job must have a group id")
        if (
            isinstance(expireTimeMs, bool)
            or not isinstance(expireTimeMs, int | float)
            or (expireTimeMs <= 0)
        ):
            raise ValueError("expireTimeMs must be greater than 0")
        jobs = await self._queue.engine()
        await jobs.limit_group(self.qualifiedName, str(group), expireTimeMs / 1000)

    def _group_options(self) -> dict[str, Any]:
        per_group = self._group_limit
        return {
            "group_concurrency": self._group_cap,
            "group_rate_limit": per_group[0] if per_group else None,
            "group_rate_period": per_group[1] if per_group else None,
        }

    async def pause(self, doNotWaitActive: bool = False) -> None:
        """Stop taking jobs; unless ``doNotWaitActive``, return once the running ones end."""
        await self._started.wait()
        if self._engine_worker is not None:
            await self._engine_worker.pause(wait_for_running=not doNotWaitActive)
        self.emit("paused")

    def resume(self) -> None:
        """Take jobs again after ``pause``; emits ``resumed``."""
        if self._engine_worker is not None:
            self._engine_worker.resume()
        self.emit("resumed")

    def isPaused(self) -> bool:
        """Whether the worker is paused."""
        return self._engine_worker is not None and self._engine_worker.paused

    def isRunning(self) -> bool:
        """Whether ``run`` is under way."""
        return self.running

    async def waitUntilReady(self) -> None:
        """Wait until the worker has started taking jobs (or ended before it could)."""
        await self._started.wait()
