"""Job: BullMQ's view of one engine job, its reads and its writes."""

from __future__ import annotations

import asyncio
import traceback
from datetime import datetime
from typing import TYPE_CHECKING, Any

from bullmq_compat.mapping import (
    attempts_made,
    json_data,
    state_of,
    to_bullmq_priority,
    to_engine_priority,
)
from pgjobs import JobContext, JobFilter, JobRow, Status

if TYPE_CHECKING:
    from bullmq_compat.queue import Queue
    from bullmq_compat.queue_events import QueueEvents


def _ms(value: datetime | None) -> int | None:
    return None if value is None else int(value.timestamp() * 1000)


def job_id_of(row_id: int, job_key: str | None) -> str:
    """A custom jobId is the job's key; an automatic id is the engine id as a string."""
    return job_key if job_key is not None else str(row_id)


class Job:
    """A BullMQ job. Built by ``Queue.add``, ``Queue.getJob`` and the worker."""

    def __init__(
        self,
        queue: Queue,
        name: str,
        data: Any,
        opts: dict[str, Any] | None = None,
        job_id: str | None = None,
    ) -> None:
        self.queue = queue
        self.name = name
        self.data = data
        self.opts: dict[str, Any] = {"attempts": 0, "delay": 0, **(opts or {})}
        self.id = job_id
        self.progress: Any = 0
        self.timestamp: int | None = None
        self.delay: int = self.opts.get("delay") or 0
        self.priority: int = self.opts.get("priority") or 0
        self.attempts: int = self.opts.get("attempts") or 1
        self.attemptsMade = 0
        self.attemptsStarted = 0
        self.processedOn: int | None = None
        self.finishedOn: int | None = None
        self.returnvalue: Any = None
        self.failedReason: str | None = None
        self.stacktrace: list[str] = []
        self.token: str | None = None
        self._engine_id: int | None = None
        self._ctx: JobContext | None = None
        self._pending_logs: list[asyncio.Future[Any]] = []
        self._delay_until_ms: float | None = None
        self._error: BaseException | None = None

    # -- construction ----------------------------------------------------------------------

    @classmethod
    def from_row(cls, queue: Queue, row: JobRow) -> Job:
        opts = (row.metadata or {}).get("opts", {}) if isinstance(row.metadata, dict) else {}
        job = cls(queue, row.name, row.payload, opts, job_id_of(row.id, row.job_key))
        job._engine_id = row.id
        job.priority = to_bullmq_priority(row.priority)
        job.progress = row.progress if row.progress is not None else 0
        job.timestamp = _ms(row.created_at)
        job.attemptsMade = attempts_made(row)
        job.attemptsStarted = row.attempts
        job.attempts = row.max_attempts
        job.processedOn = _ms(row.started_at)
        job.finishedOn = _ms(row.finished_at)
        job.returnvalue = row.output if row.status is Status.COMPLETED else None
        if row.last_error:
            job.failedReason = row.last_error.get("message")
            if row.last_error.get("traceback"):
                job.stacktrace = [row.last_error["traceback"]]
        return job

    @classmethod
    def from_context(cls, queue: Queue, ctx: JobContext, data: Any) -> Job:
        opts = (ctx.metadata or {}).get("opts", {}) if isinstance(ctx.metadata, dict) else {}
        job = cls(queue, ctx.name, data, opts, job_id_of(ctx.id, ctx.job_key))
        job._engine_id = ctx.id
        job._ctx = ctx
        job.priority = to_bullmq_priority(ctx.priority)
        job.attempts = ctx.max_attempts
        job.attemptsMade = ctx.attempts - 1
        job.attemptsStarted = ctx.attempts
        job.timestamp = _ms(ctx.created_at)
        job.token = str(ctx.lock_token)
        return job

    @property
    def engine_id(self) -> int | None:
        """The pgjobs id of this job: the bridge to the native API (``JobQueue.get``,
        ``flow_view``, ...) for what BullMQ cannot do."""
        return self._engine_id

    @classmethod
    async def fromId(cls, queue: Queue, job_id: str) -> Job | None:
        return await queue.getJob(job_id)

    # -- reads -----------------------------------------------------------------------------

    async def _row(self) -> JobRow | None:
        jobs = await self.queue._engine()
        if self._engine_id is None:
            return None
        return await jobs.get(self._engine_id)

    async def getState(self) -> str:
        row = await self._row()
        return "unknown" if row is None else state_of(row)

    async def isCompleted(self) -> bool:
        return await self.getState() == "completed"

    async def isFailed(self) -> bool:
        return await self.getState() == "failed"

    async def isDelayed(self) -> bool:
        return await self.getState() == "delayed"

    async def isActive(self) -> bool:
        return await self.getState() == "active"

    async def isWaiting(self) -> bool:
        return await self.getState() in ("waiting", "prioritized")

    async def isWaitingChildren(self) -> bool:
        return await self.getState() == "waiting-children"

    async def isFinished(self) -> bool:
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
        if self._ctx is None:
            raise NotImplementedError(
                "updateProgress outside the job's processor is not supported yet"
            )
        await self._ctx.progress(progress)
        self.progress = progress

    def log(self, row: str) -> asyncio.Future[Any]:
        """Append a log line. Takes effect even when not awaited (ported JavaScript often does
        not await it): the write is scheduled at once, after the job's earlier lines, and the
        worker waits for it before the job's outcome is written."""
        previous = self._pending_logs[-1] if self._pending_logs else None
        future = asyncio.ensure_future(self._log(str(row), previous))
        self._pending_logs.append(future)
        return future

    async def _log(self, row: str, previous: asyncio.Future[Any] | None) -> int:
        if previous is not None:  # lines land in the order they were logged
            await asyncio.gather(previous, return_exceptions=True)
        keep = self.opts.get("keepLogs")
        if self._ctx is not None:
            await self._ctx.log(row)
        else:
            jobs = await self.queue._engine()
            assert self._engine_id is not None
            await jobs.append_log(self._engine_id, row, keep_last=keep)
        return 1

    async def _flush_logs(self) -> None:
        while self._pending_logs:
            pending, self._pending_logs = self._pending_logs, []
            await asyncio.gather(*pending, return_exceptions=True)

    async def updateData(self, data: Any) -> None:
        stored = json_data(data)
        jobs = await self.queue._engine()
        if self._engine_id is None or not await jobs.update_payload(self._engine_id, stored):
            raise TypeError(f"Missing key for job {self.id}. updateData")
        self.data = data

    async def remove(self, opts: dict[str, Any] | None = None) -> None:
        jobs = await self.queue._engine()
        assert self._engine_id is not None
        result = await jobs.purge(JobFilter(ids=(self._engine_id,)), running="skip")
        if result.skipped_running:
            raise RuntimeError(
                f"Job {self.id} could not be removed because it is locked by another worker"
            )

    async def retry(self, state: str = "failed", opts: dict[str, Any] | None = None) -> None:
        row = await self._row()
        if row is None or state_of(row) != state:
            raise RuntimeError(f"Job {self.id} is not in the {state} state")
        jobs = await self.queue._engine()
        await jobs.requeue(row.id)

    async def promote(self) -> None:
        jobs = await self.queue._engine()
        if self._engine_id is None or not await jobs.promote(self._engine_id):
            raise RuntimeError(f"Job {self.id} is not in the delayed state. promote")
        self.delay = 0

    async def changePriority(self, opts: dict[str, Any]) -> None:
        if opts.get("lifo"):
            raise NotImplementedError("lifo is not supported yet by the pgjobs facade")
        priority = opts.get("priority", 0)
        jobs = await self.queue._engine()
        assert self._engine_id is not None
        await jobs.change_priority(self._engine_id, to_engine_priority(priority))
        self.priority = priority

    async def moveToDelayed(self, timestamp: float, token: str | None = None) -> None:
        """Inside the processor, then ``raise DelayedError()``: the attempt does not count."""
        if self._ctx is None:
            raise RuntimeError("moveToDelayed must be called by the job's processor")
        self._delay_until_ms = float(timestamp)

    async def moveToWaitingChildren(
        self, token: str | None = None, opts: dict[str, Any] | None = None
    ) -> bool:
        """Inside the processor: True when children added to this job (``parent`` option) are
        still open; then ``raise WaitingChildrenError()`` and the job runs again once they are
        done, without using an attempt."""
        if self._ctx is None:
            raise RuntimeError("moveToWaitingChildren must be called by the job's processor")
        return await self._ctx.open_prerequisites() > 0

    @property
    def queueQualifiedName(self) -> str:
        return self.queue.qualifiedName

    def _record_failure(self, exc: BaseException) -> None:
        self._error = exc
        self.failedReason = str(exc)
        self.stacktrace = ["".join(traceback.format_exception(exc))]

    async def _prerequisites(self) -> list[dict[str, Any]]:
        if self._ctx is not None:
            return await self._ctx.prerequisites()
        jobs = await self.queue._engine()
        assert self._engine_id is not None
        return await jobs.prerequisite_results(self._engine_id)

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
                child["failure"] or {}
            ).get("message", "")
            for child in await self._prerequisites()
            if child["state"] == "ignored"
        }

    async def getDependenciesCount(self) -> dict[str, int]:
        children = await self._prerequisites()
        return {
            "processed": sum(c["state"] == "satisfied" for c in children),
            "unprocessed": sum(c["state"] in ("open",) for c in children),
            "failed": sum(c["state"] in ("blocked", "failed") for c in children),
            "ignored": sum(c["state"] in ("ignored", "released") for c in children),
        }

    def asJSON(self) -> dict[str, Any]:
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
            "processedOn": self.processedOn,
            "finishedOn": self.finishedOn,
            "returnvalue": self.returnvalue,
            "failedReason": self.failedReason,
            "stacktrace": self.stacktrace,
        }
