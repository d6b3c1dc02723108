"""Job: BullMQ's view of one engine job, its reads and its writes.

A Job the worker hands to a processor, or that ``Worker.getNextJob`` returns, holds the engine
context of its claim: its writes (progress, logs, moving it on) are fenced by that claim. A Job
read from a Queue writes as an operator would, unfenced.
"""

from __future__ import annotations

import asyncio
import json
import time
import traceback
from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from bullmq_compat.custom_errors import UnrecoverableError
from bullmq_compat.job_scheduler import iteration_opts
from bullmq_compat.mapping import (
    attempts_made,
    deferred_failure,
    exact_data,
    json_data,
    state_of,
    to_bullmq_priority,
    to_engine_priority,
)
from bullmq_compat.mapping import (
    milliseconds as mapping_milliseconds,
)
from pgjobs import (
    Backoff,
    Delayed,
    EdgePolicy,
    Fatal,
    InvalidJobInput,
    InvalidOption,
    JobContext,
    JobFilter,
    JobRow,
    PendingPrerequisites,
    PriorityPlace,
    Retry,
    Status,
    SubState,
    WaitForPrerequisites,
)

if TYPE_CHECKING:
    from bullmq_compat.queue import Queue
    from bullmq_compat.queue_events import QueueEvents
    from bullmq_compat.worker import Worker


NO_LOCK_CHECK = "0"
"""BullMQ's token for a move made without checking the job's lock."""

FAILS_PARENT = (EdgePolicy.CASCADE_DEFERRED.value, EdgePolicy.CASCADE.value)
"""The edge policies of a failParentOnFailure child (cascade: one migrated as failed)."""


def failed_reason(last_error: Any, status: Status, job_id: str | None = None) -> str | None:
    """BullMQ's ``failedReason``: the message of the last failed attempt, kept once the job
    completes (a manual retry clears it: the engine's re-drive drops ``last_error``). A lease
    that ran out and put the job back is no failure to BullMQ unless it failed the job."""
    if not isinstance(last_error, dict):
        return None
    if last_error.get("type") == "LeaseExpired" and status is not Status.DEAD:
        return None
    if last_error.get("deferred") and status is not Status.DEAD:
        return None  # a failure its next worker records (``deferredFailure``), not yet made
    return error_message(last_error, job_id)


def error_message(error: dict[str, Any], job_id: str | None = None) -> str | None:
    """The BullMQ wording of an engine error record (of job ``job_id``): its message, except
    for a failure cascaded from a child (``failParentOnFailure``), which BullMQ words ``child
    <child queue qualifiedName>:<child id> failed``, and a completion refused for pending
    children (``Job <id> has pending dependencies. moveToFinished``)."""
    queue = error.get("prerequisite_queue")
    if error.get("type") == "DependencyFailed" and isinstance(queue, str):
        child_id = job_id_of(int(error["prerequisite"]), error.get("prerequisite_key"))
        return f"child {queue}:{child_id} failed"
    if error.get("type") == PendingPrerequisites.__name__ and job_id is not None:
        return pending_dependencies(job_id)
    message = error.get("message")
    return None if message is None else str(message)


def _pending_failure(row: JobRow) -> str | None:
    """BullMQ's ``deferredFailure`` of a parent its worker will fail unrun at its next claim:
    a failParentOnFailure child failed (the engine's cascade_deferred edge)."""
    error = row.last_error
    if row.status is not Status.PENDING or not isinstance(error, dict):
        return None
    if not error.get("deferred") or error.get("type") != "DependencyFailed":
        return None
    return error_message(error)


def pending_dependencies(job_id: str) -> str:
    """BullMQ's error for completing a job whose children are not all finished."""
    return f"Job {job_id} has pending dependencies. moveToFinished"


def _current_delay(row: JobRow, opts: dict[str, Any]) -> int:
    """BullMQ's ``job.delay`` (ms): that of the delay the job is waiting out (the add's delay,
    or the backoff of a retry), 0 once it is due."""
    if row.sub_state is SubState.DELAYED:
        return int(opts.get("delay") or 0)
    if row.sub_state is not SubState.RETRY:
        return 0
    backoff = opts.get("backoff")
    custom = isinstance(backoff, dict) and backoff.get("type") not in (None, "fixed", "exponential")
    policy = Backoff.from_json(row.backoff) if isinstance(row.backoff, dict) else None
    if policy is not None and not policy.jitter and not custom:
        return round(policy.seconds(row.attempts) * 1000)
    failed_at = (row.last_error or {}).get("at") if isinstance(row.last_error, dict) else None
    if not isinstance(failed_at, str):
        return 0
    return max(0, round((row.run_at - datetime.fromisoformat(failed_at)).total_seconds() * 1000))


def _ms(value: datetime | None) -> int | None:
    return None if value is None else int(value.timestamp() * 1000)


