"""Two transactions on two connections, interleaved deterministically.

``overlap(pool, first, second)`` runs ``first`` in an open transaction on one connection, then
``second`` in a transaction on another. If ``second`` waits for a lock ``first`` holds (seen in
``pg_blocking_pids``, never guessed with a sleep), ``first`` commits, ``second`` then proceeds
and commits: the interleaving where the later writer resumes after the earlier one's commit,
with whatever snapshot it had. If ``second`` does not wait, the two commit in the order
``second_commits_first`` asks for.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import asyncpg

from tests.helpers import eventually

A = TypeVar("A")
B = TypeVar("B")


async def overlap(
    pool: asyncpg.Pool,
    first: Callable[[Any], Awaitable[A]],
    second: Callable[[Any], Awaitable[B]],
    *,
    second_commits_first: bool = False,
) -> tuple[A, B, bool]:
    """Returns both results and whether ``second`` had to wait for ``first``."""
    async with pool.acquire() as one, pool.acquire() as two:
        first_tx = one.transaction()
        await first_tx.start()
        second_tx = two.transaction()
        try:
            first_result = await first(one)
            await second_tx.start()
            running = asyncio.create_task(second(two))
            first_pid, second_pid = one.get_server_pid(), two.get_server_pid()

            async def blocked_or_done() -> bool:
                if running.done():
                    return True
                blockers = await pool.fetchval("SELECT pg_blocking_pids($1)", second_pid)
                return first_pid in blockers

            await eventually(blocked_or_done)
            waited = not running.done()
            if waited or not second_commits_first:
                await first_tx.commit()
                second_result = await running
                await second_tx.commit()
            else:
                second_result = await running
                await second_tx.commit()
                await first_tx.commit()
        except BaseException:
            for tx in (second_tx, first_tx):
                with contextlib.suppress(Exception):  # not started, or already ended
                    await tx.rollback()
            raise
    return first_result, second_result, waited


async def wait_until_blocking(pool: asyncpg.Pool, pid: int) -> None:
    """Return once some session waits for a lock that the session ``pid`` holds (seen in
    ``pg_blocking_pids``): the point where a concurrent statement is known to be queued."""

    async def blocking() -> bool:
        return bool(
            await pool.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))", pid
            )
        )

    await eventually(blocking)
