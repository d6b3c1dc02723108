"""QueueEvents and QueueEventsProducer on the engine's event log (pgjobs ``JobQueue.events``).

The log is durable and read in commit order, so ``lastEventId="0"`` replays what is retained
(the queue's workers keep its newest ``streams.events.maxLen``, 10,000 by default; the
engine's GC, where scheduled, the newest 10,000 per queue) and a listener never sees a job's
events out of order. Values are shaped as BullMQ's Python ``QueueEvents`` delivers them:
strings, except ``progress.data`` and ``completed.returnvalue``.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import datetime
from typing import Any

import pgjobs
from bullmq_compat.connection import EngineConnection
from bullmq_compat.emitter import EventEmitter
from bullmq_compat.job import error_message, job_id_of
from bullmq_compat.mapping import engine_queue, to_bullmq_priority
from bullmq_compat.types import QueueBaseOptions, QueueEventsOptions
from pgjobs import JobEvent, JobFilter, SubState

# engine status -> BullMQ state, for the ``prev`` of an event
_PREV = {
    "pending": "waiting",
    "running": "active",
    "completed": "completed",
    "dead": "failed",
    "cancelled": "failed",
}
_FINISHING = {"completed", "failed", "cancelled", "retrying", "deferred", "stalled", "removed"}


def _ms(value: str | None) -> str:
    if value is None:
        return "0"
    return str(int(datetime.fromisoformat(value).timestamp() * 1000))


def _due_later(event: JobEvent) -> bool:
    run_at = event.data.get("run_at")
    return run_at is not None and datetime.fromisoformat(run_at) > event.at


def _waiting_or_delayed(event: JobEvent, job_id: str, prev: str) -> tuple[str, dict[str, Any]]:
    if _due_later(event):
        return "delayed", {"jobId": job_id, "delay": _ms(event.data.get("run_at"))}
    return "waiting", {"jobId": job_id, "prev": prev}


def _removed_from(event: JobEvent) -> str:
    """The BullMQ state a removed job was in: a pending one's by its event data (waiting for
    children, due later, by priority), as ``Job.getState`` would have read it."""
    if event.prev != "pending":
        return _PREV.get(event.prev or "", "waiting")
    data = event.data or {}
    if (data.get("pending_deps") or 0) > 0:
        return "waiting-children"
    if _due_later(event):
        return "delayed"
    priority = data.get("priority")
    if priority is not None and to_bullmq_priority(int(priority)) != 0:
        return "prioritized"
    return "waiting"


def translate(event: JobEvent) -> list[tuple[str, dict[str, Any]]]:
    """The BullMQ events (name, args) one engine event stands for."""
    if event.job_id is None:  # queue events: paused, resumed, and published ones
        return [(event.event, dict(event.data))]
    job_id = job_id_of(event.job_id, event.job_key)
    data = event.data
    match event.event:
        case "added":
            added = ("added", {"jobId": job_id, "name": data.get("name", "")})
            if data.get("state") == "waiting_children":
                return [added, ("waiting-children", {"jobId": job_id})]
            if data.get("state") == "delayed":
                return [added, ("delayed", {"jobId": job_id, "delay": _ms(data.get("run_at"))})]
            return [added, ("waiting", {"jobId": job_id})]
        case "active":
            return [("active", {"jobId": job_id, "prev": "waiting"})]
        case "progress":
            return [("progress", {"jobId": job_id, "data": data.get("progress")})]
        case "completed":
            return [
                (
                    "completed",
                    {"jobId": job_id, "returnvalue": data.get("output"), "prev": "active"},
                )
            ]
        case "failed" | "cancelled":
            error = data.get("error") or {}
            reason = error_message(error, job_id) or event.event
            failed = ("failed", {"jobId": job_id, "failedReason": reason, "prev": "active"})
            attempts = data.get("attempts", 0)
            if event.event == "failed" and attempts >= data.get("max_attempts", attempts + 1):
                return [
                    failed,
                    ("retries-exhausted", {"jobId": job_id, "attemptsMade": str(attempts)}),
                ]
            return [failed]
        case "retrying" | "deferred":
            return [_waiting_or_delayed(event, job_id, "active")]
        case "waiting_children":
            return [("waiting-children", {"jobId": job_id, "prev": "active"})]
        case "stalled":
            return [
                ("stalled", {"jobId": job_id}),
                ("waiting", {"jobId": job_id, "prev": "active"}),
            ]
        case "released":
            return [_waiting_or_delayed(event, job_id, "waiting-children")]
        case "requeued":
            return [_waiting_or_delayed(event, job_id, _PREV.get(event.prev or "", "failed"))]
        case "rescheduled":
            return [_waiting_or_delayed(event, job_id, "delayed")]
        case "removed":
            return [("removed", {"jobId": job_id, "prev": _removed_from(event)})]
    return []


_FROM_START_IDS = frozenset({"0", "0-0"})
"""``lastEventId`` values that mean the start of the log: ``"0"`` and the Redis stream id
``"0-0"`` (a port copies either from BullMQ code)."""


def _start_of(opts: dict[str, Any]) -> str | None:
    """The engine cursor ``lastEventId`` names: None for new events only (``"$"``, the
    default), ``"0"`` for the start of the log, else an event id a listener received."""
    last = opts.get("lastEventId")
    if last in (None, "$"):
        return None
    return "0" if str(last) in _FROM_START_IDS else str(last)


class QueueEvents(EventEmitter):
    """``QueueEvents(name, opts)``: options ``connection``, ``prefix``, ``schema``, ``autorun``
    (True: starts at once, so build it inside a running loop), ``lastEventId`` (``"$"``: new
    events only, the default; ``"0"``: everything retained; or an event id from a listener).
    Listeners are called ``fn(args, eventId)`` (``drained``: ``fn(eventId)``), on the event name
    and, when it concerns a job, on ``"<event>:<jobId>"``."""

    def __init__(self, name: str, opts: QueueEventsOptions | None = None) -> None:
        super().__init__()
        self.name = name
        self.opts: dict[str, Any] = {"autorun": True, **(opts or {})}
        self.prefix = self.opts.get("prefix", "bull")
        self.qualifiedName = engine_queue(self.prefix, name)
        self.connection = EngineConnection(self.opts)
        self._ready = asyncio.Event()
        self._stream: pgjobs.EventStream | None = None
        self._task: asyncio.Future[None] | None = None
        self._closing = False
        self._drained_reported = False
        self._delayed: set[str] = set()
        """Jobs this listener saw become delayed and not yet move on (``_with_promotions``)."""
        self.running = False
        self.closed = False
        if self.opts["autorun"]:
            self._task = asyncio.ensure_future(self.run())

    async def run(self) -> None:
        """Consume the log until ``close()``. The stream waits out a lost connection or a
        server restart (its reads are retried); any other read error is emitted on ``error``
        and ends it. Raises ``Exception("QueueEvents is already running.")`` while another
        ``run()`` consumes, as BullMQ does."""
        if self.running:
            raise Exception("QueueEvents is already running.")
        if self.closed:
            return
        self.running = True
        try:
            jobs = await self.connection.open(pgjobs.Registry())
            self._stream = jobs.events([self.qualifiedName], after=_start_of(self.opts))
            await self._stream.start()
            self._ready.set()
            async for event in self._stream:
                for name, args in self._with_promotions(translate(event)):
                    self.emit(name, args, event.cursor)
                    if "jobId" in args:
                        self.emit(f"{name}:{args['jobId']}", args, event.cursor)
                if event.event in _FINISHING and self._stream.buffered == 0:
                    await self._report_drained(jobs, event.cursor)
                elif event.event in ("added", "released", "requeued"):
                    self._drained_reported = False
        except Exception as exc:
            if not self._closing:
                self.emit("error", exc)
        finally:
            self.running = False
            self._ready.set()

    def _with_promotions(
        self, events: list[tuple[str, dict[str, Any]]]
    ) -> list[tuple[str, dict[str, Any]]]:
        """``events``, with BullMQ's ``waiting`` (prev ``delayed``) before the ``active`` of a
        job this listener saw delayed. The engine has no promotion step (a due job is simply
        claimable), and BullMQ promotes due jobs when a worker fetches: so the promotion is
        reported in the order BullMQ writes it, just before the job's ``active``."""
        out: list[tuple[str, dict[str, Any]]] = []
        for name, args in events:
            job_id = args.get("jobId")
            if job_id is not None:
                if name == "delayed":
                    self._delayed.add(job_id)
                elif job_id in self._delayed:
                    self._delayed.discard(job_id)
                    if name == "active":
                        out.append(("waiting", {"jobId": job_id, "prev": "delayed"}))
            out.append((name, args))
        return out

    async def _report_drained(self, jobs: pgjobs.JobQueue, cursor: str) -> None:
        """``drained``: once wait, prioritized and active are all empty after a job ends."""
        counts = await jobs.substate_counts(JobFilter(queue=self.qualifiedName))
        if counts[SubState.READY] or counts[SubState.ACTIVE]:
            self._drained_reported = False
        elif not self._drained_reported:
            self._drained_reported = True
            self.emit("drained", cursor)

    async def waitUntilReady(self) -> None:
        """Returns once the listener is attached: events committed after this are delivered."""
        await self._ready.wait()

    async def close(self) -> None:
        """Stop consuming and release the connection; idempotent."""
        if self.closed:
            return
        self._closing = True
        if self._stream is not None:
            await self._stream.close()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.settle()
        await self.connection.close()
        self.running = False
        self.closed = True

    disconnect = close


class QueueEventsProducer:
    """``publishEvent({"eventName": ..., **args})`` appends a custom event to the queue's log;
    ``QueueEvents`` listeners receive it as ``fn(args, eventId)``."""

    def __init__(self, name: str, opts: QueueBaseOptions | None = None) -> None:
        self.name = name
        self.opts: dict[str, Any] = dict(opts or {})
        self.qualifiedName = engine_queue(self.opts.get("prefix", "bull"), name)
        self.connection = EngineConnection(self.opts)

    async def publishEvent(self, args: dict[str, Any], maxEvents: int = 1000) -> None:
        """``maxEvents`` is accepted for signature compatibility and not applied: the queue's
        workers keep the log to their ``streams.events.maxLen`` (BullMQ trims the whole stream
        to ``maxEvents`` on each publish)."""
        if "eventName" not in args:
            raise ValueError("publishEvent needs args['eventName']")
        rest = {k: v for k, v in args.items() if k != "eventName"}
        jobs = await self.connection.open(pgjobs.Registry())
        await jobs.publish_event(self.qualifiedName, str(args["eventName"]), rest)

    async def close(self) -> None:
        """Let the connection go (a pool shared with other objects stays open)."""
        await self.connection.close()