def job_id_of(row_id: int, job_key: str | None) -> str:
    """A custom jobId is the job's key; an automatic id is the engine id as a string."""
    return job_key if job_key is not None else str(row_id)


_PARENT_FLAGS = {
    "failParentOnFailure": "fpof",
    "removeDependencyOnFailure": "rdof",
    "ignoreDependencyOnFailure": "idof",
    "continueParentOnFailure": "cpof",
}


def parent_view(parent: dict[str, Any], opts: dict[str, Any]) -> dict[str, Any]:
    """BullMQ's ``job.parent`` for ``opts.parent`` ``{id, queue}``: ``{id, queueKey}`` and the
    flag of the child's failure option (``fpof``, ``rdof``, ``idof``, ``cpof``) when set."""
    view: dict[str, Any] = {"id": parent.get("id"), "queueKey": parent.get("queue")}
    for option, flag in _PARENT_FLAGS.items():
        if opts.get(option):
            view[flag] = True
    return view


def _stacktrace(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc))


class Job:
    """A BullMQ job. Built by ``Queue.add``, ``Queue.getJob``, the worker, and
    ``Worker.getNextJob``."""

    # Defaults that never change in place live on the class (an assignment shadows them per
    # job), so that a bulk add builds each of its jobs with a few stores only.
    progress: Any = 0
    attemptsMade = 0
    attemptsStarted = 0
    stalledCounter = 0
    processedOn: int | None = None
    finishedOn: int | None = None
    returnvalue: Any = None
    failedReason: str | None = None
    token: str | None = None
    deferredFailure: str | None = None
    """Why this parent fails when a worker takes it (a failParentOnFailure child failed);
    set on jobs migrated in that state."""
    engine_id: int | None = None
    """The pgjobs id of this job: the bridge to the native API (``JobQueue.get``,
    ``flow_view``, ...) for what BullMQ cannot do."""
    context: JobContext | None = None
    """The engine context of the claim running this job (None for a job read from a
    Queue): the writes of the processor go through it, fenced by the claim."""
    error: BaseException | None = None
    """The exception of the attempt that failed last (for the worker's ``failed`` event)."""
    worker: Worker | None = None
    """The worker that took this job; ``manual`` when it was taken by ``getNextJob``, so
    that moving it on is the caller's business, not a processor's."""
    manual = False
    _delay_until_ms: float | None = None
    _shared: dict[str, Any] | None = None
    """The fields a job of a bulk add shares with its bulk until it reads them (``of_bulk``)."""

    def __init__(
        self,
        queue: Queue,
        name: str,
        data: Any,
        opts: dict[str, Any] | None = None,
        job_id: str | None = None,
    ) -> None:
        opts = opts or {}
        self.queue = queue
        self.name = name
        self.data = data
        self.id = opts.get("jobId") or job_id
        self.opts: dict[str, Any] = {"attempts": 0, "delay": 0, **opts}
        self.timestamp: int = opts.get("timestamp") or int(time.time() * 1000)
        self.delay: int = opts.get("delay") or 0
        self.priority: int = opts.get("priority") or 0
        self.attempts: int = opts.get("attempts") or 1
        self.stacktrace: list[str] = []
        self.repeatJobKey: str | None = opts.get("repeatJobKey")
        parent = opts.get("parent")
        self.parent = parent_view(parent, opts) if parent else None
        self.parentKey = f"{parent['queue']}:{parent['id']}" if parent else None
        self.queueQualifiedName = queue.qualifiedName
        self._pending_logs: list[asyncio.Future[Any]] = []

    @property
    def gid(self) -> str | None:
        """BullMQ Pro's group id of the job (its ``group.id`` option), or None."""
        group = self.opts.get("group")
        return group.get("id") if isinstance(group, dict) else None

    if not TYPE_CHECKING:  # hidden from mypy, which would take any misspelt field for one

        def __getattr__(self, name: str) -> Any:
            """Only for a field not set on this job: one a job of a bulk add (``of_bulk``)
            shares with the others of its bulk, taken on first read (a dict or list as its own
            copy, so that changing one job's ``opts`` or ``stacktrace`` leaves the others')."""
            shared = self.__dict__.get("_shared")
            if shared is None or name not in shared:
                raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
            value = shared[name]
            if isinstance(value, dict | list):
                value = value.copy()
            setattr(self, name, value)
            return value

    # -- construction ----------------------------------------------------------------------

    @classmethod
    def of_bulk(
        cls, queue: Queue, jobs: Iterable[tuple[str, Any, int]], opts: dict[str, Any]
    ) -> list[Job]:
        """``(name, data, engine id)`` of jobs added together with the same ``opts`` and no
        ``jobId``: each reads as ``Job(queue, name, data, opts, str(engine id))`` would, but
        holds only its own fields; the rest, worked out once for the bulk, is taken on first
        read (building a thousand full jobs was a sixth of a thousand-job ``addBulk``)."""
        shared = cls.shared_fields(queue, opts)
        return [cls.sharing(queue, name, data, engine_id, shared) for name, data, engine_id in jobs]

    @classmethod
    def shared_fields(cls, queue: Queue, opts: dict[str, Any]) -> dict[str, Any]:
        """The fields that jobs of ``queue`` added together with ``opts`` (no ``jobId``) have in
        common: all but queue, name, data and id."""
        shared = dict(vars(cls(queue, "", None, opts)))
        for own in ("queue", "name", "data", "id"):
            del shared[own]
        return shared

    @classmethod
    def sharing(
        cls, queue: Queue, name: str, data: Any, engine_id: int, shared: dict[str, Any]
    ) -> Job:
        """A job holding its own fields and taking the rest from ``shared`` (``shared_fields``)
        on first read."""
        job = cls.__new__(cls)
        job.queue = queue
        job.name = name
        job.data = data
        job.id = str(engine_id)
        job.engine_id = engine_id
        job._shared = shared
        return job

    @classmethod
    def from_row(cls, queue: Queue, row: JobRow) -> Job:
        """The facade's view of an engine job row (BullMQ id, opts, state fields) of ``queue``."""
        opts = (row.metadata or {}).get("opts", {}) if isinstance(row.metadata, dict) else {}
        iteration = iteration_opts(row.metadata, row.job_key, _ms(row.created_at) or 0)
        data = exact_data(row.payload, row.metadata)
        job = cls(queue, row.name, data, iteration or opts, job_id_of(row.id, row.job_key))
        job.deferredFailure = deferred_failure(row.metadata) or _pending_failure(row)
        job.engine_id = row.id
        job.priority = to_bullmq_priority(row.priority)
        job.progress = row.progress if row.progress is not None else 0
        job.timestamp = _ms(row.created_at) or job.timestamp
        job.attemptsMade = attempts_made(row)
        # BullMQ counts every start: attempts, runs that deferred and runs that stalled.
        job.attemptsStarted = row.attempts + row.stalls + row.deferrals
        job.stalledCounter = row.stalls
        job.delay = _current_delay(row, job.opts)
        job.attempts = row.max_attempts
        job.processedOn = _ms(row.started_at)
        job.finishedOn = _ms(row.finished_at)
        job.returnvalue = row.output if row.status is Status.COMPLETED else None
        job.failedReason = failed_reason(row.last_error, row.status, job.id)
        # One stack trace per failed attempt, oldest first (BullMQ's job.stacktrace), at most
        # stackTraceLimit of them when the job's options set one.
        traces = [e["traceback"] for e in row.errors if isinstance(e, dict) and e.get("traceback")]
        migrated = (row.metadata or {}).get("bullmq") if isinstance(row.metadata, dict) else None
        kept = migrated.get("stacktrace") if isinstance(migrated, dict) else None
        if isinstance(kept, list):  # a job migrated from Redis: BullMQ's own list comes first
            traces = [str(t) for t in kept if t] + traces
        limit = job.opts.get("stackTraceLimit")
        if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
            traces = traces[-limit:]
        if traces:
            job.stacktrace = traces
        elif isinstance(row.last_error, dict) and row.last_error.get("traceback"):
            job.stacktrace = [row.last_error["traceback"]]
        return job

    @classmethod
    async def read(cls, queue: Queue, row: JobRow) -> Job:
        """``from_row``, with the parent of a flow child whose options name none (a child a
        FlowProducer added): the job that waits for it, as ``opts.parent``/``parent``."""
        job = cls.from_row(queue, row)
        if job.parent is None and row.flow_id is not None:
            jobs = await queue.engine()
            for dependent in await jobs.dependents_of(row.id):
                if dependent["queue"] is not None:
                    job.adopt_parent(
                        job_id_of(dependent["id"], dependent["job_key"]), dependent["queue"]
                    )
                    break
        return job

    def adopt_parent(self, parent_id: str, parent_queue: str) -> None:
        """Make this job the child of job ``parent_id`` of queue ``parent_queue`` (its
        qualifiedName): ``opts.parent``, ``parent`` and ``parentKey`` as BullMQ sets them."""
        parent = {"id": parent_id, "queue": parent_queue}
        self.opts = {**self.opts, "parent": parent}
        self.parent = parent_view(parent, self.opts)
        self.parentKey = f"{parent_queue}:{parent_id}"

    @classmethod
    def from_context(cls, queue: Queue, ctx: JobContext, data: Any) -> Job:
        """The Job a processor receives for the engine job it runs (``ctx``), with ``data`` as
        BullMQ gave it."""
        opts = (ctx.metadata or {}).get("opts", {}) if isinstance(ctx.metadata, dict) else {}
        iteration = iteration_opts(ctx.metadata, ctx.job_key, _ms(ctx.created_at) or 0)
        data = exact_data(data, ctx.metadata)
        job = cls(queue, ctx.name, data, iteration or opts, job_id_of(ctx.id, ctx.job_key))
        job.deferredFailure = deferred_failure(ctx.metadata)
        job.engine_id = ctx.id
        job.context = ctx
        job.priority = to_bullmq_priority(ctx.priority)
        job.attempts = ctx.max_attempts
        job.attemptsMade = ctx.attempts - 1
        job.attemptsStarted = ctx.attempts + ctx.stalls + ctx.deferrals
        job.stalledCounter = ctx.stalls
        job.delay = 0  # a job that waited for a delay is active now: BullMQ zeroes it on promotion
        job.timestamp = _ms(ctx.created_at) or job.timestamp
        job.processedOn = int(time.time() * 1000)
        # a retry is claimed with its previous attempt's error, which BullMQ's job hash keeps
        job.failedReason = failed_reason(ctx.last_error, Status.RUNNING, job.id)
        job.token = str(ctx.lock_token)
        return job

    @classmethod
    def fromJSON(cls, queue: Queue, rawData: dict[str, Any], jobId: str | None = None) -> Job:
        """A Job from its raw stored fields (``raw_data``; BullMQ's job hash: ``data``,
        ``opts``, ``returnvalue``, ``stacktrace`` and ``progress`` as JSON text, ``rjk`` the
        scheduler id), as BullMQ's ``Job.fromJSON``; ``jobId`` overrides the raw ``id``. It
        holds no claim: its writes are unfenced, as a job read from a Queue."""

        def number(field: str) -> int | None:
            value = rawData.get(field)
            return None if value in (None, "") else int(value)

        def decoded(field: str, default: Any) -> Any:
            value = rawData.get(field)
            if not isinstance(value, str | bytes):
                return default if value is None else value
            try:
                return json.loads(value)
            except ValueError:
                return value

        opts = decoded("opts", {})
        job = cls(queue, rawData.get("name") or "", decoded("data", {}), opts or {})
        job.id = jobId or rawData.get("id") or job.id
        job.progress = decoded("progress", 0)
        job.delay = number("delay") or 0
        job.timestamp = number("timestamp") or 0
        job.priority = number("priority") or 0
        job.processedOn = number("processedOn")
        job.finishedOn = number("finishedOn")
        if rawData.get("rjk"):
            job.repeatJobKey = str(rawData["rjk"])
        job.attemptsStarted = number("ats") or 0
        job.attemptsMade = number("attemptsMade") or number("atm") or 0
        job.stalledCounter = number("stc") or 0
        if rawData.get("failedReason"):
            job.failedReason = str(rawData["failedReason"])
        if rawData.get("defa"):
            job.deferredFailure = str(rawData["defa"])
        job.returnvalue = decoded("returnvalue", None)
        job.stacktrace = list(decoded("stacktrace", []) or [])
        return job

    def raw_data(self) -> dict[str, str]:
        """This job's fields as BullMQ's job hash stores them (what ``fromJSON`` reads):
        numbers as text, ``data``, ``opts``, ``progress``, ``returnvalue`` and ``stacktrace``
        as JSON, ``rjk`` the id of the scheduler that made it."""

        def text(value: Any) -> str:
            return json.dumps(value, separators=(",", ":"))

        raw = {
            "id": str(self.id),
            "name": self.name,
            "data": text(self.data),
            "opts": text(self.opts),
            "timestamp": str(self.timestamp),
            "delay": str(self.delay),
            "priority": str(self.priority),
            "progress": text(self.progress),
            "attemptsMade": str(self.attemptsMade),
            "ats": str(self.attemptsStarted),
            "stc": str(self.stalledCounter),
            "stacktrace": text(self.stacktrace),
        }
        optional = {
            "processedOn": self.processedOn,
            "finishedOn": self.finishedOn,
            "failedReason": self.failedReason,
            "rjk": self.repeatJobKey,
            "defa": self.deferredFailure,
        }
        raw.update({field: str(value) for field, value in optional.items() if value is not None})
        if self.returnvalue is not None:
            raw["returnvalue"] = text(self.returnvalue)
        return raw

    @classmethod
    async def fromId(cls, queue: Queue, job_id: str) -> Job | None:
        """The job of ``queue`` with this id, or None (``Queue.getJob``)."""
        return await queue.getJob(job_id)

    # -- reads -----------------------------------------------------------------------------

    async def _row(self) -> JobRow | None:
        if self.engine_id is None:
            return None
        return await (await self.queue.engine()).get(self.engine_id)

    async def getState(self) -> str:
        """The job's BullMQ state: waiting, prioritized, delayed, waiting-children, active,
        completed, failed, or "unknown" when it no longer exists."""
        row = await self._row()
        return "unknown" if row is None else state_of(row)

    async def isCompleted(self) -> bool:
        """Whether the job's state is completed."""
        return await self.getState() == "completed"

    async def isFailed(self) -> bool:
        """Whether the job's state is failed."""
        return await self.getState() == "failed"

    async def isDelayed(self) -> bool:
        """Whether the job's state is delayed."""
        return await self.getState() == "delayed"

    async def isActive(self) -> bool:
        """Whether the job's state is active."""
        return await self.getState() == "active"

    async def isWaiting(self) -> bool:
        """Whether the job waits its turn (waiting or prioritized)."""
        return await self.getState() in ("waiting", "prioritized")

    async def isWaitingChildren(self) -> bool:
        """Whether the job waits for its children."""
        return await self.getState() == "waiting-children"

    async def isFinished(self) -> bool:
        """Whether the job is completed or failed."""
        return await self.getState() in ("completed", "failed")

    async def waitUntilFinished(self, queueEvents: QueueEvents, ttl: float | None = None) -> Any:
        """The return value once the job completes; raises ``Exception(failedReason)`` once it
        fails for good, ``TimeoutError`` after ``ttl`` ms. Listens first, then looks, so a job
        that finished before the call is not missed."""
        await queueEvents.waitUntilReady()
        loop = asyncio.get_running_loop()
        outcome: asyncio.Future[Any] = loop.create_future()

        def completed(args: dict[str, Any], _id: str) -> None:
            if not outcome.done():
                outcome.set_result(args.get("returnvalue"))

        def failed(args: dict[str, Any], _id: str) -> None:
            if not outcome.done():
                outcome.set_exception(Exception(args.get("failedReason")))

        queueEvents.on(f"completed:{self.id}", completed)
        queueEvents.on(f"failed:{self.id}", failed)
        try:
            row = await self._row()
            if row is not None and row.status is Status.COMPLETED:
                return row.output
            if row is not None and row.status in (Status.DEAD, Status.CANCELLED):
                raise Exception((row.last_error or {}).get("message", "failed"))
            try:
                return await asyncio.wait_for(outcome, None if ttl is None else ttl / 1000)
            except TimeoutError:
                raise TimeoutError(
                    f"Job wait {self.name} timed out before finishing, no finish notification "
                    f"arrived after {ttl}ms (id={self.id})"
                ) from None
        finally:
            queueEvents.off(f"completed:{self.id}", completed)
            queueEvents.off(f"failed:{self.id}", failed)

    # -- writes ----------------------------------------------------------------------------

    async def updateProgress(self, progress: Any) -> None:
        """Store ``progress`` (a number or any JSON). Inside the processor the write is fenced
        by the job's claim (a worker that lost the job writes nothing)."""
        stored = json_data(progress, "progress")
        if self.context is not None:
            await self.context.progress(stored)
        else:
            jobs = await self.queue.engine()
            if self.engine_id is None or not await jobs.update_progress(self.engine_id, stored):
                raise TypeError(f"Missing key for job {self.id}. updateProgress")
        self.progress = progress

    def log(self, row: str) -> asyncio.Future[int]:
        """Append a log line; resolves to the number of lines the job's log holds. Takes effect
        even when not awaited (ported JavaScript often does not await it): the write is
        scheduled at once, after the job's earlier lines, and the worker waits for it before
        the job's outcome is written."""
        previous = self._pending_logs[-1] if self._pending_logs else None
        future = asyncio.ensure_future(self._log(str(row), previous))
        self._pending_logs.append(future)
        return future

    async def _log(self, row: str, previous: asyncio.Future[Any] | None) -> int:
        if previous is not None:  # lines land in the order they were logged
            await asyncio.gather(previous, return_exceptions=True)
        keep = self.opts.get("keepLogs")
        if self.context is not None:
            return await self.context.log(row)
        jobs = await self.queue.engine()
        if self.engine_id is None:
            return 0
        return await jobs.append_log(self.engine_id, row, keep_last=keep)

    async def flush_logs(self) -> None:
        """Wait for every log line scheduled so far."""
        while self._pending_logs:
            pending, self._pending_logs = self._pending_logs, []
            await asyncio.gather(*pending, return_exceptions=True)

    async def updateData(self, data: Any) -> None:
        """Replace the job's data. Data jsonb cannot hold (a NUL, a lone surrogate) raises
        InvalidOption naming ``data`` here, although ``add`` accepts it (docs/porting.md §4)."""
        stored = json_data(data)
        jobs = await self.queue.engine()
        try:
            updated = self.engine_id is not None and await jobs.update_payload(
                self.engine_id, stored
            )
        except InvalidJobInput as exc:
            raise InvalidOption("data", f"updateData cannot store it: {exc}") from None
        if not updated:
            raise TypeError(f"Missing key for job {self.id}. updateData")
        self.data = data

    async def remove(self, opts: dict[str, Any] | None = None) -> None:
        """Remove the job and, unless ``removeChildren`` is False, its children with theirs;
        nothing is removed while a worker holds one of them. An active job is removable once
        its lock ran out (no worker holds it), as in BullMQ."""
        jobs = await self.queue.engine()
        assert self.engine_id is not None
        if (opts or {}).get("removeChildren", True):
            locked = await jobs.remove_tree(self.engine_id) is None
        else:
            result = await jobs.purge(JobFilter(ids=(self.engine_id,)), running="expired")
            locked = result.skipped_running > 0
        if locked:
            raise RuntimeError(
                f"Job {self.id} could not be removed because it is locked by another worker"
            )

    async def retry(self, state: str = "failed", opts: dict[str, Any] | None = None) -> None:
        """Move a failed (or completed) job back to waiting. Its attempts go on counting
        (``attemptsMade`` grows with its next run) unless ``opts`` asks to reset them
        (``resetAttemptsMade``, ``resetAttemptsStarted``)."""
        opts = opts or {}
        row = await self._row()
        if row is None:
            raise RuntimeError(f"Missing key for job {self.id}. reprocessJob")
        if state_of(row) != state:
            raise RuntimeError(f"Job {self.id} is not in the {state} state. reprocessJob")
        reset = bool(opts.get("resetAttemptsMade") or opts.get("resetAttemptsStarted"))
        # BullMQ's reprocessJob drops processedOn, finishedOn and the failedReason (a failed
        # job) or returnvalue (a completed one)
        jobs = await self.queue.engine()
        await jobs.requeue(row.id, reset_attempts=reset, clear_outcome=True)
        self.failedReason = None
        self.finishedOn = None
        self.processedOn = None
        self.returnvalue = None
        if opts.get("resetAttemptsMade"):
            self.attemptsMade = 0
        if opts.get("resetAttemptsStarted"):
            self.attemptsStarted = 0

    async def promote(self) -> None:
        """Make a delayed job due now; raises ``RuntimeError`` (BullMQ's message) if it is not
        delayed."""
        jobs = await self.queue.engine()
        if self.engine_id is None or not await jobs.promote(self.engine_id):
            raise RuntimeError(f"Job {self.id} is not in the delayed state. promote")
        self.delay = 0

    async def changeDelay(self, delay: int) -> None:
        """Run this delayed job ``delay`` ms from now instead (Node's ``changeDelay``)."""
        jobs = await self.queue.engine()
        seconds = mapping_milliseconds("delay", delay) / 1000
        if (
            self.engine_id is None
            or await self.getState() != "delayed"
            or not await jobs.reschedule(self.engine_id, seconds)
        ):
            raise RuntimeError(f"Job {self.id} is not in the delayed state. changeDelay")
        self.delay = delay

    async def changePriority(self, opts: dict[str, Any]) -> None:
        """Give the job ``opts["priority"]`` (0: none). A job waiting its turn goes behind
        the jobs of its new priority, or before them with ``lifo``, as BullMQ re-adds it."""
        priority = opts.get("priority", 0)
        place: PriorityPlace = "first" if opts.get("lifo") else "last"
        jobs = await self.queue.engine()
        if self.engine_id is None or not await jobs.change_priority(
            self.engine_id, to_engine_priority(priority), place=place
        ):
            raise RuntimeError(f"Missing key for job {self.id}. changePriority")
        self.priority = priority

    # -- moving a job on, from its processor or after Worker.getNextJob ---------------------

    async def _claim(self, token: str | None, command: str) -> JobContext:
        """The claim this job runs under, for a move BullMQ's script ``command`` makes (named
        in the errors, as BullMQ's are). Token ``"0"`` is BullMQ's "no lock check"; any other
        must be the one the job was taken with."""
        ctx = self.context
        if ctx is None or ctx.settled is not None or ctx.completed:
            # Not taken, or already moved on by hand: BullMQ's checks, in its order.
            row = await self._row()
            if row is None:
                raise RuntimeError(f"Missing key for job {self.id}. {command}")
            if token not in (None, NO_LOCK_CHECK) or state_of(row) == "active":
                raise RuntimeError(f"Missing lock for job {self.id}. {command}")
            raise RuntimeError(f"Job {self.id} is not in the active state. {command}")
        if token not in (None, NO_LOCK_CHECK) and self.token is not None and token != self.token:
            raise RuntimeError(f"Missing lock for job {self.id}. {command}")
        return ctx

    async def _lost(self, command: str) -> RuntimeError:
        """BullMQ's error for a move whose fenced write found the job no longer ours: gone,
        or taken over (its lock expired)."""
        if await self._row() is None:
            return RuntimeError(f"Missing key for job {self.id}. {command}")
        return RuntimeError(f"Missing lock for job {self.id}. {command}")

    def _failure_command(self, err: BaseException) -> str:
        """The script BullMQ's ``moveToFailed`` runs for ``err``: ``retryJob`` or
        ``moveToDelayed`` (after a backoff) while attempts remain, else ``moveToFinished``."""
        attempts = self.opts.get("attempts") or 0
        if self.attemptsMade + 1 >= attempts or isinstance(err, UnrecoverableError):
            return "moveToFinished"
        backoff = self.opts.get("backoff")
        delay = backoff.get("delay") if isinstance(backoff, dict) else backoff
        return "moveToDelayed" if delay else "retryJob"

    async def moveToCompleted(
        self, returnValue: Any, token: str | None = None, fetchNext: bool = False
    ) -> Any:
        """Complete the job with ``returnValue``; with ``fetchNext``, take the next job for the
        same token and return BullMQ's ``[jobData, jobId, limitUntil, delayUntil]``."""
        ctx = await self._claim(token, "moveToFinished")
        stored = json_data(returnValue, "returnvalue")
        await self.flush_logs()
        try:
            completed = await ctx.complete(stored)
        except PendingPrerequisites:
            raise RuntimeError(pending_dependencies(str(self.id))) from None
        if not completed:
            raise await self._lost("moveToFinished")
        self.returnvalue = returnValue
        self.finishedOn = int(time.time() * 1000)
        self.attemptsMade += 1
        return await self._fetch_next() if fetchNext else None

    async def _fetch_next(self) -> Any:
        if self.worker is None or self.token is None:
            return None
        return await self.worker.next_job_data(self.token)

    async def moveToFailed(
        self, err: BaseException, token: str | None = None, fetchNext: bool = False
    ) -> Any:
        """Fail this attempt with ``err``: retried after its backoff while attempts remain
        (an ``UnrecoverableError`` fails it at once), failed otherwise. With ``fetchNext``,
        take the next job for the same token and return its raw data (see moveToCompleted)."""
        command = self._failure_command(err)
        ctx = await self._claim(token, command)
        self.record_failure(err)
        await self.flush_logs()
        status = await ctx.fail(self.engine_failure(err))
        if status is None:
            raise await self._lost(command)
        self.attemptsMade += 1
        if status == "dead":
            self.finishedOn = int(time.time() * 1000)
        # BullMQ's retryJob script takes no next job: only a delayed or finished one does.
        return await self._fetch_next() if fetchNext and command != "retryJob" else None

    def engine_failure(self, err: BaseException) -> BaseException:
        """The engine signal for a failed attempt: Fatal for ``UnrecoverableError``, a Retry
        at the delay of a custom backoff strategy, else the error itself (the engine applies
        the job's fixed or exponential backoff)."""
        if isinstance(err, UnrecoverableError):
            return Fatal(str(err))
        backoff = self.opts.get("backoff")
        kind = backoff.get("type") if isinstance(backoff, dict) else None
        if kind not in (None, "fixed", "exponential"):
            strategy = (self.queue.opts.get("settings") or {}).get("backoffStrategy")
            if strategy is None:
                return Fatal(f"no backoffStrategy in the worker's settings for backoff {kind!r}")
            delay = strategy(self.attemptsMade + 1, kind, err, self)
            if delay == -1:
                return Fatal(str(err))
            return Retry(max(float(delay or 0), 0.0) / 1000, str(err))
        return err

    async def moveToDelayed(self, timestamp: float, token: str | None = None) -> None:
        """Inside the processor, then ``raise DelayedError()``: the job waits until
        ``timestamp`` (ms) without using an attempt. For a job taken with getNextJob, the move
        happens at once."""
        ctx = await self._claim(token, "moveToDelayed")
        self._delay_until_ms = float(timestamp)
        if not self.manual:
            return
        await self.flush_logs()
        if await ctx.fail(Delayed(max(0.0, timestamp / 1000 - time.time()))) is None:
            raise await self._lost("moveToDelayed")

    def deferral(self) -> Delayed:
        """The engine deferral for a ``DelayedError`` raised after ``moveToDelayed``."""
        until = self._delay_until_ms
        return Delayed(max(0.0, ((until or 0) / 1000) - time.time()))

    async def extendLock(self, token: str, duration: int) -> int:
        """Keep the job ``duration`` ms more; 1 when extended, 0 when the lock is gone."""
        ctx = await self._claim(token, "extendLock")
        return int(await ctx.extend_lease(duration / 1000))

    async def moveToWaitingChildren(
        self, token: str | None = None, opts: dict[str, Any] | None = None
    ) -> bool:
        """Inside the processor: True when children added to this job (``parent`` option) are
        still open; then ``raise WaitingChildrenError()`` and the job runs again once they are
        done, without using an attempt. Raises ``UnrecoverableError`` (the job then fails) when
        a child with ``failParentOnFailure`` has already failed, as BullMQ does."""
        ctx = await self._claim(token, "moveToWaitingChildren")
        still_open = await ctx.open_prerequisites()
        if any(
            child["policy"] in FAILS_PARENT and child["state"] == "failed"
            for child in await ctx.prerequisites()
        ):
            raise UnrecoverableError(
                f"Cannot complete job {self.id} because it has at least one failed child. "
                "moveToWaitingChildren"
            )
        if still_open and self.manual:  # taken with getNextJob: it moves now
            await self.flush_logs()
            if await ctx.fail(WaitForPrerequisites(counted=True)) is None:
                raise await self._lost("moveToWaitingChildren")
        return still_open > 0

    def record_failure(self, exc: BaseException) -> None:
        """Keep ``exc`` as this attempt's failure: its message, and its trace appended to
        ``stacktrace`` (at most ``stackTraceLimit`` kept, none when it is 0), as BullMQ's
        ``updateStacktrace``."""
        self.error = exc
        self.failedReason = str(exc)
        traces = [*self.stacktrace, _stacktrace(exc)]
        limit = self.opts.get("stackTraceLimit")
        if limit == 0:
            traces = []
        elif isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
            traces = traces[-limit:]
        self.stacktrace = traces

    # -- flows -----------------------------------------------------------------------------

    async def _prerequisites(self) -> list[dict[str, Any]]:
        if self.context is not None:
            return await self.context.prerequisites()
        jobs = await self.queue.engine()
        if self.engine_id is None:
            return []
        return await jobs.prerequisite_results(self.engine_id)

    async def getChildrenValues(self) -> dict[str, Any]:
        """Return values of the completed children, keyed ``<prefix>:<queue>:<id>``."""
        return {
            f"{child['queue']}:{job_id_of(child['id'], child['job_key'])}": child["output"]
            for child in await self._prerequisites()
            if child["status"] == "completed"
        }

    async def getIgnoredChildrenFailures(self) -> dict[str, str]:
        """Failed reasons of the children whose failure this job was told to ignore."""
        return {
            f"{child['queue']}:{job_id_of(child['id'], child['job_key'])}": (
                error_message(child["failure"] or {}) or ""
            )
            for child in await self._prerequisites()
            if child["state"] == "ignored"
        }

    async def getDependencies(self, opts: dict[str, Any] | None = None) -> dict[str, Any]:
        """This job's children by outcome, keyed ``<prefix>:<queue>:<id>``: ``processed``
        (with their return values), ``unprocessed``, ``failed``, ``ignored`` (with their
        failed reasons). With ``opts`` (``{"processed": {"cursor", "count"}, ...}``) only the
        kinds named come back, a page each, with ``next<Kind>Cursor`` (0 once at the end)."""
        children = await self._prerequisites()

        def key(child: dict[str, Any]) -> str:
            return f"{child['queue']}:{job_id_of(child['id'], child['job_key'])}"

        kinds: dict[str, list[tuple[str, Any]]] = {
            "processed": [(key(c), c["output"]) for c in children if c["state"] == "satisfied"],
            "unprocessed": [(key(c), None) for c in children if c["state"] == "open"],
            "failed": [(key(c), None) for c in children if c["state"] in ("blocked", "failed")],
            "ignored": [
                (key(c), error_message(c["failure"] or {}) or "")
                for c in children
                if c["state"] in ("ignored", "released")
            ],
        }
        wanted = opts or {kind: {} for kind in kinds}
        result: dict[str, Any] = {}
        for kind, page_opts in wanted.items():
            if kind not in kinds:
                raise ValueError(f"getDependencies: unknown kind {kind!r}")
            entries = kinds[kind]
            cursor = int((page_opts or {}).get("cursor") or 0)
            count = int((page_opts or {}).get("count") or len(entries) or 1)
            page = entries[cursor : cursor + count]
            following = cursor + count
            if kind in ("processed", "ignored"):
                result[kind] = dict(page)
            else:
                result[kind] = [name for name, _ in page]
            if opts:
                result[f"next{kind.capitalize()}Cursor"] = (
                    following if following < len(entries) else 0
                )
        return result

    async def removeChildDependency(self) -> bool:
        """Stop this job's parent waiting for it (the parent may then run); False if it has
        no parent."""
        jobs = await self.queue.engine()
        if self.engine_id is None:
            return False
        for dependent in await jobs.dependents_of(self.engine_id):
            if await jobs.remove_dependency(self.engine_id, dependent["id"]):
                return True
        return False

    async def getDependenciesCount(self) -> dict[str, int]:
        """How many of the job's children are processed, unprocessed, failed and ignored."""
        children = await self._prerequisites()
        return {
            "processed": sum(c["state"] == "satisfied" for c in children),
            "unprocessed": sum(c["state"] in ("open",) for c in children),
            "failed": sum(c["state"] in ("blocked", "failed") for c in children),
            "ignored": sum(c["state"] in ("ignored", "released") for c in children),
        }

    def asJSON(self) -> dict[str, Any]:
        """The job's fields as BullMQ's ``asJSON`` gives them."""
        return {
            "id": self.id,
            "name": self.name,
            "data": self.data,
            "opts": self.opts,
            "progress": self.progress,
            "timestamp": self.timestamp,
            "delay": self.delay,
            "priority": self.priority,
            "attemptsMade": self.attemptsMade,
            "attemptsStarted": self.attemptsStarted,
            "processedOn": self.processedOn,
            "finishedOn": self.finishedOn,
            "returnvalue": self.returnvalue,
            "failedReason": self.failedReason,
            "stacktrace": self.stacktrace,
        }
