"""The dashboard's pages read a real streaming replica (a private cluster made with
pg_basebackup) while its actions write to the primary, and every page says how far behind
the replica is."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator, Iterator

import pytest

from pgjobs import JobQueue, Registry, Status
from tests.dashboard.clients import client_for, csrf_of
from tests.helpers import eventually
from tests.reliability.private_postgres import PrivateServer, primary_and_standby

pytestmark = pytest.mark.slow

SCHEMA = "replica_reads"


@pytest.fixture
def servers() -> Iterator[tuple[PrivateServer, PrivateServer]]:
    with primary_and_standby() as servers:
        yield servers


@pytest.fixture
async def queues(
    servers: tuple[PrivateServer, PrivateServer],
) -> AsyncIterator[tuple[JobQueue, JobQueue]]:
    primary, replica = servers
    registry = Registry()
    registry.declare("mail", input=dict, queue="mail")
    jobs = await JobQueue.connect(primary.dsn, schema=SCHEMA, registry=registry)
    await jobs.migrate()
    reads = await JobQueue.connect(replica.dsn, schema=SCHEMA, registry=registry)
    try:
        yield jobs, reads
    finally:
        await reads.close()
        await jobs.close()


async def _seen(reads: JobQueue, job_id: int) -> bool:
    with contextlib.suppress(Exception):  # the schema may not have reached the replica yet
        return await reads.get(job_id) is not None
    return False


@pytest.mark.timeout(120)
async def test_pages_read_the_replica_and_say_its_lag_while_actions_go_to_the_primary(
    queues: tuple[JobQueue, JobQueue],
) -> None:
    jobs, reads = queues
    first = await jobs.enqueue("mail", {"to": "a"})
    await eventually(lambda: _seen(reads, first.id), timeout=30)
    assert await jobs.replica_lag() is None  # a primary

    async def caught_up() -> bool:
        return await reads.replica_lag() == 0

    await eventually(caught_up, timeout=30)  # all it received is replayed
    async with client_for(jobs, reads=reads) as client:
        page = await client.get("/queues/mail")
        assert re.search(r'<span class="badge" id="replica"[^>]*>replica, [^<]+ behind', page.text)
        assert f'href="/jobs/{first.id}"' in page.text
        for path in ("/", "/flows", "/workers", "/schedules", "/queues/mail/metrics",
                     f"/jobs/{first.id}", f"/search?id={first.id}"):  # fmt: skip
            answer = await client.get(path)
            assert answer.status_code in (200, 303), (path, answer.text[-500:])
            assert answer.status_code == 303 or 'id="replica"' in answer.text, path
        # replay held: the primary moves on, the replica's pages stay behind and say so
        await reads.pool.execute("SELECT pg_wal_replay_pause()")
        try:
            second = await jobs.enqueue("mail", {"to": "b"})
            await jobs.pool.execute("SELECT pg_switch_wal()")  # ship it; the replica holds it

            async def behind() -> bool:
                return (await reads.replica_lag() or 0) > 0

            await eventually(behind, timeout=30)
            stale = await client.get("/queues/mail")
            assert f'href="/jobs/{second.id}"' not in stale.text
            shown = re.search(r'id="replica"[^>]*>replica, ([^<]+) behind', stale.text)
            assert shown is not None and shown.group(1) != "0 ms"
            # an action writes to the primary (the replica is read-only: it would refuse)
            job_page = await client.get(f"/jobs/{first.id}")
            done = await client.post(f"/jobs/{first.id}/cancel", data={"csrf": csrf_of(job_page)})
            assert done.status_code == 303, done.text
            row = await jobs.get(first.id)
            assert row is not None and row.status is Status.CANCELLED
        finally:
            await reads.pool.execute("SELECT pg_wal_replay_resume()")
        await eventually(lambda: _seen(reads, second.id), timeout=30)
        fresh = await client.get("/queues/mail")
        assert f'href="/jobs/{second.id}"' in fresh.text
