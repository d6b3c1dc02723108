"""AbortController / AbortSignal: per-job cancellation a processor can observe, as BullMQ's
Python package offers it. A processor that takes a third parameter receives its job's signal;
``Worker.cancelJob(id, reason)`` aborts it, and so does an engine cancel of the running job
(``pgjobs.JobQueue.cancel``), whose worker hears of it at once."""

from __future__ import annotations

import asyncio
from typing import Any

from pgjobs import JobContext


class AbortError(Exception):
    """Raised by ``AbortSignal.throw_if_aborted()``, and by processors that end a cancelled job
    as a failure."""

    def __init__(self, reason: Any = None) -> None:
        super().__init__(reason or "The operation was aborted")
        self.reason = reason


class AbortSignal:
    """``aborted``, ``reason``, ``await wait()``, ``throw_if_aborted()`` (``throwIfAborted``)."""

    def __init__(self, context: JobContext | None = None) -> None:
        self._context = context
        self._event = context.cancelled if context is not None else asyncio.Event()
        self._reason: Any = None

    @property
    def aborted(self) -> bool:
        return self._event.is_set()

    @property
    def reason(self) -> Any:
        return self._context.cancel_reason if self._context is not None else self._reason

    async def wait(self) -> None:
        """Returns once the signal is aborted (race it against the work)."""
        await self._event.wait()

    def throw_if_aborted(self) -> None:
        """Raise ``AbortError`` with the signal's reason if it is aborted; return otherwise."""
        if self._event.is_set():
            raise AbortError(self.reason)

    throwIfAborted = throw_if_aborted


class AbortController:
    """Owns an ``AbortSignal``; ``abort(reason)`` is idempotent (the first reason stays)."""

    def __init__(self, context: JobContext | None = None) -> None:
        self.signal = AbortSignal(context)

    def abort(self, reason: Any = None) -> None:
        """Abort the signal with ``reason``: a signal of a running job cancels the job's handler (as
        a cancel does); the first reason stays."""
        signal = self.signal
        if signal._context is not None:
            signal._context.cancel(reason)
        elif not signal._event.is_set():
            signal._reason = reason
            signal._event.set()
