"""Waiting before trying again after a database error: the one backoff every loop of the
engine (claim, outcome writes, LISTEN, start-up) and of the facade uses, and how an outage is
reported once."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable

MAX_RETRY_SECONDS = 5.0


def retry_delay(failures: int, first: float = 0.2) -> float:
    """Seconds to wait after ``failures`` consecutive failures: ``first``, doubling, at most
    ``MAX_RETRY_SECONDS``."""
    return min(first * 2.0 ** max(failures - 1, 0), MAX_RETRY_SECONDS)


async def wait_or_stop(seconds: float, stopping: asyncio.Event) -> bool:
    """Sleep ``seconds`` unless ``stopping`` is set first; True when it was."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stopping.wait(), timeout=seconds)
    return stopping.is_set()


class Outage:
    """Whether the database answers one worker (or stream), as its loops see it. Each loop
    reports its failures (``failed``) and its answers (``answered``): the first failure of an
    incident is logged at WARNING and handed to ``on_error``; later ones, from any loop, only at
    DEBUG; the first answer after them is logged with the incident's length. A failure of a
    statement sent before that answer (another loop's, still waiting on a dead connection when
    the database came back) belongs to the incident that ended. So an outage is reported once,
    however many loops meet it and however long it lasts."""

    def __init__(
        self,
        logger: logging.Logger,
        owner: str,
        on_error: Callable[[BaseException], None] | None = None,
    ) -> None:
        self._logger = logger
        self._owner = owner
        self._on_error = on_error
        self.since: float | None = None
        """When the current incident began (monotonic seconds); None while the database
        answers."""
        self._answered_at = -math.inf

    def failed(self, doing: str, error: BaseException, sent: float) -> None:
        """A loop's statement (``doing``), sent at ``sent`` (monotonic seconds), failed with a
        transient ``error``; the loop will retry."""
        if self.since is not None or sent <= self._answered_at:
            self._logger.debug("%s: %s failed again (%s)", self._owner, doing, error)
            return
        self.since = time.monotonic()
        self._logger.warning(
            "%s: %s failed (%s); the database is out of reach, retrying on new connections",
            self._owner,
            doing,
            error,
        )
        if self._on_error is not None:
            try:
                self._on_error(error)
            except Exception:
                self._logger.exception("%s: the error listener failed", self._owner)

    def answered(self) -> None:
        """A loop's statement succeeded: an incident in progress is over."""
        if self.since is None:
            return
        self._answered_at = time.monotonic()
        lasted = self._answered_at - self.since
        self.since = None
        self._logger.warning("%s: the database answers again, after %.1fs", self._owner, lasted)
