"""A small event emitter: ``on``, ``once``, ``off``, ``emit``. Listeners may be plain functions
or ``async def`` (BullMQ's Python emitter silently drops the latter; this one runs them). A
listener that raises is reported on ``error`` (as Node's QueueBase does), never to the job."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from typing import Any

logger = logging.getLogger("bullmq_compat")

Listener = Callable[..., Any]


class EventEmitter:
    def __init__(self) -> None:
        self._listeners: dict[str, list[tuple[Listener, bool]]] = {}
        self._pending: set[asyncio.Future[Any]] = set()

    def on(self, event: str, listener: Listener) -> Listener:
        self._listeners.setdefault(event, []).append((listener, False))
        return listener

    def once(self, event: str, listener: Listener) -> Listener:
        self._listeners.setdefault(event, []).append((listener, True))
        return listener

    def off(self, event: str, listener: Listener) -> None:
        self._listeners[event] = [
            (f, o) for f, o in self._listeners.get(event, []) if f is not listener
        ]

    removeListener = off

    def removeAllListeners(self, event: str | None = None) -> None:
        if event is None:
            self._listeners.clear()
        else:
            self._listeners.pop(event, None)

    def emit(self, event: str, *args: Any) -> bool:
        listeners = self._listeners.get(event, [])
        if not listeners:
            return False
        self._listeners[event] = [(f, o) for f, o in listeners if not o]
        for listener, _ in listeners:
            try:
                result = listener(*args)
                if asyncio.iscoroutine(result):
                    future = asyncio.ensure_future(result)
                    self._pending.add(future)
                    future.add_done_callback(functools.partial(self._settled, event=event))
            except Exception as exc:
                self._report(event, exc)
        return True

    def _settled(self, future: asyncio.Future[Any], *, event: str) -> None:
        self._pending.discard(future)
        if not future.cancelled() and future.exception() is not None:
            self._report(event, future.exception())  # type: ignore[arg-type]

    def _report(self, event: str, exc: BaseException) -> None:
        if event != "error" and self._listeners.get("error"):
            self.emit("error", exc)
        else:
            logger.error("listener of %r raised", event, exc_info=exc)

    async def settle(self) -> None:
        """Wait for the async listeners already started (used on close)."""
        while self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)
