"""History partitions: GC moves completed jobs to the partition of their day and drops a day
whole once it is past retention (sql/schema/history.sql). Each job is seen in exactly one
place, the counts stay exact, and what names a dropped job (edges, log lines) goes with it."""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid

import asyncpg
import pydantic
import pytest

from pgjobs import (
    EdgePolicy,
    Flow,
    InvalidFlow,
    JobContext,
    JobFilter,
    JobQueue,
    Keep,
    Registry,
    Status,
    SubState,
)
from pgjobs.maintenance import DAY, GcInput, collect_garbage
from tests.interleave import overlap, wait_until_blocking
from tests.releases import at_release

KEEP_MONTH = GcInput(completed_after=30 * DAY, dead_after=None, cancelled_after=None)


class Item(pydantic.BaseModel):
    n: int = 0
    fail: bool = False


@pytest.fixture
def kinds(registry: Registry) -> None:
    @registry.kind("ok", input=Item, queue="h", max_attempts=1)
    async def ok(ctx: JobContext, item: Item) -> int:
        if item.fail:
            raise ValueError("no")
        return item.n


async def run_all(jobs: JobQueue, *items: Item, **options: object) -> list[int]:
    ids = [(await jobs.enqueue("ok", item, **options)).id for item in items]  # type: ignore[arg-type]
    await jobs.worker(queues=["h"]).run(until_drained=True)
    return ids


async def age(jobs: JobQueue, ids: list[int], seconds: float) -> None:
    """Finished ``seconds`` earlier than they did (they are in jobs_live)."""
    await jobs.pool.execute(
        f"UPDATE {jobs.db.schema}.jobs SET finished_at = finished_at - make_interval(secs => $2)"
        " WHERE id = ANY($1)",
        ids,
        seconds,
    )


async def homes(jobs: JobQueue, ids: list[int]) -> dict[int, list[str]]:
    """The partitions each job is in (a list, to show it is in exactly one)."""
    rows = await jobs.pool.fetch(
        f"SELECT id, tableoid::regclass::text AS part FROM {jobs.db.schema}.jobs"
        " WHERE id = ANY($1) ORDER BY id",
        ids,
    )
    found: dict[int, list[str]] = {i: [] for i in ids}
    for row in rows:
        found[row["id"]].append(row["part"].rsplit(".", 1)[-1])
    return found


def day_of(jobs_finished_at: dt.datetime) -> str:
    return "jobs_h" + jobs_finished_at.astimezone(dt.UTC).strftime("%Y%m%d")


async def assert_counts_exact(jobs: JobQueue) -> None:
    """The finished counts, per partition, equal the rows there."""
    schema = jobs.db.schema
    kept = await jobs.pool.fetch(
        f"SELECT queue, status, history_day, sum(n) AS n FROM {schema}.finished_counts"
        " GROUP BY 1, 2, 3 HAVING sum(n) <> 0 ORDER BY 1, 2, 3"
    )
    rows = await jobs.pool.fetch(
        f"SELECT queue, status, history_day, count(*) AS n FROM {schema}.jobs"
        " WHERE finished_at IS NOT NULL GROUP BY 1, 2, 3 ORDER BY 1, 2, 3"
    )
    assert [tuple(r) for r in kept] == [tuple(r) for r in rows]


