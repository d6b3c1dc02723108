"""The tracking API: sub-states partition every job, filters, flow summaries, metrics."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pydantic
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pgjobs import (
    EdgePolicy,
    Flow,
    FlowFilter,
    InvalidOption,
    JobContext,
    JobFilter,
    JobQueue,
    JobSpec,
    Registry,
    Status,
    SubState,
)
from pgjobs.maintenance import GcInput, SweepInput, collect_garbage, sweep_metrics
from pgjobs.sql import filters
from tests.factories import insert_job

NOW = datetime.now(UTC)
PAST = NOW - timedelta(hours=1)
FUTURE = NOW + timedelta(hours=1)


def expected_sub_state(status: str, deps: int, future: bool, attempts: int) -> SubState:
    if status == "pending":
        if deps:
            return SubState.WAITING_CHILDREN
        if future:
            return SubState.DELAYED if attempts == 0 else SubState.RETRY
        return SubState.READY
    if status == "running":
        return SubState.ACTIVE
    return SubState.FAILED if status == "dead" else SubState(status)


job_state = st.tuples(
    st.sampled_from(["pending", "running", "completed", "dead", "cancelled"]),
    st.integers(0, 2),  # pending_deps
    st.booleans(),  # run_at in the future
    st.integers(0, 3),  # attempts
    st.sampled_from(["q1", "q2"]),
)


@pytest.fixture(scope="module")
def partition_schema(pg_dsn: str):
    schema = f"t_prop_{uuid.uuid4().hex[:8]}"

    async def setup() -> None:
        jobs = await JobQueue.connect(pg_dsn, schema=schema, min_size=1, max_size=2)
        await jobs.migrate()
        await jobs.close()

    asyncio.run(setup())
    yield schema

    async def drop() -> None:
        conn = await asyncpg.connect(pg_dsn)
        await conn.execute(f"DROP SCHEMA {schema} CASCADE")
        await conn.close()

    asyncio.run(drop())


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(population=st.lists(job_state, max_size=40))
def test_sub_states_partition_every_population(
    pg_dsn: str, partition_schema: str, population
) -> None:
    async def check() -> None:
        jobs = await JobQueue.connect(pg_dsn, schema=partition_schema, min_size=1, max_size=2)
        try:
            await jobs.db.pool.execute(f"TRUNCATE {partition_schema}.jobs CASCADE")
            expected: dict[int, SubState] = {}
            for status, deps, future, attempts, queue in population:
                deps = deps if status == "pending" else 0
                job_id = await insert_job(
                    jobs.db.pool,
                    partition_schema,
                    queue=queue,
                    status=status,
                    pending_deps=deps,
                    run_at=FUTURE if future else PAST,
                    attempts=attempts,
                )
                expected[job_id] = expected_sub_state(status, deps, future, attempts)
            for where in (JobFilter(), JobFilter(queue="q1")):
                counts = await jobs.substate_counts(where)
                subset = {
                    i: s
                    for i, s in expected.items()
                    if where.queue is None
                    or (await jobs.get(i, any_tenant=True)).queue == where.queue
                }  # type: ignore[union-attr]
                assert sum(counts.values()) == len(subset)
                for state in SubState:
                    assert counts[state] == sum(1 for s in subset.values() if s is state), state
            seen: dict[int, SubState] = {}
            for state in SubState:
                for row in await jobs.list_jobs(JobFilter(sub_state=state), limit=1000):
                    assert row.id not in seen  # mutually exclusive
                    assert row.sub_state is state
                    seen[row.id] = state
            assert seen == expected  # and together they cover every job
        finally:
            await jobs.close()

    asyncio.run(check())


async def test_waiting_children_wins_over_delayed_and_retry(jobs: JobQueue) -> None:
    schema = jobs.schema
    retry_with_deps = await insert_job(
        jobs.db.pool, schema, pending_deps=1, run_at=FUTURE, attempts=2
    )
    delayed_with_deps = await insert_job(jobs.db.pool, schema, pending_deps=3, run_at=FUTURE)
    retry = await insert_job(jobs.db.pool, schema, run_at=FUTURE, attempts=1)
    for job_id, state in (
        (retry_with_deps, SubState.WAITING_CHILDREN),
        (delayed_with_deps, SubState.WAITING_CHILDREN),
        (retry, SubState.RETRY),
    ):
        row = await jobs.get(job_id)
        assert row is not None and row.sub_state is state


async def test_every_filter_field(jobs: JobQueue) -> None:
    s, pool = jobs.schema, jobs.db.pool
    old = NOW - timedelta(days=3)
    a = await insert_job(
        pool,
        s,
        queue="qa",
        kind="ka",
        name="cover_1",
        group_key="g1",
        dedup_key="d1",
        tenant="t1",
        deferrals=2,
        created_at=old,
    )
    b = await insert_job(
        pool,
        s,
        queue="qa",
        kind="kb",
        name="coverX1",
        status="completed",
        dedup_key="d1",
        tenant="t2",
    )
    c = await insert_job(
        pool, s, queue="qb", kind="ka", name="50%off", status="running", group_key="g2"
    )
    d = await insert_job(pool, s, queue="qb", kind="kb", name="other", status="dead", flow_id=77)

    async def ids(**fields) -> set[int]:
        return {row.id for row in await jobs.list_jobs(JobFilter(**fields), limit=100)}

    assert await ids(queue="qa") == {a, b}
    assert await ids(kind="ka") == {a, c}
    assert await ids(status="running") == {c}
    assert await ids(status=("completed", "dead")) == {b, d}
    assert await ids(sub_state="failed") == {d}
    assert await ids(sub_state=("ready", "active")) == {a, c}
    assert await ids(flow_id=77) == {d}
    assert await ids(group_key="g2") == {c}
    assert await ids(dedup_key="d1") == {a, b}  # history included
    assert await ids(min_deferrals=1) == {a}
    assert await ids(tenant="t2") == {b}
    assert await ids(name_prefix="cover_") == {a}  # "_" is literal, not "any character"
    assert await ids(name_prefix="50%") == {c}
    assert await ids(name_prefix="cover") == {a, b}
    assert await ids(created_before=NOW - timedelta(days=1)) == {a}
    assert await ids(created_after=NOW - timedelta(days=1)) == {b, c, d}
    assert await ids(queue="qa", kind="kb", tenant="t2") == {b}
    await jobs.change_priority(c, 9)
    assert await ids(priority=9) == {c}
    counts = await jobs.substate_counts(JobFilter(queue="qb"))
    assert (
        counts[SubState.ACTIVE] == 1 and counts[SubState.FAILED] == 1 and sum(counts.values()) == 2
    )
    with pytest.raises(InvalidOption, match="sub_state"):
        await jobs.list_jobs(JobFilter(sub_state="sleeping"))
    with pytest.raises(InvalidOption, match="limit"):
        await jobs.list_jobs(limit=5000)
    with pytest.raises(InvalidOption, match="offset"):
        await jobs.list_jobs(offset=-1)


async def test_payload_equals_matches_a_json_value_at_a_path(
    jobs: JobQueue, registry: Registry
) -> None:
    registry.declare("order", input=dict)
    ids = [
        (await jobs.enqueue("order", payload)).id
        for payload in (
            {"user": {"id": 42}, "items": [{"sku": "a-1"}]},
            {"user": {"id": "42"}, "items": [{"sku": "b-2"}, {"sku": "a-1"}]},
            {"user": {"id": 7}},
            {"user": None},
        )
    ]

    async def found(path: str, value: object) -> list[int]:
        rows = await jobs.list_jobs(JobFilter(payload_equals=(path, value)), oldest_first=True)
        return [r.id for r in rows]

    assert await found("user.id", 42) == [ids[0]]  # as JSON: the string "42" is not 42
    assert await found("user.id", "42") == [ids[1]]
    assert await found("items.0.sku", "a-1") == [ids[0]]
    assert await found("items.1.sku", "a-1") == [ids[1]]
    assert await found("user", None) == [ids[3]]
    assert await found("user.name", "x") == []
    counts = await jobs.substate_counts(JobFilter(payload_equals=("user.id", 7)))
    assert counts[SubState.READY] == 1
    for bad in (("", 1), ("user..id", 1), ("user.id", object()), ("user.id",), "user.id=1"):
        with pytest.raises(InvalidOption) as info:
            await jobs.list_jobs(JobFilter(payload_equals=bad))  # type: ignore[arg-type]
        assert info.value.option == "payload_equals"


async def test_find_by_job_key_probes_each_queue_through_the_key_index(
    jobs: JobQueue, registry: Registry
) -> None:
    registry.declare("order", input=dict)
    a = await jobs.enqueue("order", {}, queue="a", job_key="k-1")
    b = await jobs.enqueue("order", {}, queue="b", job_key="k-1", tenant="acme")
    await jobs.enqueue("order", {}, queue="b", job_key="k-2")
    await jobs.enqueue_batch("order", [{} for _ in range(2000)], queue="plain")
    assert [r.id for r in await jobs.find_by_job_key("k-1", any_tenant=True)] == [a.id, b.id]
    assert [r.id for r in await jobs.find_by_job_key("k-1")] == [a.id]
    assert [r.id for r in await jobs.find_by_job_key("k-1", tenant="acme")] == [b.id]
    assert await jobs.find_by_job_key("nothing", any_tenant=True) == []
    await jobs.db.pool.execute(f"ANALYZE {jobs.schema}.jobs")
    sql = jobs.db.statements["jobs_by_job_key"]
    plan = "\n".join(
        r[0] for r in await jobs.db.pool.fetch("EXPLAIN " + sql, "k-1", None, True, 50)
    )
    assert "Seq Scan on jobs" not in plan, plan
    with pytest.raises(InvalidOption):
        await jobs.find_by_job_key("")


async def test_in_flight_reads_use_the_partial_indexes_not_the_history(jobs: JobQueue) -> None:
    """No index holds every in-flight row (0001_baseline.sql): counts, gauges, cancels by
    filter and status listings combine the partial indexes that hold in-flight jobs, and
    still read none of the finished history (nor miss a job of any in-flight sub-state)."""
    pool, schema = jobs.db.pool, jobs.schema
    await pool.execute(  # counted as the engine counts the finished jobs it writes
        f"WITH ins AS (INSERT INTO {schema}.jobs (queue, kind, name, payload, backoff,"
        " max_attempts, status, finished_at) SELECT 'q', 'k', 'k', '{}', '{}', 1, 'completed',"
        " now() FROM generate_series(1, 5000) RETURNING 1)"
        f" INSERT INTO {schema}.finished_counts (queue, status, n)"
        " SELECT 'q', 'completed', count(*) FROM ins"
    )
    in_flight = {
        SubState.READY: await insert_job(pool, schema),
        SubState.DELAYED: await insert_job(pool, schema, run_at=FUTURE),
        SubState.WAITING_CHILDREN: await insert_job(pool, schema, pending_deps=1),
        SubState.ACTIVE: await insert_job(pool, schema, status="running", attempts=1),
    }
    await pool.execute(f"ANALYZE {schema}.jobs")

    counts = await jobs.substate_counts(JobFilter(queue="q"))
    assert {s: counts[s] for s in in_flight} == dict.fromkeys(in_flight, 1)
    assert counts[SubState.COMPLETED] == 5000
    for state, job_id in in_flight.items():
        listed = await jobs.list_jobs(JobFilter(queue="q", sub_state=state))
        assert [r.id for r in listed] == [job_id], state
    gauges = await pool.fetch(jobs.db.statements["queue_gauges"], ["q"])
    assert sorted((r["state"], r["jobs"]) for r in gauges) == [
        ("delayed", 1), ("ready", 1), ("running", 1), ("waiting_children", 1),
    ]  # fmt: skip

    def statement(name: str, where: JobFilter, first: int) -> tuple[str, list[object]]:
        """Statement ``name`` as the tracking API renders it for ``where`` (newest first)."""
        sql, params = filters.where(where, first, "j", schema)
        text = jobs.db.statements[name].replace("{where}", sql).replace("{order}", "j.id DESC")
        return text, params

    async def plan(name: str, where: JobFilter, first: int, *lead: object) -> str:
        text, params = statement(name, where, first)
        rows = await pool.fetch("EXPLAIN " + text, *lead, *params)
        return "\n".join(r[0] for r in rows)

    statuses = JobFilter(queue="q", status=[Status.PENDING, Status.RUNNING])
    plans = [
        await plan("substate_counts", JobFilter(queue="q", status=Status.PENDING), 1),
        await plan("in_flight_ids_where", JobFilter(queue="q"), 1),
        await plan("list_jobs", statuses, 3, 0, 50),
    ]
    gauge_plan = await pool.fetch("EXPLAIN " + jobs.db.statements["queue_gauges"], ["q"])
    plans.append("\n".join(r[0] for r in gauge_plan))
    for text in plans:
        assert "Seq Scan on jobs" not in text and "jobs_pkey" not in text, text
        assert "jobs_claim_idx" in text and "jobs_waiting_children_idx" in text, text

    # The plan asyncpg's prepared statement gets after a few calls is made without the
    # values: a sub-state listing must still read the partial indexes then. (EXPLAIN EXECUTE
    # takes no bind parameters, hence the test's literal values.)
    text, _ = statement("list_jobs", JobFilter(queue="q", sub_state=SubState.READY), 3)
    async with pool.acquire() as conn:
        await conn.execute("SET plan_cache_mode = force_generic_plan")
        await conn.execute(f"PREPARE ready_page(bigint, bigint, text, text[]) AS {text}")
        generic = "\n".join(
            r[0] for r in await conn.fetch("EXPLAIN EXECUTE ready_page(0, 50, 'q', '{ready}')")
        )
        await conn.execute("DEALLOCATE ready_page")
        await conn.execute("RESET plan_cache_mode")
    assert "jobs_pkey" not in generic and "Seq Scan on jobs" not in generic, generic
    assert "jobs_claim_idx" in generic, generic


async def test_list_jobs_pages_newest_first(jobs: JobQueue) -> None:
    created = [await insert_job(jobs.db.pool, jobs.schema) for _ in range(7)]
    first = await jobs.list_jobs(limit=3)
    second = await jobs.list_jobs(limit=3, offset=3)
    assert [r.id for r in first + second] == created[::-1][:6]
    oldest = await jobs.list_jobs(limit=2, oldest_first=True)
    assert [r.id for r in oldest] == created[:2]
    # keyset pages: after the last id read (oldest first), before it (newest first)
    after = await jobs.list_jobs(JobFilter(after_id=oldest[-1].id), limit=2, oldest_first=True)
    assert [r.id for r in after] == created[2:4]
    before = await jobs.list_jobs(JobFilter(before_id=first[-1].id), limit=3)
    assert [r.id for r in before] == created[::-1][3:6]


class Step(pydantic.BaseModel):
    fail: bool = False


@pytest.fixture
def step(registry: Registry) -> None:
    @registry.kind("step", input=Step, max_attempts=1)
    async def run(ctx: JobContext, data: Step) -> str:
        if data.fail:
            raise ValueError("failed on purpose")
        return "ok"


async def make_flow(
    jobs: JobQueue,
    name: str,
    *,
    fail: bool = False,
    queue2: str = "default",
    cancel: bool = False,
    hold: bool = False,
) -> int:
    flow = Flow(name)
    flow.add("a", "step", {"fail": fail})
    # A held node waits in a queue no worker of these tests serves, so its flow keeps running.
    flow.add("b", "step", {}, queue="parked" if hold else queue2)
    flow.edge("a", "b", EdgePolicy.IGNORE)
    submitted = await jobs.submit_flow(flow)
    if cancel:
        await jobs.cancel(submitted.job_ids["b"])
    return submitted.flow_id


async def test_flow_outcomes_and_list_vs_view_agreement(jobs: JobQueue, step) -> None:
    completed = await make_flow(jobs, "ok")
    with_failures = await make_flow(jobs, "dead-node", fail=True)
    failed = await make_flow(jobs, "cancelled-node", cancel=True)
    running = await make_flow(jobs, "still-going", hold=True)
    await jobs.worker().run(until_drained=True)
    summaries = {s.id: s for s in await jobs.list_flows(limit=10)}
    assert {fid: summaries[fid].outcome for fid in (completed, with_failures, failed, running)} == {
        completed: "completed",
        with_failures: "completed_with_failures",
        failed: "failed",
        running: "running",
    }
    for flow_id, summary in summaries.items():
        view = await jobs.flow_view(flow_id)
        assert view is not None and view.summary == summary
        assert sum(summary.counts.values()) == summary.total == len(view.nodes) == 2
        assert [e.policy for e in view.edges] == ["ignore"]
    assert summaries[running].finished_at is None
    assert summaries[completed].finished_at is not None
    assert summaries[running].counts[SubState.READY] == 1
    assert await jobs.list_flows(FlowFilter(outcome="failed")) == [summaries[failed]]
    assert await jobs.flow_view(10**9) is None


async def test_list_flows_queue_filter_keeps_the_whole_flow(jobs: JobQueue, step) -> None:
    touching = await make_flow(jobs, "touching", queue2="special")
    await make_flow(jobs, "elsewhere", hold=True)
    [summary] = await jobs.list_flows(FlowFilter(queue="special"))
    assert summary.id == touching and summary.total == 2  # both nodes, not only the matching one


async def test_list_flows_name_prefix_is_literal_and_pages_newest_first(
    jobs: JobQueue, step
) -> None:
    ids = [await make_flow(jobs, name, hold=True) for name in ("a_b", "axb", "a%c", "a_z")]
    names = [s.name for s in await jobs.list_flows(FlowFilter(name_prefix="a_"))]
    assert names == ["a_z", "a_b"]
    assert [s.name for s in await jobs.list_flows(FlowFilter(name_prefix="a%"))] == ["a%c"]
    page1 = await jobs.list_flows(limit=2)
    page2 = await jobs.list_flows(limit=2, offset=2)
    assert [s.id for s in page1 + page2] == ids[::-1]
    window = await jobs.list_flows(FlowFilter(created_after=NOW - timedelta(minutes=5)))
    assert len(window) == 4
    assert await jobs.list_flows(FlowFilter(created_before=NOW - timedelta(minutes=5))) == []


async def test_flow_without_a_flow_row_is_listed_with_no_name(jobs: JobQueue) -> None:
    job = await insert_job(jobs.db.pool, jobs.schema, flow_id=424242, status="completed")
    [summary] = await jobs.list_flows()
    assert (summary.id, summary.name, summary.outcome, summary.total) == (
        424242,
        None,
        "completed",
        1,
    )
    view = await jobs.flow_view(424242)
    assert view is not None and view.summary == summary and [n.id for n in view.nodes] == [job]


async def test_flow_view_is_tenant_scoped(jobs: JobQueue, step) -> None:
    flow = Flow("private")
    flow.add("a", "step", {})
    submitted = await jobs.submit_flow(flow, tenant="org-a")
    assert await jobs.flow_view(submitted.flow_id, tenant="org-b") is None
    assert await jobs.flow_view(submitted.flow_id, tenant="org-a") is not None
    assert [s.id for s in await jobs.list_flows(FlowFilter(tenant="org-b"))] == []


async def test_queue_stats(jobs: JobQueue) -> None:
    await insert_job(jobs.db.pool, jobs.schema, queue="one")
    await insert_job(jobs.db.pool, jobs.schema, queue="one", status="completed")
    await jobs.pause("two")
    stats = {s.queue: s for s in await jobs.queue_stats()}
    assert stats["one"].counts[SubState.READY] == 1 and stats["one"].counts[SubState.COMPLETED] == 1
    assert stats["two"].paused and sum(stats["two"].counts.values()) == 0


async def test_queue_metrics_stitches_rollup_and_live_exactly(jobs: JobQueue) -> None:
    s, pool = jobs.schema, jobs.db.pool
    base = datetime(2026, 11, 1, 10, 0, tzinfo=UTC)
    # Two jobs in minute 10:00, one at 10:00:20 and one at 10:00:40; the sweep stops at 10:00:30,
    # so that minute is split between the rollup and the live tail.
    for at, status in (
        (base + timedelta(seconds=20), "completed"),
        (base + timedelta(seconds=40), "completed"),
        (base + timedelta(minutes=2), "dead"),
        (base + timedelta(minutes=2, seconds=5), "cancelled"),
    ):
        await insert_job(pool, s, queue="mq", status=status, finished_at=at)
    await pool.execute(f"INSERT INTO {s}.metrics_watermark VALUES (true, $1)", base)
    async with pool.acquire() as conn, conn.transaction():
        await jobs.db.fetch("sweep_count", base, base + timedelta(seconds=30), conn=conn)
        await jobs.db.fetch("sweep_advance", base + timedelta(seconds=30), conn=conn)
    rolled = await pool.fetchval(f"SELECT sum(completed) FROM {s}.metrics_rollup")
    assert rolled == 1
    minutes = await jobs.queue_metrics("mq", "minute", base, base + timedelta(minutes=4))
    assert [(b.start, b.completed, b.dead, b.cancelled) for b in minutes] == [
        (base, 2, 0, 0),
        (base + timedelta(minutes=1), 0, 0, 0),
        (base + timedelta(minutes=2), 0, 1, 1),
        (base + timedelta(minutes=3), 0, 0, 0),
    ]
    hours = await jobs.queue_metrics("mq", "hour", base, base + timedelta(hours=2))
    assert [(b.completed, b.dead, b.cancelled) for b in hours] == [(2, 1, 1), (0, 0, 0)]
    days = await jobs.queue_metrics("mq", "day", base - timedelta(days=1), base + timedelta(days=1))
    assert [b.completed for b in days] == [0, 2, 0]  # Oct 31, Nov 1, Nov 2 (partial)
    with pytest.raises(InvalidOption, match="granularity"):
        await jobs.queue_metrics("mq", "week", base)  # type: ignore[arg-type]
    with pytest.raises(InvalidOption, match="start"):
        await jobs.queue_metrics("mq", "minute", base - timedelta(days=400), base)


async def test_queue_metrics_survive_gc_and_count_once_after_resweeps(
    jobs: JobQueue, registry: Registry
) -> None:
    @registry.kind("quick", input=Step, queue="mq")
    async def quick(ctx: JobContext, data: Step) -> None:
        return None

    await jobs.enqueue_many([JobSpec("quick", {}) for _ in range(6)])
    await jobs.worker(queues=["mq"]).run(until_drained=True)
    start = NOW - timedelta(hours=1)
    before = sum(b.completed for b in await jobs.queue_metrics("mq", "hour", start))
    assert before == 6  # all live: nothing swept yet
    for _ in range(3):
        await sweep_metrics(jobs.db, SweepInput(settle_seconds=0))
    await collect_garbage(jobs.db, GcInput(completed_after=0))
    assert await jobs.list_jobs(JobFilter(queue="mq")) == []
    after = sum(b.completed for b in await jobs.queue_metrics("mq", "hour", start))
    assert after == 6
    assert Status.COMPLETED == "completed"


@pytest.mark.parametrize("oldest_first", [False, True])
async def test_several_finished_sub_states_by_finish_time_read_each_and_merge(
    jobs: JobQueue, oldest_first: bool
) -> None:
    """Failed and cancelled jobs by finish time (a BullMQ queue's failed tab): the same page,
    in the same order, as one sort of them all, ties on the finish time broken by id, from
    any offset; a page deeper than MERGED_ROWS is one query."""
    schema = jobs.db.schema
    start = datetime(2026, 1, 1, tzinfo=UTC)
    for n in range(60):
        status = ("dead", "cancelled", "completed")[n % 3]
        at = start + timedelta(seconds=n // 2)  # pairs share a finish time
        await insert_job(jobs.pool, schema, queue="m", status=status, finished_at=at)
    where = JobFilter(queue="m", sub_state=(SubState.FAILED, SubState.CANCELLED))
    rows = await jobs.list_jobs(where, limit=1000, order="finished", oldest_first=True)
    every = sorted(((r.finished_at, r.id) for r in rows), reverse=not oldest_first)
    assert len(every) == 40
    for offset, limit in ((0, 7), (5, 10), (33, 20), (39, 1)):
        page = await jobs.list_jobs(
            where, limit=limit, offset=offset, order="finished", oldest_first=oldest_first
        )
        assert [(r.finished_at, r.id) for r in page] == every[offset : offset + limit]
    plan = await jobs.pool.fetch(
        f"EXPLAIN SELECT j.id FROM {schema}.jobs j WHERE j.queue = 'm' AND j.status = 'dead'"
        " AND j.finished_at IS NOT NULL ORDER BY j.finished_at DESC, j.id DESC LIMIT 50"
    )
    assert "jobs_finished_idx" in "\n".join(r[0] for r in plan)


async def test_in_flight_listings_never_walk_the_history_when_the_statistics_say_busy(
    jobs: JobQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A queue with a long history and nothing in flight, planned with statistics taken while
    another queue held many jobs in flight: its newest jobs (order ``recent``) and its
    in-flight tabs (order ``created``) read the partial indexes, not the primary key from the
    newest id down through the whole history."""
    pool, schema = jobs.db.pool, jobs.schema
    await pool.execute(
        f"INSERT INTO {schema}.jobs (queue, kind, name, payload, backoff, max_attempts, status,"
        " finished_at) SELECT 'h', 'k', 'k', '{}', '{}', 1, 'completed', now()"
        " FROM generate_series(1, 20000)"
    )
    await pool.execute(
        f"INSERT INTO {schema}.jobs (queue, kind, name, payload, backoff, max_attempts)"
        " SELECT 'busy', 'k', 'k', '{}', '{}', 1 FROM generate_series(1, 20000)"
    )
    await pool.execute(f"ANALYZE {schema}.jobs")
    issued: list[tuple[str, tuple[object, ...], dict[str, str]]] = []
    fetch = jobs.db.fetch

    async def recording(name: str, *args: object, **options: Any) -> Any:
        if name == "list_jobs":
            issued.append((name, args, options.get("parts") or {}))
        return await fetch(name, *args, **options)

    monkeypatch.setattr(jobs.db, "fetch", recording)
    assert await jobs.list_jobs(JobFilter(queue="h"), order="recent", limit=5) != []
    assert await jobs.list_jobs(JobFilter(queue="h", sub_state=SubState.READY)) == []
    assert await jobs.list_jobs(JobFilter(queue="h", status=Status.RUNNING)) == []
    in_flight = [call for call in issued if "completed" not in str(call[1])]
    assert len(in_flight) >= 3
    for name, args, parts in in_flight:
        text = jobs.db._sql(name, parts)
        plan = "\n".join(r[0] for r in await pool.fetch("EXPLAIN " + text, *args))
        assert "jobs_pkey" not in plan and "Seq Scan on jobs" not in plan, plan
