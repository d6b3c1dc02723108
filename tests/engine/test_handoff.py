"""Hand-offs: an enqueue writes a job that could start at once already leased to a worker
registered idle, and notifies that worker alone (sql/schema/enqueue_job.sql; claimer.py).

The races are decided by the registration's row lock: two enqueues never take one slot, a
claim that withdraws the registration waits for an enqueue holding it and then sees its job,
and a job whose notification never arrived comes with the next claim or is given back. Each
race interleaves two connections deterministically (tests/interleave.py); a stress test runs
producers and workers at once and checks that every job ran exactly once."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import pydantic
import pytest

from pgjobs import JobContext, JobQueue, JobSpec, Registry, Status
from pgjobs.config import notify_channel
from pgjobs.enqueue import prepare, row_args
from pgjobs.worker import Worker
from tests.helpers import eventually, expire_lease, listening_claimer
from tests.interleave import overlap


class Item(pydantic.BaseModel):
    n: int = 0


RAN: list[int] = []


@pytest.fixture
def kinds(registry: Registry) -> None:
    RAN.clear()

    @registry.kind("x", input=Item)
    async def x(ctx: JobContext, item: Item) -> int:
        RAN.append(ctx.id)
        return item.n

    @registry.kind("other", input=Item)
    async def other(ctx: JobContext, item: Item) -> int:
        return item.n


async def _register(
    jobs: JobQueue, *, free: int = 1, expires: str = "1 minute", queue: str = "default"
) -> uuid.UUID:
    """A registration as an idle worker makes it (idle_state), for a worker of our own."""
    worker = uuid.uuid4()
    await jobs.db.pool.execute(
        f"INSERT INTO {jobs.schema}.idle_workers (worker, queues, kinds, free, lease, channel,"
        " expires_at) VALUES ($1, ARRAY[$5], '{x}', $2, 30, $3, now() + $4::text::interval)",
        worker,
        free,
        f"pgjobs_w{worker.hex}",
        expires,
        queue,
    )
    return worker


async def _registration(jobs: JobQueue, worker: uuid.UUID) -> Any:
    return await jobs.db.pool.fetchrow(
        f"SELECT free, handed FROM {jobs.schema}.idle_workers WHERE worker = $1", worker
    )


def _enqueue_statement(jobs: JobQueue, n: int, **options: Any) -> Any:
    """enqueue_one as JobQueue.enqueue runs it in a transaction of its own, on a connection
    the test drives (whose transaction the test holds open until it commits)."""
    job = prepare(JobSpec("x", {"n": n}, **options), jobs.registry)

    async def run(conn: Any) -> Any:
        return await jobs.db.fetchrow(
            "enqueue_one", *row_args(job), notify_channel(jobs.schema), None, True, conn=conn
        )

    return run


def _claim_statement(jobs: JobQueue, worker: uuid.UUID) -> Any:
    """claim_for_worker for ``worker`` (one slot, nothing seen), on a connection the test
    drives."""

    async def run(conn: Any) -> Any:
        return await jobs.db.fetch(
            "claim_for_worker",
            ["default"],
            ["x"],
            1,
            30.0,
            0,
            worker,
            [],
            None,
            None,
            None,
            None,
            None,
            None,
            conn=conn,
        )

    return run


async def _stopped_at_index(
    pool: asyncpg.Pool,
    enqueuer: Any,
    index: str,
    statement: Any,
    meanwhile: Callable[[], Awaitable[Any]],
) -> Any:
    """Run ``statement`` on ``enqueuer`` while another transaction holds ``index`` ACCESS
    EXCLUSIVE (a REINDEX, rolled back afterwards); once the statement waits for it, run
    ``meanwhile`` (committed by itself), then let the statement go on. Returns what
    ``meanwhile`` and ``statement`` returned."""
    async with pool.acquire() as holder:
        holding = holder.transaction()
        await holding.start()
        try:
            await holder.execute(f"REINDEX INDEX {index}")
            running = asyncio.create_task(statement(enqueuer))

            async def stopped() -> bool:
                blockers = await pool.fetchval(
                    "SELECT pg_blocking_pids($1)", enqueuer.get_server_pid()
                )
                return holder.get_server_pid() in blockers

            await eventually(stopped)
            done = await meanwhile()
        finally:
            await holding.rollback()
        return done, await running


async def _row(jobs: JobQueue, job_id: int) -> Any:
    return await jobs.db.pool.fetchrow(
        f"SELECT status, attempts, lock_token, locked_until > now() AS leased, started_at"
        f" FROM {jobs.schema}.jobs WHERE id = $1",
        job_id,
    )


async def _started_idle(jobs: JobQueue, **options: Any) -> Worker:
    """A worker that has been notified of a job (so it knows notifications reach it) and has
    then registered its slots for hand-offs: it runs warm-up jobs until it has. The caller
    stops it."""
    worker = jobs.worker(**options)
    worker.start()

    async def warmed() -> bool:
        if await _registered(jobs, worker.id):
            return True
        done = worker.stats.completed
        await jobs.enqueue("x", {"n": -1})
        await eventually(lambda: _async(worker.stats.completed > done))
        return False

    try:
        await eventually(warmed, interval=0.05)
    except BaseException:
        await worker.stop()
        raise
    return worker


async def _async(value: Any) -> Any:
    return value


async def _registered(jobs: JobQueue, worker_id: str) -> bool:
    return bool(
        await jobs.db.pool.fetchval(
            f"SELECT free > 0 FROM {jobs.schema}.idle_workers WHERE worker = $1::uuid", worker_id
        )
    )


@pytest.mark.usefixtures("kinds")
async def test_an_idle_worker_is_handed_the_job_by_the_enqueue(jobs: JobQueue) -> None:
    worker = await _started_idle(jobs, name="idle-1")
    handed, claimed = worker.stats.handed, worker.stats.claimed
    try:
        async with jobs.events(["default"]) as stream:
            result = await jobs.enqueue("x", {"n": 7}, events=True)
            row = await _row(jobs, result.id)  # decided by the enqueue's own statement
            assert row["status"] in ("running", "completed")
            assert row["attempts"] == 1 and row["started_at"] is not None
            events = await asyncio.wait_for(_take(stream, 3), timeout=20)
        assert [e.event for e in events] == ["added", "active", "completed"]
        assert {e.job_id for e in events} == {result.id}
        assert events[0].data["state"] == "ready" and events[1].data == {"attempt": 1}
        await eventually(lambda: _async(worker.stats.handed == handed + 1))
        assert worker.stats.claimed == claimed + 1  # and nothing else
        done = await jobs.get(result.id)
        assert done is not None and done.status is Status.COMPLETED
        assert done.worker == "idle-1"  # the enqueue recorded whom it handed the job to
    finally:
        await worker.stop()
    assert not await _registered(jobs, worker.id)  # stopping withdrew the registration


async def _take(stream: Any, count: int) -> list[Any]:
    return [await anext(stream) for _ in range(count)]


@pytest.mark.usefixtures("kinds")
async def test_two_enqueues_never_take_one_slot(jobs: JobQueue, pool: asyncpg.Pool) -> None:
    worker = await _register(jobs, free=1)
    first, second, waited = await overlap(
        pool, _enqueue_statement(jobs, 1), _enqueue_statement(jobs, 2)
    )
    assert not waited  # SKIP LOCKED: the second enqueue never waits for the slot
    one, two = await _row(jobs, first["id"]), await _row(jobs, second["id"])
    assert one["status"] == "running" and one["leased"]
    assert two["status"] == "pending" and two["lock_token"] is None and two["attempts"] == 0
    registration = await _registration(jobs, worker)
    assert registration["free"] == 0 and registration["handed"] == [one["lock_token"]]


@pytest.mark.usefixtures("kinds")
async def test_a_slot_taken_is_not_taken_again(jobs: JobQueue) -> None:
    """Once an enqueue has taken the last slot and committed, the next one finds it full and
    writes its job pending."""
    worker = await _register(jobs, free=1)
    first = await jobs.enqueue("x", {"n": 1})
    second = await jobs.enqueue("x", {"n": 2})
    assert (await _row(jobs, first.id))["status"] == "running"
    assert (await _row(jobs, second.id))["status"] == "pending"
    registration = await _registration(jobs, worker)
    assert registration["free"] == 0
    assert registration["handed"] == [(await _row(jobs, first.id))["lock_token"]]


@pytest.mark.usefixtures("kinds")
async def test_a_slot_taken_after_the_enqueue_began_is_seen_as_taken(
    jobs: JobQueue, pool: asyncpg.Pool
) -> None:
    """The window one statement leaves: another transaction takes the last slot and commits
    after the enqueue's slot statement took its snapshot, before it locks the registration.
    The lock reads the row as that commit left it (READ COMMITTED's recheck of an updated
    row), so the enqueue finds no slot and writes its job pending; no slot is taken twice.

    To stop the statement in that window: its plan is generic and uses the queue_settings
    index, and another transaction holds that index ACCESS EXCLUSIVE (a REINDEX, rolled back
    afterwards), so the statement waits when its executor opens the index, after its snapshot
    (the tables' locks, taken before the snapshot, do not conflict)."""
    worker = await _register(jobs, free=1)
    taken_by_other = uuid.uuid4()
    async with pool.acquire() as enqueuer:
        await enqueuer.execute("SET enable_seqscan = off")
        await enqueuer.execute("SET plan_cache_mode = force_generic_plan")
        # plan the function's statements on this connection, so that the next call plans
        # nothing (planning would lock the index before the snapshot): a job handed to a
        # worker of another queue (not one waiting ahead of the next)
        elsewhere = await _register(jobs, queue="elsewhere")
        warm = await _enqueue_statement(jobs, 0, queue="elsewhere")(enqueuer)
        assert (await _registration(jobs, elsewhere))["free"] == 0  # the slot's statement ran
        assert (await _row(jobs, warm["id"]))["status"] == "running"

        async def take_the_slot() -> None:  # what a handing enqueue does, committed
            await pool.execute(
                f"UPDATE {jobs.schema}.idle_workers SET free = free - 1,"
                " handed = handed || $2::uuid WHERE worker = $1",
                worker,
                taken_by_other,
            )

        _, enqueued = await _stopped_at_index(
            pool,
            enqueuer,
            f"{jobs.schema}.queue_settings_pkey",
            _enqueue_statement(jobs, 1),
            take_the_slot,
        )
    row = await _row(jobs, enqueued["id"])
    assert row["status"] == "pending" and row["lock_token"] is None
    registration = await _registration(jobs, worker)
    assert registration["free"] == 0 and registration["handed"] == [taken_by_other]


@pytest.mark.usefixtures("kinds")
async def test_a_slot_registered_after_the_enqueue_looked_gets_a_notification(
    jobs: JobQueue, pool: asyncpg.Pool, pg_dsn: str
) -> None:
    """The window the look for a free slot leaves: a worker registers (with a free slot) and
    commits after the enqueue looked and found none, before the enqueue writes its job. The
    job is written pending, not handed off, and the enqueue's wake, a later statement under
    the wake lock, sees the registration and notifies the queue: the worker's claim collects
    the job. To stop the enqueue there, another transaction holds a REINDEX of one of the
    jobs table's indexes: the enqueue's INSERT waits for it, after its look."""
    heard: asyncio.Queue[str] = asyncio.Queue()
    listening = await asyncpg.connect(pg_dsn)
    await listening.add_listener(
        notify_channel(jobs.schema), lambda _c, _p, _ch, payload: heard.put_nowait(payload)
    )
    try:
        async with pool.acquire() as enqueuer:
            await _enqueue_statement(jobs, 0)(enqueuer)  # plans its statements beforehand
            worker, enqueued = await _stopped_at_index(  # the look is behind the enqueue
                pool,
                enqueuer,
                f"{jobs.schema}.jobs_flow_idx",
                _enqueue_statement(jobs, 1),
                lambda: _register(jobs, free=1),
            )
        assert await asyncio.wait_for(heard.get(), timeout=20) == "default"
    finally:
        await listening.close()
    assert (await _row(jobs, enqueued["id"]))["status"] == "pending"
    registration = await _registration(jobs, worker)
    assert registration["free"] == 1 and registration["handed"] == []


@pytest.mark.usefixtures("kinds")
async def test_a_claim_waits_for_the_handing_enqueue_and_collects_its_job(
    jobs: JobQueue, pool: asyncpg.Pool
) -> None:
    worker = await _register(jobs, free=1)

    enqueued, claimed, waited = await overlap(
        pool, _enqueue_statement(jobs, 1), _claim_statement(jobs, worker)
    )
    assert waited  # the withdrawal waited for the enqueue's lock on the registration
    # ... and then saw the job that enqueue wrote, though it committed after the claim began
    assert [r["id"] for r in claimed] == [enqueued["id"]]
    assert claimed[0]["lock_token"] == (await _row(jobs, enqueued["id"]))["lock_token"]
    assert await _registration(jobs, worker) is None


@pytest.mark.usefixtures("kinds")
async def test_an_enqueue_after_the_withdrawal_leaves_its_job_pending(
    jobs: JobQueue, pool: asyncpg.Pool
) -> None:
    worker = await _register(jobs, free=1)

    claimed, enqueued, waited = await overlap(
        pool, _claim_statement(jobs, worker), _enqueue_statement(jobs, 1)
    )
    assert not waited and claimed == []
    assert (await _row(jobs, enqueued["id"]))["status"] == "pending"
    assert await _registration(jobs, worker) is None


@pytest.mark.usefixtures("kinds")
async def test_a_key_conflict_takes_no_slot(jobs: JobQueue) -> None:
    worker = await _register(jobs, free=2)
    first = await jobs.enqueue("x", {"n": 1}, job_key="k")
    again = await jobs.enqueue("x", {"n": 2}, job_key="k")
    assert again.duplicate and again.id == first.id
    registration = await _registration(jobs, worker)
    assert registration["free"] == 1 and len(registration["handed"]) == 1


@pytest.mark.usefixtures("kinds")
@pytest.mark.parametrize(
    "case",
    ["paused", "capped", "rate_limited", "delayed", "in_transaction", "expired", "other_kind"],
)
async def test_no_hand_off_where_a_claim_would_not_take_the_job(jobs: JobQueue, case: str) -> None:
    worker = await _register(jobs, free=1, expires="-1 second" if case == "expired" else "1 hour")
    if case == "paused":
        await jobs.pause("default")
    elif case == "capped":
        await jobs.set_concurrency("default", 5)
    elif case == "rate_limited":
        await jobs.set_rate_limit("default", 10, 1.0)
    if case == "delayed":
        result = await jobs.enqueue("x", {"n": 1}, delay=60)
    elif case == "in_transaction":
        async with jobs.db.transaction() as conn:
            result = await jobs.enqueue("x", {"n": 1}, connection=conn)
    elif case == "other_kind":
        result = await jobs.enqueue("other", {"n": 1})
    else:
        result = await jobs.enqueue("x", {"n": 1})
    assert (await _row(jobs, result.id))["status"] == "pending"
    assert (await _registration(jobs, worker))["free"] == 1


@pytest.mark.usefixtures("kinds")
async def test_no_hand_off_past_a_job_waiting_at_its_priority(jobs: JobQueue) -> None:
    worker = await _register(jobs, free=2)
    async with jobs.db.transaction() as conn:  # written pending: nothing hands it off
        waiting = await jobs.enqueue("x", {"n": 1}, priority=5, connection=conn)
    same = await jobs.enqueue("x", {"n": 2}, priority=5)
    higher = await jobs.enqueue("x", {"n": 3}, priority=6)
    assert (await _row(jobs, waiting.id))["status"] == "pending"
    assert (await _row(jobs, same.id))["status"] == "pending"  # would jump the queue
    assert (await _row(jobs, higher.id))["status"] == "running"  # runs first anyway
    assert (await _registration(jobs, worker))["free"] == 1


@pytest.mark.usefixtures("kinds")
async def test_a_missed_notification_comes_with_the_next_claim_and_only_once(
    jobs: JobQueue,
) -> None:
    worker = uuid.uuid4()
    claimer = listening_claimer(jobs, worker=worker, hand_offs=True)
    await claimer.idle_state(1)  # registers one slot
    result = await jobs.enqueue("x", {"n": 1})
    token = (await _row(jobs, result.id))["lock_token"]
    assert token is not None  # handed off; its notification never reached anyone
    rows = await claimer.claim(1)
    assert [(r["id"], r["lock_token"]) for r in rows] == [(result.id, token)]
    assert not claimer.handed(token)  # the late notification is recognised
    assert await claimer.claim(1) == []


@pytest.mark.usefixtures("kinds")
async def test_a_seen_hand_off_is_not_collected_again(jobs: JobQueue) -> None:
    claimer = listening_claimer(jobs, hand_offs=True)
    await claimer.idle_state(1)
    result = await jobs.enqueue("x", {"n": 1})
    token = (await _row(jobs, result.id))["lock_token"]
    assert claimer.handed(token)  # its notification arrived: the worker started it
    assert await claimer.claim(1) == []


@pytest.mark.usefixtures("kinds")
async def test_pausing_gives_back_a_hand_off_it_never_heard_of(jobs: JobQueue) -> None:
    worker = await _started_idle(jobs)
    try:
        # as if the notification were lost: what the notifier delivers is not taken
        worker._claimer.handed = lambda token: False  # type: ignore[method-assign]
        result = await jobs.enqueue("x", {"n": 5})
        assert (await _row(jobs, result.id))["status"] == "running"
        await worker.pause()
        row = await _row(jobs, result.id)
        assert row["status"] == "pending" and row["attempts"] == 0 and row["lock_token"] is None
        assert not await _registered(jobs, worker.id)
        del worker._claimer.handed  # the instance patch; the class method again
        worker.resume()
        await eventually(lambda: _async(result.id in RAN))
        assert (await jobs.get(result.id)).attempts == 1
    finally:
        await worker.stop()


@pytest.mark.usefixtures("kinds")
async def test_a_hand_off_to_a_worker_that_died_is_rescued(jobs: JobQueue) -> None:
    await _register(jobs, free=1)  # a worker that registered, then was killed
    result = await jobs.enqueue("x", {"n": 1})
    assert (await _row(jobs, result.id))["status"] == "running"
    await expire_lease(jobs, result.id)
    rescued = await jobs.db.fetch("rescue_stalled", 100, notify_channel(jobs.schema))
    assert [r["id"] for r in rescued] == [result.id]
    worker = jobs.worker()
    await worker.run(until_drained=True)
    assert (await jobs.get(result.id)).status is Status.COMPLETED and RAN == [result.id]


async def _someone_registered(jobs: JobQueue) -> bool:
    """Some worker has free slots registered: the next enqueue that can start is handed."""
    return bool(
        await jobs.db.pool.fetchval(
            f"SELECT EXISTS (SELECT FROM {jobs.schema}.idle_workers WHERE free > 0)"
        )
    )


async def _warm_up(jobs: JobQueue, workers: list[Worker]) -> int:
    """Run warm-up jobs until every worker has registered idle; how many ran. A worker
    registers only once a queue notification has reached it, and one started a moment before
    an enqueue may not be listening yet. The warm-up jobs go as batches, which are never
    handed off, so each notifies every worker (a job handed to one notifies no other)."""

    async def all_registered() -> bool:
        if all([await _registered(jobs, w.id) for w in workers]):
            return True
        done = len(RAN)
        await jobs.enqueue_batch("x", [{"n": -1}])
        await eventually(lambda: _async(len(RAN) > done))
        return False

    await eventually(all_registered, interval=0.05)
    return len(RAN)


@pytest.mark.usefixtures("kinds")
async def test_stress_producers_and_idle_workers_run_every_job_once(jobs: JobQueue) -> None:
    workers = [jobs.worker(concurrency=2) for _ in range(3)]
    for worker in workers:
        worker.start()
    warm = await _warm_up(jobs, workers)
    ids: list[int] = []

    async def producer(p: int) -> None:
        for i in range(60):
            job_id = (await jobs.enqueue("x", {"n": p * 100 + i})).id
            ids.append(job_id)
            if i % 3 == 0:  # let the workers go idle and register now and then
                await eventually(lambda job_id=job_id: _async(job_id in RAN))
                await eventually(lambda: _someone_registered(jobs))

    try:
        await asyncio.gather(*(producer(p) for p in range(4)))
        await eventually(lambda: _async(len(RAN) == len(ids) + warm), timeout=60)
    finally:
        for worker in workers:
            await worker.stop()
    assert sorted(RAN[warm:]) == sorted(ids)  # every job ran, none twice
    assert sum(w.stats.handed for w in workers) > 0
    statuses = await jobs.db.pool.fetch(
        f"SELECT status, count(*) FROM {jobs.schema}.jobs GROUP BY status"
    )
    assert {r["status"]: r["count"] for r in statuses} == {"completed": len(ids) + warm}
    assert await jobs.db.pool.fetchval(f"SELECT count(*) FROM {jobs.schema}.idle_workers") == 0


@pytest.mark.usefixtures("kinds")
async def test_stress_pauses_and_stops_amid_hand_offs_lose_and_double_nothing(
    jobs: JobQueue,
) -> None:
    """Workers paused, resumed and replaced while producers enqueue one by one: every job
    runs, none twice, none is left leased to a worker that gave it back."""
    workers = [jobs.worker(concurrency=2) for _ in range(2)]
    for worker in workers:
        worker.start()
    # The disturbance starts from workers that take hand-offs (a stressed VM may let the
    # producers below hand none): both registered idle, then one job handed.
    warm = await _warm_up(jobs, workers) + 1
    await jobs.enqueue("x", {"n": -1})
    await eventually(lambda: _async(len(RAN) == warm))
    assert sum(w.stats.handed for w in workers) >= 1
    ids: list[int] = []
    producing = True

    async def producer(p: int) -> None:
        for i in range(50):
            job_id = (await jobs.enqueue("x", {"n": p * 100 + i})).id
            ids.append(job_id)
            if i % 2 == 0:
                await asyncio.sleep(0.002)  # let workers go idle and register

    async def disturber() -> None:
        rounds = 0
        while producing:
            worker = workers[rounds % len(workers)]
            await worker.pause(wait_for_running=False)
            await asyncio.sleep(0.005)
            worker.resume()
            if rounds % 3 == 2:  # replace one worker: stop gives back what it holds
                await worker.stop()
                replacement = jobs.worker(concurrency=2)
                replacement.start()
                workers[rounds % len(workers)] = replacement
                retired.append(worker)
            rounds += 1
            await asyncio.sleep(0.01)

    retired: list[Worker] = []
    disturbing = asyncio.create_task(disturber())
    try:
        await asyncio.gather(*(producer(p) for p in range(3)))
        producing = False
        await disturbing
        await eventually(lambda: _async(len(RAN) >= len(ids) + warm), timeout=60)
    finally:
        producing = False
        await asyncio.gather(disturbing, return_exceptions=True)
        for worker in workers:
            await worker.stop()
    assert sorted(RAN[warm:]) == sorted(ids)  # every job ran, none twice
    statuses = await jobs.db.pool.fetch(
        f"SELECT status, count(*) FROM {jobs.schema}.jobs GROUP BY status"
    )
    assert {r["status"]: r["count"] for r in statuses} == {"completed": len(ids) + warm}
    assert await jobs.db.pool.fetchval(f"SELECT count(*) FROM {jobs.schema}.idle_workers") == 0
    assert sum(w.stats.lost for w in workers + retired) == 0
