"""The pool's spare lane (pgjobs.pool): a clean connection goes from one call to the next
without asyncpg's acquire and release, and nothing else changes: no caller waits while a
connection is kept aside, and nothing a caller left on a connection reaches the next one."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest

from pgjobs import create_pool
from pgjobs.pool import SPARE, Pool


@pytest.fixture
async def small(pg_dsn: str) -> AsyncIterator[Pool]:
    pool = await create_pool(pg_dsn, min_size=1, max_size=1)
    assert isinstance(pool, Pool)
    yield pool
    await asyncio.wait_for(pool.close(), 30)  # a guard: close must not wait for a spare


async def backend(pool: Pool) -> int:
    return int(await pool.fetchval("SELECT pg_backend_pid()"))


async def test_a_clean_connection_is_kept_aside_and_taken_back(small: Pool) -> None:
    first = await backend(small)
    assert len(small._spare) == 1 and small.get_idle_size() == 0  # held aside, not in asyncpg's
    assert await backend(small) == first and len(small._spare) == 1
    async with small.acquire() as conn:
        assert small._spare == [] and await conn.fetchval("SELECT pg_backend_pid()") == first
    connection = await small.acquire()
    await small.release(connection)
    assert small._spare == [connection]


async def test_a_caller_waiting_for_a_connection_gets_it_from_the_next_release(
    small: Pool,
) -> None:
    """One connection, two callers: the second waits in asyncpg's queue, so the first's release
    must go to asyncpg (a spare would leave the waiter blocked for ever)."""
    holding = await small.acquire()
    waiter = asyncio.ensure_future(small.fetchval("SELECT 42"))
    while not small.waiting:
        await asyncio.sleep(0)  # until the waiter is in asyncpg's acquire
    await small.release(holding)
    assert small._spare == []
    assert await asyncio.wait_for(waiter, 30) == 42


@pytest.mark.filterwarnings("ignore:.*active notification listener")  # asyncpg's, on purpose
async def test_a_connection_in_a_transaction_or_with_a_listener_is_not_kept(
    small: Pool,
) -> None:
    conn = await small.acquire()
    await conn.execute("BEGIN")
    await small.release(conn)  # asyncpg's release rolls it back
    assert small._spare == []
    async with small.acquire() as again:
        assert not again.is_in_transaction()

    def heard(*_args: object) -> None:
        pass

    conn = await small.acquire()
    await conn.add_listener("pgjobs_pool_test", heard)
    await small.release(conn)  # asyncpg's release drops the listener
    assert small._spare == []
    async with small.acquire() as again:
        assert not again._con._listeners


async def test_a_block_left_by_an_error_releases_through_asyncpg(small: Pool) -> None:
    with pytest.raises(RuntimeError):
        async with small.acquire() as conn:
            await conn.fetchval("SELECT 1")
            raise RuntimeError("the caller failed")
    assert small._spare == []
    assert await small.fetchval("SELECT 1") == 1


async def test_at_most_spare_connections_are_kept_and_close_gives_them_back(
    pg_dsn: str,
) -> None:
    pool = await create_pool(pg_dsn, min_size=1, max_size=SPARE + 4)
    held = [await pool.acquire() for _ in range(SPARE + 2)]
    for conn in held:
        await pool.release(conn)
    assert len(pool._spare) == SPARE
    await asyncio.wait_for(pool.close(), 30)
    assert pool._spare == [] and pool.get_size() == 0


async def test_expired_connections_are_not_taken_back(small: Pool) -> None:
    first = await backend(small)
    await small.expire_connections()
    assert small._spare == []
    assert await backend(small) != first


async def test_a_spare_whose_server_went_away_is_replaced(small: Pool, pg_dsn: str) -> None:
    first = await backend(small)
    [spare] = small._spare
    other = await asyncpg.connect(pg_dsn)
    await other.execute("SELECT pg_terminate_backend($1)", first)
    await other.close()
    for _ in range(3000):  # until the client has read the server's goodbye
        if spare._con is None or spare.is_closed():
            break
        await asyncio.sleep(0.01)
    assert spare._con is None or spare.is_closed()
    assert await backend(small) != first


async def test_many_callers_on_a_small_pool_never_share_a_connection_nor_starve(
    pg_dsn: str,
) -> None:
    """A stress test: 40 tasks on 3 connections, mixing one-statement calls, transactions,
    explicit acquire and release, and blocks left by errors. No connection is ever in two
    callers' hands at once, and every task finishes (the wait_for is a hang guard)."""
    pool = await create_pool(pg_dsn, min_size=1, max_size=3)
    in_hand: set[int] = set()
    done = 0

    async def use(conn: object) -> None:
        pid = conn.get_server_pid()  # type: ignore[attr-defined]
        assert pid not in in_hand, "a connection is in two callers' hands"
        in_hand.add(pid)
        try:
            await asyncio.sleep(0)  # let others run while this one holds it
            assert await conn.fetchval("SELECT 1") == 1  # type: ignore[attr-defined]
        finally:
            in_hand.discard(pid)

    async def caller(n: int) -> None:
        nonlocal done
        for step in range(60):
            kind = (n + step) % 4
            if kind == 0:
                assert await pool.fetchval("SELECT $1::int", step) == step
            elif kind == 1:
                async with pool.acquire() as conn, conn.transaction():
                    await use(conn)
            elif kind == 2:
                conn = await pool.acquire()
                try:
                    await use(conn)
                finally:
                    await pool.release(conn)
            else:
                with pytest.raises(ZeroDivisionError):
                    async with pool.acquire() as conn:
                        await use(conn)
                        _ = 1 / 0
        done += 1

    try:
        await asyncio.wait_for(asyncio.gather(*(caller(n) for n in range(40))), 120)
        assert done == 40
        assert len(pool._spare) <= SPARE and pool.waiting == 0
    finally:
        await asyncio.wait_for(pool.close(), 30)
