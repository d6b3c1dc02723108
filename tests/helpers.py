"""Test helpers: wait for a condition to a deadline instead of sleeping a guessed time."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")


async def eventually(
    probe: Callable[[], Awaitable[T]], *, timeout: float = 20.0, interval: float = 0.01
) -> T:
    """Call ``probe`` until it returns a truthy value; fail with the last value at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = await probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s (last value: {value!r})")
        await asyncio.sleep(interval)


async def expire_lease(jobs: Any, job_id: int) -> None:
    """What a worker that stopped heartbeating looks like to the others: the job's lease is
    over."""
    await jobs.db.pool.execute(
        f"UPDATE {jobs.schema}.jobs SET locked_until = now() - interval '1 second' WHERE id = $1",
        job_id,
    )