async def test_gc_moves_completed_jobs_to_their_days_partition(jobs: JobQueue, kinds) -> None:
    old = await run_all(jobs, Item(n=1), Item(n=2))
    recent = await run_all(jobs, Item(n=3))
    keyed = await run_all(jobs, Item(n=4), job_key="named")
    dead = await run_all(jobs, Item(fail=True))
    ruled = await run_all(jobs, Item(n=5), keep_completed=Keep(age=20 * DAY))
    await age(jobs, [*old, *keyed, *dead, *ruled], 2 * DAY)
    before = {i: await jobs.get(i) for i in [*old, *recent, *keyed, *dead, *ruled]}
    counts = await jobs.queue_counts("h")

    result = await collect_garbage(jobs.db, KEEP_MONTH)

    assert result["moved_to_history"] == 2 and result["deleted_jobs"] == 0
    finished_on = before[old[0]].finished_at  # type: ignore[union-attr]
    assert finished_on is not None
    where = await homes(jobs, [*old, *recent, *keyed, *dead, *ruled])
    assert where == {
        old[0]: [day_of(finished_on)],
        old[1]: [day_of(before[old[1]].finished_at)],  # type: ignore[union-attr,arg-type]
        recent[0]: ["jobs_live"],  # finished less than history_after ago
        keyed[0]: ["jobs_live"],  # a job key stays unique in jobs_live
        dead[0]: ["jobs_live"],  # dead jobs are kept longer: they age out by deletes
        ruled[0]: ["jobs_live"],  # its own rule deletes it
    }
    for job_id, row in before.items():  # read back unchanged, wherever it is
        after = await jobs.get(job_id)
        assert after is not None and row is not None
        assert (after.status, after.output, after.finished_at) == (
            row.status,
            row.output,
            row.finished_at,
        )
    assert await jobs.queue_counts("h") == counts
    assert [r.id for r in await jobs.list_jobs(JobFilter(queue="h"), limit=10)] != []
    assert (
        await jobs.find_by_job_key("named")
        and (await jobs.find_by_job_key("named"))[0].id == keyed[0]
    )
    await assert_counts_exact(jobs)
    assert (await collect_garbage(jobs.db, KEEP_MONTH))["moved_to_history"] == 0  # idempotent


async def test_a_key_is_still_unique_after_its_neighbours_move(jobs: JobQueue, kinds) -> None:
    keyed = await run_all(jobs, Item(n=1), job_key="once")
    await run_all(jobs, Item(n=2))
    await age(jobs, keyed, 2 * DAY)
    await collect_garbage(jobs.db, KEEP_MONTH.model_copy(update={"history_after": 0}))
    again = await jobs.enqueue("ok", Item(n=3), job_key="once")
    assert again.id == keyed[0] and again.duplicate


async def test_gc_drops_a_day_past_retention_with_its_counts_edges_and_logs(
    jobs: JobQueue, kinds
) -> None:
    flow = Flow()
    flow.add("pre", "ok", {"n": 7}, queue="h")
    flow.add("dep", "ok", {"n": 8}, queue="h")
    flow.edge("pre", "dep", EdgePolicy.BLOCK)
    submitted = await jobs.submit_flow(flow)
    pre, dep = submitted.job_ids["pre"], submitted.job_ids["dep"]
    await jobs.append_log(pre, "a line of the prerequisite")
    await jobs.worker(queues=["h"]).run(until_drained=True)
    others = await run_all(jobs, Item(n=1), Item(n=2))
    await age(jobs, [pre, others[0]], 9 * DAY)
    await age(jobs, [dep, others[1]], 2 * DAY)
    pre_row = await jobs.get(pre)
    assert pre_row is not None and pre_row.finished_at is not None
    counts = await jobs.queue_counts("h")
    assert counts[SubState.COMPLETED] == 4

    result = await collect_garbage(jobs.db, GcInput(completed_after=7 * DAY))

    day = pre_row.finished_at.astimezone(dt.UTC).date().isoformat()
    assert result["moved_to_history"] == 4
    assert result["dropped_days"] == {day: 2}
    assert await jobs.get(pre) is None and await jobs.get(others[0]) is None
    assert await jobs.get(dep) is not None and await jobs.get(others[1]) is not None
    part = day_of(pre_row.finished_at)
    assert await jobs.pool.fetchval("SELECT to_regclass($1)", f"{jobs.db.schema}.{part}") is None
    assert (await jobs.queue_counts("h"))[SubState.COMPLETED] == 2
    await assert_counts_exact(jobs)
    # The dependent still reads what its deleted prerequisite returned (a satisfied edge keeps
    # a copy, as when GC deletes a prerequisite); the prerequisite's log lines are gone.
    [read] = await jobs.prerequisite_results(dep)
    assert read["output"] == 7 and read["name"] == "ok"
    schema = jobs.db.schema
    assert (
        await jobs.pool.fetchval(f"SELECT count(*) FROM {schema}.job_logs WHERE job_id = $1", pre)
        == 0
    )


