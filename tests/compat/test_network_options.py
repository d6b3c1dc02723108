"""The facade's bounds on a silent network (facade-only options): a dict connection's
``timeouts`` entry and libpq's TCP parameters in a DSN, through a proxy that silences
connections (tests/fault_proxy.py)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest

import pgjobs
from bullmq_compat import Queue
from tests.fault_proxy import FaultProxy


@pytest.fixture
async def proxy(pg_dsn: str) -> AsyncIterator[FaultProxy]:
    async with FaultProxy(pg_dsn) as proxy:
        yield proxy


async def test_an_add_on_a_silent_connection_raises_a_timeout_and_the_next_one_works(
    jobs: pgjobs.JobQueue, schema_name: str, proxy: FaultProxy
) -> None:
    queue = Queue(
        "mail",
        {
            "connection": {"dsn": proxy.dsn, "timeouts": {"statement": 0.5}},
            "schema": schema_name,
        },
    )
    try:
        first = await queue.add("send", {"to": "a"})
        proxy.blackhole()
        with pytest.raises(pgjobs.DatabaseTimeout):
            await queue.add("send", {"to": "b"})
        third = await queue.add("send", {"to": "c"})
        assert [j.data["to"] for j in await queue.getJobs(["waiting"])] in (["a", "c"], ["c", "a"])
        assert first.id != third.id
    finally:
        await asyncio.wait_for(queue.close(), 10)


async def test_libpq_keepalive_parameters_in_the_dsn_reach_the_socket(
    jobs: pgjobs.JobQueue, schema_name: str, proxy: FaultProxy
) -> None:
    dsn = f"{proxy.dsn}?keepalives_idle=4&keepalives_count=2&tcp_user_timeout=9000"
    queue = Queue("mail", {"connection": dsn, "schema": schema_name})
    try:
        await queue.add("send", {"to": "a"})
        engine = await queue.engine()
        async with engine.pool.acquire() as conn:
            sock = conn._con._transport.get_extra_info("socket")
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 4
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == 2
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 9000
    finally:
        await queue.close()


async def test_a_bad_timeouts_entry_is_named(
    jobs: pgjobs.JobQueue, schema_name: str, pg_dsn: str
) -> None:
    queue = Queue(
        "mail", {"connection": {"dsn": pg_dsn, "timeouts": {"statment": 1}}, "schema": schema_name}
    )
    try:
        with pytest.raises(pgjobs.InvalidOption, match="statment"):
            await queue.add("send", {})
    finally:
        await queue.close()
