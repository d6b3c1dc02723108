"""Waking without a NOTIFY from every write (sql/schema/wake.sql): a write in a transaction of
its own notifies a queue only while a worker waits on it, and its events only while a reader
follows them; in a caller's transaction it always notifies.

The race between a writer and one registering is closed by a per-queue advisory lock: each
interleaving of the two connections is run deterministically (tests/interleave.py). Whether a
notification was sent is read from a listening connection: notifications arrive in commit
order, so a sentinel sent after the write tells when everything the write sent has arrived.
A stress test runs workers that never poll (poll_interval of an hour) against producers: a
lost wake-up would leave a job waiting for that hour."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pydantic
import pytest

from pgjobs import JobContext, JobQueue, JobSpec, Registry, Status
from pgjobs.config import events_channel, notify_channel
from pgjobs.enqueue import prepare, row_args
from tests.helpers import eventually, listening_claimer
from tests.interleave import overlap

SENTINEL = "sentinel"


class Item(pydantic.BaseModel):
    n: int = 0


@pytest.fixture
def kinds(registry: Registry) -> dict[int, asyncio.Event]:
    """Kind "x" (queue "default"); a job whose n has an event here waits for it."""
    gates: dict[int, asyncio.Event] = {}

    @registry.kind("x", input=Item)
    async def x(ctx: JobContext, item: Item) -> int:
        gate = gates.get(item.n)
        if gate is not None:
            await gate.wait()
        return item.n

    return gates


class Listener:
    """A connection listening on the job and event channels of a schema."""

    def __init__(self, conn: Any, jobs: JobQueue) -> None:
        self.conn = conn
        self.jobs = jobs
        self.heard: list[tuple[str, str]] = []
        self._sentinel = asyncio.Event()

    def _on(self, _conn: Any, _pid: int, channel: str, payload: str) -> None:
        if payload == SENTINEL:
            self._sentinel.set()
        else:
            self.heard.append((channel, payload))

    async def settle(self) -> list[tuple[str, str]]:
        """Everything notified by transactions committed before this call, then cleared."""
        self._sentinel.clear()
        await self.jobs.db.pool.execute(
            "SELECT pg_notify($1, $2)", notify_channel(self.jobs.schema), SENTINEL
        )
        await asyncio.wait_for(self._sentinel.wait(), timeout=20)
        heard, self.heard = self.heard, []
        return heard


@pytest.fixture
async def listener(pg_dsn: str, jobs: JobQueue) -> AsyncIterator[Listener]:
    conn = await asyncpg.connect(pg_dsn)
    listening = Listener(conn, jobs)
    for channel in (notify_channel(jobs.schema), events_channel(jobs.schema)):
        await conn.add_listener(channel, listening._on)
    try:
        yield listening
    finally:
        await conn.close()


def _jobs_heard(jobs: JobQueue, queue: str = "default") -> tuple[str, str]:
    return (notify_channel(jobs.schema), queue)


def _events_heard(jobs: JobQueue, queue: str = "default") -> tuple[str, str]:
    return (events_channel(jobs.schema), queue)


def _enqueue_statement(jobs: JobQueue, n: int, *, events: bool = False) -> Any:
    """enqueue_one as JobQueue.enqueue runs it in a transaction of its own, on a connection
    whose transaction the test holds open until it commits."""
    job = prepare(JobSpec("x", {"n": n}, events=events), jobs.registry)

    async def run(conn: Any) -> Any:
        return await jobs.db.fetchrow(
            "enqueue_one", *row_args(job), notify_channel(jobs.schema), None, True, conn=conn
        )

    return run


def _registration_statement(jobs: JobQueue) -> Any:
    """idle_state of a worker registering as waiting on "default" (no hand-off slots)."""

    async def run(conn: Any) -> Any:
        return await jobs.db.fetchrow(
            "idle_state", ["default"], ["x"], uuid.uuid4(), 0, 60.0, 30.0, "none", None, conn=conn
        )

    return run


def _reader_statement(
    jobs: JobQueue, reader: uuid.UUID | None = None, queue: str = "default"
) -> Any:
    """register_event_reader of a reader (a new one unless given) of ``queue``."""

    async def run(conn: Any) -> Any:
        return await jobs.db.fetch(
            "register_event_reader", reader or uuid.uuid4(), [queue], 60.0, conn=conn
        )

    return run


@pytest.mark.usefixtures("kinds")
async def test_an_enqueue_notifies_its_queue_only_while_a_worker_waits(
    jobs: JobQueue, listener: Listener
) -> None:
    await jobs.enqueue("x", {"n": 1})
    await jobs.enqueue_batch("x", [{"n": 2}, {"n": 3}])
    assert await listener.settle() == []  # nobody waits: no notification
    claimer = listening_claimer(jobs)
    state = await claimer.idle_state(1)  # registers as waiting (no hand-offs: not notified)
    assert state.until_due is not None and state.until_due <= 0  # the three jobs are there
    await jobs.enqueue("x", {"n": 4})
    await jobs.enqueue_batch("x", [{"n": 5}])
    await jobs.enqueue("x", {"n": 6}, queue="elsewhere")  # a queue nobody waits on
    assert await listener.settle() == [_jobs_heard(jobs), _jobs_heard(jobs)]
    await claimer.claim(1)  # the claim withdraws the registration
    await jobs.enqueue("x", {"n": 7})
    assert await listener.settle() == []


@pytest.mark.usefixtures("kinds")
async def test_a_registration_that_ran_out_is_not_waited_on(
    jobs: JobQueue, listener: Listener
) -> None:
    claimer = listening_claimer(jobs, poll=0.0)  # its registration expires as it is made
    await claimer.idle_state(1)
    await jobs.enqueue("x", {"n": 1})
    assert await listener.settle() == []


@pytest.mark.usefixtures("kinds")
async def test_a_write_in_a_callers_transaction_always_notifies(
    jobs: JobQueue, listener: Listener
) -> None:
    for write in ("enqueue", "enqueue_batch"):
        async with jobs.transaction() as conn:
            if write == "enqueue":
                await jobs.enqueue("x", {"n": 1}, connection=conn, events=True)
            else:
                await jobs.enqueue_batch("x", [{"n": 2}], connection=conn, events=True)
        assert sorted(await listener.settle()) == [_events_heard(jobs), _jobs_heard(jobs)]


@pytest.mark.usefixtures("kinds")
async def test_events_notify_their_queue_only_while_a_stream_follows_it(
    jobs: JobQueue, listener: Listener
) -> None:
    await jobs.enqueue("x", {"n": 1}, events=True)
    assert await listener.settle() == []
    async with jobs.events(["default"]) as stream:
        added = await jobs.enqueue("x", {"n": 2}, events=True)
        await jobs.enqueue_batch("x", [{"n": 3}], events=True)
        assert await listener.settle() == [_events_heard(jobs), _events_heard(jobs)]
        event = await asyncio.wait_for(anext(stream), timeout=20)
        assert (event.event, event.job_id) == ("added", added.id)
    await jobs.enqueue("x", {"n": 4}, events=True)
    assert await listener.settle() == []  # closing the stream ended its registration


@pytest.mark.usefixtures("kinds")
async def test_a_registering_worker_waits_for_an_enqueue_in_flight_and_finds_its_job(
    jobs: JobQueue, pool: asyncpg.Pool, listener: Listener
) -> None:
    enqueued, state, waited = await overlap(
        pool, _enqueue_statement(jobs, 1), _registration_statement(jobs)
    )
    assert waited  # the exclusive wake lock waited for the enqueue's commit
    assert state["registered"]
    assert state["until_due"] is not None and state["until_due"] <= 0  # ... and found its job
    assert await listener.settle() == []  # the enqueue saw no one waiting: it woke nobody
    assert (await jobs.get(enqueued["id"])).status is Status.PENDING


@pytest.mark.usefixtures("kinds")
async def test_an_enqueue_after_a_registration_in_flight_notifies_the_worker(
    jobs: JobQueue, pool: asyncpg.Pool, listener: Listener
) -> None:
    state, _enqueued, waited = await overlap(
        pool, _registration_statement(jobs), _enqueue_statement(jobs, 1)
    )
    assert waited  # the shared wake lock waited for the registration's commit
    assert state["registered"] and state["until_due"] is None  # nothing there when it looked
    assert await listener.settle() == [_jobs_heard(jobs)]  # so the enqueue woke it


@pytest.mark.usefixtures("kinds")
async def test_a_registering_reader_waits_for_an_event_in_flight(
    jobs: JobQueue, pool: asyncpg.Pool, listener: Listener
) -> None:
    _enqueued, _registered, waited = await overlap(
        pool, _enqueue_statement(jobs, 1, events=True), _reader_statement(jobs)
    )
    assert waited  # so the event has committed when the reader fixes its start
    assert await listener.settle() == []


@pytest.mark.usefixtures("kinds")
async def test_an_event_written_after_a_reader_registration_in_flight_notifies_it(
    jobs: JobQueue, pool: asyncpg.Pool, listener: Listener
) -> None:
    _registered, _enqueued, waited = await overlap(
        pool, _reader_statement(jobs), _enqueue_statement(jobs, 1, events=True)
    )
    assert waited
    assert await listener.settle() == [_events_heard(jobs)]


@pytest.mark.parametrize("renewal_first", [True, False])
async def test_a_lapsed_reader_renewing_as_another_clears_lapsed_ones_stays_registered(
    jobs: JobQueue, pool: asyncpg.Pool, renewal_first: bool
) -> None:
    """A registration clears the readers whose registration ran out (other queues: no wake
    lock between them). A lapsed reader renewing at that moment is either re-read as renewed
    by the clearing DELETE (which waits for its row) or inserted afresh after it: registered
    either way, in both orders."""
    lapsed = uuid.uuid4()
    await pool.execute(
        f"INSERT INTO {jobs.schema}.event_readers VALUES ($1, '{{other}}', now() - '1s'::interval)",
        lapsed,
    )
    renewal = _reader_statement(jobs, lapsed, "other")
    clearing = _reader_statement(jobs)
    first, second = (renewal, clearing) if renewal_first else (clearing, renewal)
    _, _, waited = await overlap(pool, first, second)
    assert waited  # the second waited for the first's hold on the lapsed reader's row
    expires = await pool.fetchval(
        f"SELECT expires_at > now() FROM {jobs.schema}.event_readers WHERE reader = $1", lapsed
    )
    assert expires is True


def _write_to(jobs: JobQueue, queues: list[str]) -> Any:
    async def write(conn: Any) -> Any:
        return await conn.fetchval(
            f"SELECT {jobs.schema}.wake($1, $2, 'ch', true)", queues, queues[::-1]
        )

    return write


def _register_for(jobs: JobQueue, queues: list[str]) -> Any:
    async def register(conn: Any) -> Any:
        return await conn.fetch(
            f"SELECT * FROM {jobs.schema}.idle_state($1, '{{x}}', $2, 0, 60, 30, 'c')",
            queues,
            uuid.uuid4(),
        )

    return register


async def test_the_wake_locks_of_several_queues_exclude_writers_from_registrations(
    jobs: JobQueue, pool: asyncpg.Pool
) -> None:
    queues = [f"q{i}" for i in range(8)]
    write, register = _write_to(jobs, queues), _register_for(jobs, queues[2:][::-1])
    for first, second in ((write, register), (register, write), (register, register)):
        _, _, waited = await overlap(pool, first, second)
        assert waited
    _, _, waited = await overlap(pool, write, write)
    assert not waited  # writers share the lock


async def test_stress_writers_and_registrations_of_overlapping_queues_never_deadlock(
    jobs: JobQueue, pg_dsn: str
) -> None:
    """Both sides take the wake locks of several queues in one order, whatever the order of
    the queues they are given: no lock cycle, so PostgreSQL never has to break one."""
    queues = [f"q{i}" for i in range(6)]
    conns = [await asyncpg.connect(pg_dsn) for _ in range(6)]

    async def run(k: int, conn: Any) -> None:
        for round_ in range(30):
            mine = queues[k % 3 :] if (k + round_) % 2 else queues[::-1][: 4 + k % 3]
            step = _write_to(jobs, mine) if k % 2 else _register_for(jobs, mine)
            async with conn.transaction():
                await step(conn)

    try:
        await asyncio.gather(*(run(k, conn) for k, conn in enumerate(conns)))
    finally:
        for conn in conns:
            await conn.close()


@pytest.mark.usefixtures("kinds")
async def test_a_job_missed_by_the_claim_starts_at_once_beside_a_running_one(
    jobs: JobQueue, kinds: dict[int, asyncio.Event]
) -> None:
    """A job committed after the claim looked, by an enqueue that saw no registration (the
    claim had withdrawn it) and so woke nobody, is found by the look that follows the
    registration: the worker claims again at once, even with a handler still running, and
    never waits for a wake-up that will not come (it polls only hourly here)."""
    kinds[1] = asyncio.Event()
    blocking = await jobs.enqueue("x", {"n": 1})
    worker = jobs.worker(concurrency=2, poll_interval=3600)
    claimer = worker._claimer
    real_claim = claimer.claim
    armed = asyncio.Event()
    sneaked: list[int] = []

    async def claim_then_enqueue(free: int) -> list[Any]:
        rows = await real_claim(free)
        if armed.is_set() and not sneaked and not rows:
            sneaked.append((await jobs.enqueue("x", {"n": 2})).id)
        return rows

    claimer.claim = claim_then_enqueue  # type: ignore[method-assign]
    worker.start()
    try:
        await eventually(lambda: _status_is(jobs, [blocking.id], Status.RUNNING))
        armed.set()
        claimer.wake.set()  # one more look, which finds nothing: then the enqueue
        await eventually(lambda: _status_is(jobs, sneaked, Status.COMPLETED), timeout=30)
        assert (await jobs.get(blocking.id)).status is Status.RUNNING  # still running
    finally:
        kinds[1].set()
        await worker.stop()


async def _status_is(jobs: JobQueue, ids: list[int], status: Status) -> bool:
    if not ids:
        return False
    row = await jobs.get(ids[0])
    return row is not None and row.status is status


@pytest.mark.usefixtures("kinds")
async def test_stress_workers_that_never_poll_are_woken_for_every_job(
    jobs: JobQueue, kinds: dict[int, asyncio.Event]
) -> None:
    """Producers enqueue one by one and in batches while workers go idle, register and take
    jobs, some of which run a while: every job runs, though no worker ever polls."""
    for n in range(1000, 1010):  # jobs that run until released: slots busy beside free ones
        kinds[n] = asyncio.Event()
    workers = [jobs.worker(concurrency=3, poll_interval=3600) for _ in range(3)]
    for worker in workers:
        worker.start()
    ids: list[int] = []

    async def producer(p: int) -> None:
        for i in range(40):
            if i % 10 == 9:
                ids.extend(r.id for r in await jobs.enqueue_batch("x", [{"n": i}, {"n": i}]))
            else:
                n = 1000 + p * 3 + i // 15 if i % 15 == 7 else i
                ids.append((await jobs.enqueue("x", {"n": n})).id)
            if i % 4 == 0:
                await asyncio.sleep(0)  # let workers finish, go idle and register

    async def releaser() -> None:
        for n in range(1000, 1010):
            await asyncio.sleep(0.01)
            kinds[n].set()

    try:
        await asyncio.gather(*(producer(p) for p in range(3)), releaser())
        await eventually(lambda: _all_completed(jobs, len(ids)), timeout=60)
    finally:
        for gate in kinds.values():
            gate.set()
        for worker in workers:
            await worker.stop()
    assert sum(w.stats.completed for w in workers) == len(ids)


async def _all_completed(jobs: JobQueue, count: int) -> bool:
    done = await jobs.db.pool.fetchval(
        f"SELECT count(*) FROM {jobs.schema}.jobs WHERE status = 'completed'"
    )
    return bool(done == count)
