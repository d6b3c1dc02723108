"""Worker: runs a BullMQ processor ``async def process(job, token)`` on a pgjobs worker."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pgjobs
from bullmq_compat.connection import Connection
from bullmq_compat.emitter import EventEmitter
from bullmq_compat.errors import (
    DelayedError,
    RateLimitError,
    UnrecoverableError,
    WaitingChildrenError,
)
from bullmq_compat.job import Job
from bullmq_compat.mapping import KIND, engine_queue
from bullmq_compat.queue import Queue
from pgjobs import Delayed, Fatal, JobContext, WaitForPrerequisites

Processor = Callable[..., Awaitable[Any]]


class Worker(EventEmitter):
    """``Worker(name, processor, opts)``. Options: ``connection``, ``prefix``, ``schema``,
    ``concurrency`` (1), ``autorun`` (True: starts at once, so build it inside a running event
    loop), ``lockDuration`` (ms, the lease; 30000), ``stalledInterval`` (ms between checks for
    jobs whose worker stopped; 30000), ``maxStalledCount`` (1: a job whose worker died runs
    again without using an attempt, and fails once it has stalled more times than this),
    ``limiter`` ``{max, duration}`` (a queue-wide rate limit, as BullMQ documents it). Events:
    ``active`` (job, prev), ``completed`` (job, result), ``failed`` (job, err) after every failed
    attempt, ``error`` (err), ``closed``.

    Start-up waits out a database that cannot be reached (or a connection lost meanwhile): each
    failed try is emitted on ``error`` and retried with backoff, until the worker runs or is
    closed, as BullMQ's worker waits for Redis."""

    def __init__(
        self, name: str, processor: Processor | None, opts: dict[str, Any] | None = None
    ) -> None:
        super().__init__()
        self.name = name
        self.processor = processor
        self.opts = {
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
        stalls = self.opts["maxStalledCount"]
        if isinstance(stalls, bool) or not isinstance(stalls, int) or stalls < 0:
            raise pgjobs.InvalidOption(
                "maxStalledCount", f"must be an integer >= 0, got {stalls!r}"
            )
        self.running = False
        self.closing = False
        self.closed = False
        self._queue = Queue(name, self.opts)
        self._connection = Connection(self.opts)
        self._jobs: dict[int, Job] = {}
        self._engine_worker: pgjobs.Worker | None = None
        self._scheduler: pgjobs.Scheduler | None = None
        self._started = asyncio.Event()
        self._close_requested = asyncio.Event()
        self._task: asyncio.Future[None] | None = None
        if processor is not None and self.opts.get("autorun", True):
            self._task = asyncio.ensure_future(self.run())

    async def run(self) -> None:
        if self.running:
            raise RuntimeError("Worker is already running.")
        if self.processor is None:
            raise RuntimeError("No process function is defined.")
        self.running = True
        try:
            jobs = await self._start_up()
            if jobs is None or self._close_requested.is_set():
                return  # closed before the database answered
            self._engine_worker = jobs.worker(
                queues=[self.qualifiedName],
                concurrency=int(self.opts["concurrency"]),
                lease=self.opts["lockDuration"] / 1000,
                rescue_interval=self.opts["stalledInterval"] / 1000,
                on_event=self._on_engine_event,
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

    async def _start_up(self) -> pgjobs.JobQueue | None:
        """Open the engine and apply the queue settings this worker's options ask for, retrying
        transient failures (each emitted on ``error``) until done or ``close()``."""
        registry = pgjobs.Registry()
        registry.kind(KIND, input=Any, queue=self.qualifiedName)(self._handle)
        failures = 0
        while not self._close_requested.is_set():
            try:
                jobs = await self._connection.open(registry)
                limiter = self.opts.get("limiter")
                if limiter:
                    await jobs.set_rate_limit(
                        self.qualifiedName, int(limiter["max"]), limiter["duration"] / 1000
                    )
                await jobs.set_max_stalls(self.qualifiedName, int(self.opts["maxStalledCount"]))
                return jobs
            except pgjobs.TRANSIENT_ERRORS as exc:
                failures += 1
                self.emit("error", exc)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(
                        self._close_requested.wait(), pgjobs.retry_delay(failures)
                    )
        return None

    async def _handle(self, ctx: JobContext, data: Any) -> Any:
        job = Job.from_context(self._queue, ctx, data)
        job.processedOn = int(time.time() * 1000)
        self._jobs[ctx.id] = job
        self.emit("active", job, "waiting")
        assert self.processor is not None
        try:
            result = await self.processor(job, job.token)
        except UnrecoverableError as exc:
            job._record_failure(exc)
            raise Fatal(str(exc)) from exc
        except DelayedError:
            until = job._delay_until_ms
            raise Delayed(max(0.0, ((until or 0) / 1000) - time.time())) from None
        except RateLimitError:
            # After worker.rateLimit(ms): back to waiting, no attempt used; the queue's limit
            # keeps every worker from taking it before the window ends.
            raise Delayed(0, "rate limited") from None
        except WaitingChildrenError:
            raise WaitForPrerequisites() from None
        except Exception as exc:
            job._record_failure(exc)
            raise
        finally:
            await job._flush_logs()
        return result

    def _on_engine_event(self, event: str, ctx: JobContext, detail: dict[str, Any]) -> None:
        if event == "active":
            return
        job = self._jobs.pop(ctx.id, None)
        if job is None:
            return
        job.finishedOn = int(time.time() * 1000)
        if event == "completed":
            job.returnvalue = detail.get("output")
            job.attemptsMade = ctx.attempts
            self.emit("completed", job, job.returnvalue)
        elif event in ("failed", "retrying"):
            job.attemptsMade = ctx.attempts
            error = job._error or Exception((detail.get("error") or {}).get("message", "failed"))
            self.emit("failed", job, error)

    async def close(self, force: bool = False) -> None:
        """Stop fetching; wait for the jobs in flight (``force``: put them back at once, without
        using an attempt), then emit ``closed``."""
        if self.closed:
            return
        self.closing = True
        self._close_requested.set()
        if self._engine_worker is not None:
            await self._engine_worker.stop(timeout=0 if force else 3600)
        if self._task is not None:
            with contextlib.suppress(Exception):  # already reported on "error"
                await self._task
        await self.settle()
        await self._connection.close()
        await self._queue.close()
        self.closed = True
        self.emit("closed")

    RateLimitError = RateLimitError

    async def rateLimit(self, expire_time_ms: int) -> None:
        """Hand out no job of this queue, to any worker, for ``expire_time_ms``; then raise
        ``Worker.RateLimitError()`` from the processor to put the current job back."""
        await self._queue.rateLimit(expire_time_ms)

    async def pause(self, doNotWaitActive: bool = False) -> None:
        """Stop taking jobs; unless ``doNotWaitActive``, return once the running ones end."""
        await self._started.wait()
        if self._engine_worker is not None:
            await self._engine_worker.pause(wait_for_running=not doNotWaitActive)
        self.emit("paused")

    def resume(self) -> None:
        if self._engine_worker is not None:
            self._engine_worker.resume()
        self.emit("resumed")

    def isPaused(self) -> bool:
        return self._engine_worker is not None and self._engine_worker.paused

    def isRunning(self) -> bool:
        return self.running

    async def waitUntilReady(self) -> None:
        await self._started.wait()