async def test_a_prerequisite_read_by_a_job_in_flight_outlives_its_day(
    jobs: JobQueue, kinds
) -> None:
    [pre] = await run_all(jobs, Item(n=5))
    await age(jobs, [pre], 9 * DAY)
    await collect_garbage(jobs.db, KEEP_MONTH)  # moved to its day, kept
    assert (await homes(jobs, [pre]))[pre] != ["jobs_live"]
    waiting = await jobs.enqueue("ok", Item(n=6), delay=3600)
    await jobs.add_dependency(pre, waiting.id)

    result = await collect_garbage(jobs.db, GcInput(completed_after=7 * DAY))

    assert len(result["dropped_days"]) == 1 and list(result["dropped_days"].values()) == [0]
    assert (await homes(jobs, [pre]))[pre] == ["jobs_live"]  # back where GC deletes when it may
    [read] = await jobs.prerequisite_results(waiting.id)
    assert read["output"] == 5 and read["id"] == pre
    await assert_counts_exact(jobs)


async def test_requeue_brings_a_job_back_from_history(jobs: JobQueue, kinds) -> None:
    [job_id] = await run_all(jobs, Item(n=1))
    await age(jobs, [job_id], 2 * DAY)
    await collect_garbage(jobs.db, KEEP_MONTH)
    assert (await homes(jobs, [job_id]))[job_id][0].startswith("jobs_h")
    assert await jobs.requeue_finished(JobFilter(ids=(job_id,))) == [job_id]
    assert (await homes(jobs, [job_id]))[job_id] == ["jobs_live"]
    await jobs.worker(queues=["h"]).run(until_drained=True)
    row = await jobs.get(job_id)
    assert row is not None and row.status is Status.COMPLETED
    await assert_counts_exact(jobs)


async def test_a_reader_sees_a_moving_job_once_before_and_once_after(jobs: JobQueue, kinds) -> None:
    [job_id] = await run_all(jobs, Item(n=1))
    row = await jobs.get(job_id)
    assert row is not None and row.finished_at is not None
    day = row.finished_at.astimezone(dt.UTC).date()
    schema = jobs.db.schema
    async with jobs.pool.acquire() as mover, jobs.pool.acquire() as reader:
        async with mover.transaction():
            await mover.fetchval(f"SELECT {schema}.create_history_partition($1)", day)
        tx = mover.transaction()
        await tx.start()
        await mover.execute(f"UPDATE {schema}.jobs SET history_day = $2 WHERE id = $1", job_id, day)
        seen = await reader.fetch(
            f"SELECT tableoid::regclass::text AS part FROM {schema}.jobs WHERE id = $1", job_id
        )
        assert [r["part"].rsplit(".", 1)[-1] for r in seen] == ["jobs_live"]
        await tx.commit()
        seen = await reader.fetch(
            f"SELECT tableoid::regclass::text AS part FROM {schema}.jobs WHERE id = $1", job_id
        )
        assert [r["part"].rsplit(".", 1)[-1] for r in seen] == [day_of(row.finished_at)]


async def test_a_removal_waiting_on_a_move_is_retried_and_removes_the_job(
    jobs: JobQueue, kinds
) -> None:
    """The removal's DELETE waits for the move's lock, then fails with a serialization error
    (the row moved): the engine runs it again, and it finds the job in its day."""
    [job_id] = await run_all(jobs, Item(n=1))
    row = await jobs.get(job_id)
    assert row is not None and row.finished_at is not None
    day = row.finished_at.astimezone(dt.UTC).date()
    schema = jobs.db.schema
    async with jobs.pool.acquire() as mover:
        async with mover.transaction():
            await mover.fetchval(f"SELECT {schema}.create_history_partition($1)", day)
        tx = mover.transaction()
        await tx.start()
        await mover.execute(f"UPDATE {schema}.jobs SET history_day = $2 WHERE id = $1", job_id, day)
        removal = asyncio.create_task(jobs.purge(JobFilter(ids=(job_id,))))
        mover_pid = mover.get_server_pid()

        await wait_until_blocking(jobs.pool, mover_pid)
        await tx.commit()
        purged = await removal
    assert purged.deleted == 1
    assert await jobs.get(job_id) is None
    await assert_counts_exact(jobs)


