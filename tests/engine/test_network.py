"""What a silent network does to one call: TCP keepalives on every connection, libpq's TCP
parameters in a DSN, statement deadlines that close the connection and raise DatabaseTimeout,
transactions whose BEGIN, COMMIT and ROLLBACK are bounded too, and the Timeouts option's
validation. The proxy (tests/fault_proxy.py) silences connections without closing them."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import asyncpg
import pydantic
import pytest

from pgjobs import (
    DatabaseTimeout,
    InvalidOption,
    JobContext,
    JobQueue,
    Registry,
    Timeouts,
    create_pool,
)
from pgjobs.executor import Database
from pgjobs.network import split_dsn
from tests.fault_proxy import FaultProxy


@pytest.fixture
async def proxy(pg_dsn: str) -> AsyncIterator[FaultProxy]:
    async with FaultProxy(pg_dsn) as proxy:
        yield proxy


def _socket(conn: asyncpg.Connection) -> socket.socket:
    sock: socket.socket = conn._transport.get_extra_info("socket")  # type: ignore[attr-defined]
    return sock


def _tcp(sock: socket.socket, name: str) -> int:
    return sock.getsockopt(socket.IPPROTO_TCP, getattr(socket, name))


async def test_pool_connections_carry_keepalives_and_a_user_timeout(proxy: FaultProxy) -> None:
    pool = await create_pool(proxy.dsn, min_size=1, max_size=2)
    try:
        async with pool.acquire() as conn:
            sock = _socket(conn._con)
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
            assert _tcp(sock, "TCP_KEEPIDLE") == 10
            assert _tcp(sock, "TCP_KEEPINTVL") == 5
            assert _tcp(sock, "TCP_KEEPCNT") == 3
            assert _tcp(sock, "TCP_USER_TIMEOUT") == 25_000  # idle + interval * count
    finally:
        await pool.close()


async def test_libpq_tcp_parameters_in_the_dsn_set_the_socket(proxy: FaultProxy) -> None:
    dsn = (
        f"{proxy.dsn}?keepalives_idle=7&keepalives_interval=2&keepalives_count=4"
        "&tcp_user_timeout=12000&connect_timeout=3&application_name=netcheck"
    )
    pool = await create_pool(dsn, min_size=1, max_size=1)
    try:
        async with pool.acquire() as conn:
            sock = _socket(conn._con)
            assert (_tcp(sock, "TCP_KEEPIDLE"), _tcp(sock, "TCP_KEEPINTVL")) == (7, 2)
            assert _tcp(sock, "TCP_KEEPCNT") == 4
            assert _tcp(sock, "TCP_USER_TIMEOUT") == 12_000
            # the parameters asyncpg does know still reach it
            assert await conn.fetchval("SHOW application_name") == "netcheck"
    finally:
        await pool.close()


def test_split_dsn_takes_out_libpq_parameters_only() -> None:
    dsn, timeouts = split_dsn(
        "postgresql://u@h1:5432,h2:5433/db?target_session_attrs=read-write&keepalives=0"
        "&connect_timeout=4",
        Timeouts(),
    )
    assert dsn == "postgresql://u@h1:5432,h2:5433/db?target_session_attrs=read-write"
    assert timeouts.keepalives is False
    assert timeouts.connect == 4
    same, untouched = split_dsn("postgresql://u@h/db?sslmode=disable", Timeouts())
    assert same == "postgresql://u@h/db?sslmode=disable"
    assert untouched == Timeouts()


def test_bad_timeouts_are_refused_by_name() -> None:
    with pytest.raises(InvalidOption, match=r"timeouts.loop"):
        Timeouts(loop=0)
    with pytest.raises(InvalidOption, match=r"timeouts.statement"):
        Timeouts(statement=float("nan"))
    with pytest.raises(InvalidOption, match=r"timeouts.keepalive_count"):
        Timeouts(keepalive_count=0)
    with pytest.raises(InvalidOption, match=r"unknown field.*'statment'"):
        Timeouts.of({"statment": 3})
    with pytest.raises(InvalidOption, match="dsn keepalives_idle"):
        split_dsn("postgresql://h/db?keepalives_idle=soon", Timeouts())
    assert Timeouts.of({"statement": None}).statement is None


async def test_a_statement_on_a_silent_connection_times_out_and_the_next_one_works(
    proxy: FaultProxy, jobs: JobQueue, registry: Registry, schema_name: str
) -> None:
    registry.declare("note", input=dict)
    remote = await JobQueue.connect(
        proxy.dsn,
        schema=schema_name,
        registry=registry,
        min_size=1,
        max_size=2,
        timeouts=Timeouts(statement=0.5),
    )
    try:
        assert not (await remote.enqueue("note", {"n": 1})).duplicate
        assert proxy.blackhole() >= 1
        with pytest.raises(DatabaseTimeout, match=r"'enqueue_one' within 0\.5s") as raised:
            await remote.enqueue("note", {"n": 2})
        assert raised.value.statement == "enqueue_one"
        # Nothing was handed back: the dead connection was closed, and the idle ones with it.
        # New connections go through, so the next call is answered on a new one.
        assert not (await remote.enqueue("note", {"n": 3})).duplicate
    finally:
        await asyncio.wait_for(remote.close(), 10)
    inputs = [row.payload for row in await jobs.list_jobs()]
    assert {"n": 1} in inputs and {"n": 3} in inputs


async def test_a_shorter_deadline_started_later_fires_first_and_alone(
    proxy: FaultProxy, schema_name: str
) -> None:
    """One timer serves every deadline of a loop: a statement with a short deadline, begun
    after one with a long deadline, times out at its own time while the other keeps waiting,
    which then times out at its own."""
    db = await Database.connect(proxy.dsn, schema_name, min_size=2, max_size=2)
    try:
        assert await db.fetchval("ping") == 1  # both connections up
        async with db.pool.acquire() as first, db.pool.acquire() as second:
            proxy.blackhole()
            long = asyncio.ensure_future(db.fetchval("ping", conn=first, deadline=3.0))
            await asyncio.sleep(0)  # the long deadline is entered first
            with pytest.raises(DatabaseTimeout, match=r"'ping' within 0\.3s"):
                await db.fetchval("ping", conn=second, deadline=0.3)
            assert not long.done()
            with pytest.raises(DatabaseTimeout, match=r"'ping' within 3s"):
                await long
    finally:
        await asyncio.wait_for(db.close(), 10)


async def test_a_commit_that_gets_no_answer_raises_and_closes_its_connection(
    proxy: FaultProxy, pg_dsn: str
) -> None:
    registry = Registry()
    schema = "net_commit"
    direct = await JobQueue.connect(pg_dsn, schema=schema, registry=registry, max_size=2)
    await direct.migrate()
    remote = await JobQueue.connect(
        proxy.dsn, schema=schema, registry=registry, max_size=2, timeouts={"statement": 0.5}
    )
    try:
        held: list[asyncpg.Connection] = []
        with pytest.raises(DatabaseTimeout, match="'COMMIT'"):
            async with remote.db.transaction() as conn:
                held.append(conn._con)
                await conn.execute(f"CREATE TABLE {schema}.never (n int)")
                proxy.blackhole()
        assert held[0].is_closed()
        # A body that fails on a silent connection keeps its own error: the ROLLBACK that
        # cannot be sent closes the connection instead of replacing the error.
        with pytest.raises(ZeroDivisionError):
            async with remote.db.transaction() as conn:
                held.append(conn._con)
                proxy.blackhole()
                raise ZeroDivisionError
        assert held[1].is_closed()
        exists = await direct.pool.fetchval(f"SELECT to_regclass('{schema}.never')")
        assert exists is None  # the server rolled back the transaction it never saw commit
    finally:
        await asyncio.wait_for(remote.close(), 10)
        proxy.cut()  # the server's sessions end, and their open transactions with them
        await direct.pool.execute(f"DROP SCHEMA {schema} CASCADE")
        await direct.close()


class Empty(pydantic.BaseModel):
    pass


async def _pool_backends(pool: asyncpg.Pool) -> tuple[set[int], set[str]]:
    """The backend pid of every connection the pool can hold (all acquired at once, so that
    each is opened), and every channel any of them listens on."""
    conns = [await pool.acquire() for _ in range(pool.get_max_size())]
    try:
        pids = {await c.fetchval("SELECT pg_backend_pid()") for c in conns}
        channels = {
            row[0] for c in conns for row in await c.fetch("SELECT pg_listening_channels()")
        }
        return pids, channels
    finally:
        for c in conns:
            await pool.release(c)


async def test_a_stopped_worker_gives_its_listen_connection_back_to_the_pool(
    pool: asyncpg.Pool, jobs: JobQueue, registry: Registry
) -> None:
    """A worker that stops on a connection that answers removes its listeners and hands the
    connection back: the pool keeps the same backends (and their caches), none left listening."""

    @registry.kind("noop", input=Empty)
    async def noop(ctx: JobContext, data: Empty) -> None:
        pass

    await jobs.enqueue("noop", {})
    before, _ = await _pool_backends(pool)
    for _ in range(2):
        worker = jobs.worker(concurrency=2)
        await worker.run(until_drained=True)
    after, channels = await _pool_backends(pool)
    assert after == before
    assert channels == set()
