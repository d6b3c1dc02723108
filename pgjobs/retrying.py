"""Waiting before trying again after a database error: the one backoff every loop of the
engine (claim, outcome writes, LISTEN, start-up) and of the facade uses."""

from __future__ import annotations

import asyncio
import contextlib

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