async def test_moves_under_load_lose_and_double_nothing(jobs: JobQueue, kinds) -> None:
    """Workers finish 1,500 jobs while GC moves every completed job at once (history_after
    0), drops a day of 100 older ones, and a requeue pulls some back: each job ends in exactly
    one partition, the old day is gone whole, and the counts equal the rows."""
    old = await run_all(jobs, *(Item(n=i) for i in range(100)))
    await age(jobs, old, 9 * DAY)
    await collect_garbage(jobs.db, KEEP_MONTH)
    total = 1500
    ids = [(await jobs.enqueue("ok", Item(n=i))).id for i in range(total)]
    workers = [jobs.worker(queues=["h"], concurrency=10) for _ in range(2)]
    tasks = [w.start() for w in workers]
    gc = GcInput(completed_after=7 * DAY, history_after=0, batch=100)
    moved = dropped = 0

    async def done() -> bool:
        return sum(w.stats.completed for w in workers) >= total + 50

    requeued = False
    while not await done():
        result = await collect_garbage(jobs.db, gc)
        moved += result["moved_to_history"]
        dropped += sum(result["dropped_days"].values())
        if not requeued and sum(w.stats.completed for w in workers) > total // 2:
            again = await jobs.requeue_finished(JobFilter(ids=tuple(ids[:50])))
            requeued = len(again) == 50
        await asyncio.sleep(0)
    for w in workers:
        await w.stop()
    await asyncio.gather(*tasks)
    moved += (await collect_garbage(jobs.db, gc))["moved_to_history"]
    assert requeued and moved >= total and dropped == 100
    assert all(parts == [] for parts in (await homes(jobs, old)).values())
    where = await homes(jobs, ids)
    assert all(len(parts) == 1 for parts in where.values())
    assert all(parts[0].startswith("jobs_h") for parts in where.values())
    assert (await jobs.queue_counts("h"))[SubState.COMPLETED] == total
    await assert_counts_exact(jobs)


async def test_an_upgraded_schema_keeps_its_jobs_ids_and_lines(
    pool: asyncpg.Pool, registry: Registry, kinds
) -> None:
    schema = f"up_{uuid.uuid4().hex[:8]}"
    async with pool.acquire() as conn:
        await at_release(conn, schema, 6)
        old_ids = await conn.fetch(
            f"INSERT INTO {schema}.jobs (queue, kind, name, payload, status, max_attempts,"
            " backoff, finished_at, output) SELECT 'h', 'ok', 'ok', '{}', s, 1, '{}',"
            " CASE s WHEN 'completed' THEN now() - interval '2 days' END, '1'"
            " FROM unnest(ARRAY['completed', 'pending']) AS s RETURNING id"
        )
        await conn.execute(  # what migration 0002's count and the triggers keep
            f"INSERT INTO {schema}.finished_counts (queue, status, n) VALUES ('h', 'completed', 1)"
        )
    jobs = await JobQueue.connect(pool=pool, schema=schema, registry=registry)
    try:
        await jobs.migrate()
        first, second = (r["id"] for r in old_ids)
        await jobs.append_log(first, "kept")
        assert (
            await jobs.pool.fetchval(
                f"SELECT relkind::text FROM pg_class WHERE oid = '{schema}.jobs'::regclass"
            )
            == "p"
        )
        assert (await homes(jobs, [first, second])) == {
            first: ["jobs_live"],
            second: ["jobs_live"],
        }
        fresh = await jobs.enqueue("ok", Item(n=1))
        assert fresh.id > second  # the sequence goes on from the identity
        result = await collect_garbage(jobs.db, KEEP_MONTH)
        assert result["moved_to_history"] == 1
        assert [line.line for line in (await jobs.read_logs(first)).lines] == ["kept"]
        await assert_counts_exact(jobs)
    finally:
        await jobs.close()
        await pool.execute(f"DROP SCHEMA {schema} CASCADE")


async def moved_to_its_day(jobs: JobQueue, job_id: int, days_ago: float) -> dt.date:
    """Finish ``job_id`` ``days_ago`` earlier and let GC move it; its day."""
    await age(jobs, [job_id], days_ago * DAY)
    await collect_garbage(jobs.db, KEEP_MONTH)
    row = await jobs.get(job_id)
    assert row is not None and row.finished_at is not None
    assert (await homes(jobs, [job_id]))[job_id] == [day_of(row.finished_at)]
    return row.finished_at.astimezone(dt.UTC).date()


async def append_line(conn: asyncpg.Connection, schema: str, job_id: int) -> int:
    """append_log's statement: the job locked as a foreign key would, then the line."""
    return int(
        await conn.fetchval(
            f"WITH job AS (SELECT id FROM {schema}.jobs WHERE id = $1 FOR KEY SHARE),"
            f" added AS (INSERT INTO {schema}.job_logs (job_id, line)"
            " SELECT id, 'late' FROM job RETURNING 1)"
            " SELECT count(*) FROM added",
            job_id,
        )
    )


@pytest.mark.parametrize("drop_first", [False, True], ids=["append_first", "drop_first"])
async def test_a_log_line_racing_the_drop_of_its_day(
    jobs: JobQueue, kinds, drop_first: bool
) -> None:
    """Appended first, the line holds the drop back and goes with the day; appended behind the
    drop, it finds no job. Either way no line outlives its job."""
    [job_id] = await run_all(jobs, Item(n=1))
    day = await moved_to_its_day(jobs, job_id, 9)
    schema = jobs.db.schema

    async def drop(conn: asyncpg.Connection) -> int:
        return int(await conn.fetchval(f"SELECT {schema}.drop_history_day($1)", day))

    async def append(conn: asyncpg.Connection) -> int:
        return await append_line(conn, schema, job_id)

    if drop_first:
        held, appended, waited = await overlap(jobs.pool, drop, append)
    else:
        appended, held, waited = await overlap(jobs.pool, append, drop)
    assert (held, appended, waited) == (1, 0 if drop_first else 1, True)
    lines = f"SELECT count(*) FROM {schema}.job_logs WHERE job_id = $1"
    assert await jobs.get(job_id) is None and await jobs.pool.fetchval(lines, job_id) == 0
    await assert_counts_exact(jobs)


async def test_a_dependency_added_while_the_day_drops_waits_and_is_refused(
    jobs: JobQueue, kinds
) -> None:
    """attach_prerequisites locks the prerequisite: behind the drop, it finds no job."""
    [pre] = await run_all(jobs, Item(n=1))
    day = await moved_to_its_day(jobs, pre, 9)
    waiting = await jobs.enqueue("ok", Item(n=2), delay=3600)
    schema = jobs.db.schema
    async with jobs.pool.acquire() as dropper:
        tx = dropper.transaction()
        await tx.start()
        assert await dropper.fetchval(f"SELECT {schema}.drop_history_day($1)", day) == 1
        adding = asyncio.create_task(jobs.add_dependency(pre, waiting.id))
        pid = dropper.get_server_pid()

        await wait_until_blocking(jobs.pool, pid)
        await tx.commit()
        with pytest.raises(InvalidFlow, match=f"no job {pre} to depend on"):
            await adding
    assert await jobs.prerequisite_results(waiting.id) == []


async def test_a_move_writes_no_event(jobs: JobQueue, kinds) -> None:
    [job_id] = await run_all(jobs, Item(n=1), events=True)
    schema = jobs.db.schema
    count = f"SELECT count(*) FROM {schema}.job_events WHERE job_id = $1"
    written = await jobs.pool.fetchval(count, job_id)
    assert written >= 2  # 'active', 'completed'
    await moved_to_its_day(jobs, job_id, 2)
    assert await jobs.pool.fetchval(count, job_id) == written
