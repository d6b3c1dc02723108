"""Reliability, first slice: bad input at the engine's entry points (a property-based fuzz over
enqueue options and filters, injection strings), races decided in one statement, and killed
database connections. Each asserts exact outcomes: a clear error naming the field, or the job
handled correctly; nothing half-written; nothing lost."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import asyncpg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pgjobs import (
    InvalidJobInput,
    InvalidOption,
    InvalidSchemaName,
    JobContext,
    JobFilter,
    JobQueue,
    JobSpec,
    Registry,
    Status,
)
from tests.reliability.figures import Figure, record

pytestmark = pytest.mark.reliability

INJECTIONS = [
    "'; DROP TABLE jobs; --",
    '" OR 1=1 --',
    "$1",
    "{schema}",
    "x\\'y",
    "🙂 ünïcödé",
    "%_%",
]
ANY_VALUE = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20),
    st.sampled_from(INJECTIONS), st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)  # fmt: skip
OPTIONS = ["queue", "priority", "delay", "max_attempts", "max_deferrals", "name", "dedup_key",
           "group_key", "tenant", "job_key", "metadata"]  # fmt: skip


@pytest.fixture
def kind(registry: Registry) -> None:
    @registry.kind("thing", input=dict[str, int], queue="rel", max_attempts=2)
    async def thing(ctx: JobContext, data: dict[str, int]) -> int:
        return sum(data.values())


async def count(jobs: JobQueue) -> int:
    return int(await jobs.db.pool.fetchval(f"SELECT count(*) FROM {jobs.schema}.jobs"))


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(option=st.sampled_from(OPTIONS), value=ANY_VALUE, data=ANY_VALUE)
async def test_fuzzed_enqueue_options_are_stored_or_refused_by_name(
    jobs: JobQueue, kind: None, option: str, value: Any, data: Any
) -> None:
    before = await count(jobs)
    payload = data if isinstance(data, dict) else {"n": 1}
    try:
        result = await jobs.enqueue("thing", payload, **{option: value})
    except InvalidOption as exc:
        assert exc.option.split(".")[0] in (option, "input"), (option, exc)
        assert await count(jobs) == before  # nothing half-written
        return
    except InvalidJobInput as exc:
        assert exc.kind == "thing"
        assert await count(jobs) == before
        return
    row = await jobs.get(result.id, any_tenant=True)
    assert row is not None
    if option in ("name", "dedup_key", "job_key", "group_key", "queue") and value is not None:
        assert getattr(row, option) == value  # stored as given, injection strings included
    if option == "priority" and value is not None:
        assert row.priority == value and isinstance(value, int)
    if option == "delay" and value:
        assert isinstance(value, int | float) and math.isfinite(value) and value > 0


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(field=st.sampled_from(["queue", "kind", "status", "dedup_key", "tenant", "name_prefix",
                               "sub_state", "job_key", "priority", "min_deferrals"]),
       value=ANY_VALUE)  # fmt: skip
async def test_fuzzed_filters_read_or_refuse_never_break(
    jobs: JobQueue, kind: None, field: str, value: Any
) -> None:
    await jobs.enqueue("thing", {"a": 1}, name="kept")
    before = await count(jobs)
    try:
        where = JobFilter(**{field: value})
        rows = await jobs.list_jobs(where, limit=1000)
        counts = await jobs.substate_counts(where)
    except (InvalidOption, ValueError, TypeError) as exc:
        assert field in str(exc) or isinstance(exc, TypeError | ValueError)
        return
    assert sum(counts.values()) == len(rows)  # the list and the counts agree
    if value is not None and field in ("queue", "kind", "dedup_key", "tenant", "job_key"):
        assert all(getattr(r, field) == value for r in rows)
    assert await count(jobs) == before  # a filter never deletes or alters anything


async def test_injection_strings_are_data_everywhere(jobs: JobQueue, kind: None) -> None:
    for text in INJECTIONS:
        job = await jobs.enqueue("thing", {"a": 1}, name=text, queue=text, dedup_key=text,
                                 job_key=text, tenant=text)  # fmt: skip
        rows = await jobs.list_jobs(JobFilter(queue=text, name_prefix=text, tenant=text))
        assert [r.id for r in rows] == [job.id]
        purged = await jobs.purge(JobFilter(queue=text, job_key=text, tenant=text))
        assert purged.deleted == 1
    with pytest.raises(InvalidSchemaName):
        await JobQueue.connect(pool=jobs.pool, schema="x; DROP SCHEMA public")
    assert await count(jobs) == 0


async def test_huge_and_hostile_values_get_clear_errors(jobs: JobQueue, kind: None) -> None:
    with pytest.raises(InvalidOption, match="name"):
        await jobs.enqueue("thing", {"a": 1}, name="x" * 1_000_001)
    with pytest.raises(InvalidOption, match="delay"):
        await jobs.enqueue("thing", {"a": 1}, delay=-1)
    with pytest.raises(InvalidOption, match="delay"):
        await jobs.enqueue("thing", {"a": 1}, delay=float("nan"))
    with pytest.raises(InvalidJobInput):
        await jobs.enqueue("thing", {"a": float("nan")})
    with pytest.raises(InvalidOption, match="metadata"):
        await jobs.enqueue("thing", {"a": 1}, metadata={"x": float("inf")})
    with pytest.raises(InvalidOption, match="cron"):
        await jobs.upsert_schedule("s", "thing", {"a": 1}, cron="61 * * * *")
    with pytest.raises(InvalidOption, match="timezone"):
        await jobs.upsert_schedule("s", "thing", {"a": 1}, cron="* * * * *", timezone="Mars/Base")
    big = await jobs.enqueue("thing", {f"k{i}": i for i in range(200_000)})  # a ~3 MB payload
    assert (await jobs.get(big.id)) is not None
    assert await count(jobs) == 1


async def test_a_hundred_concurrent_enqueues_with_one_key_make_one_job(
    jobs: JobQueue, kind: None
) -> None:
    by_key = await asyncio.gather(
        *(jobs.enqueue("thing", {"a": i}, job_key="same") for i in range(100))
    )
    by_dedup = await asyncio.gather(
        *(jobs.enqueue("thing", {"a": i}, dedup_key="same") for i in range(100))
    )
    for results in (by_key, by_dedup):
        assert len({r.id for r in results}) == 1
        assert sum(not r.duplicate for r in results) == 1
    assert await count(jobs) == 2


async def test_purge_racing_completion_loses_nothing_and_writes_nothing_late(
    jobs: JobQueue, registry: Registry
) -> None:
    started, release = asyncio.Event(), asyncio.Event()

    @registry.kind("slow", input=dict[str, int], queue="race")
    async def slow(ctx: JobContext, data: dict[str, int]) -> str:
        started.set()
        await release.wait()
        return "finished"

    job = await jobs.enqueue("slow", {})
    worker = jobs.worker(queues=["race"])
    task = worker.start()
    await asyncio.wait_for(started.wait(), 30)
    result = await jobs.purge(JobFilter(ids=(job.id,)), running="cancel")
    assert result.deleted == 1
    release.set()
    await worker.stop()
    await task
    assert await jobs.get(job.id) is None  # the late completion was fenced off
    assert worker.stats.completed == 0 and worker.stats.lost == 1


async def test_killed_connections_lose_no_job(
    jobs: JobQueue, registry: Registry, pg_dsn: str
) -> None:
    """The server terminates the worker's connections, repeatedly, while it works: it
    reconnects, and every job completes; none is lost. (A job whose outcome write died with
    its connection comes back after its lease, and that attempt counts: hence the budget.)"""

    @registry.kind("sturdy", input=dict[str, int], queue="rel", max_attempts=20)
    async def sturdy(ctx: JobContext, data: dict[str, int]) -> int:
        await asyncio.sleep(0.01)  # the work spans the fault window
        return sum(data.values())

    ids = [r.id for r in await jobs.enqueue_many([JobSpec("sturdy", {"a": i}) for i in range(300)])]
    worker = jobs.worker(queues=["rel"], concurrency=5, lease=3)
    task = worker.start()
    observer = await asyncpg.connect(pg_dsn)  # outside the worker's pool
    rounds = kills = 0
    finished = (
        f"SELECT count(*) FROM {jobs.schema}.jobs WHERE queue = 'rel' AND finished_at IS NOT NULL"
    )
    try:
        while rounds < 10 or await observer.fetchval(finished) < len(ids):
            if rounds < 10:  # ten rounds of terminations, then let it finish
                rounds += 1
                # Every connection of the worker (claims, outcomes, heartbeats, LISTEN).
                kills += await observer.fetchval(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                    " AND backend_type = 'client backend'"
                )
            await asyncio.sleep(0.1)  # paces the fault injector; the loop condition decides
    finally:
        await observer.close()
        await worker.stop()
        await task
    rows = await jobs.list_jobs(JobFilter(queue="rel"), limit=1000)
    assert {r.id for r in rows} == set(ids) and {r.status for r in rows} == {Status.COMPLETED}
    assert kills > 0
    record(
        Figure(
            scenario="connections terminated by the server (pg_terminate_backend), 1 worker",
            faults=f"{kills} terminations in 10 rounds",
            jobs=len(ids),
            lost=0,
            duplicated=f"{sum(r.attempts > 1 for r in rows)} jobs re-run (outcome lost with "
            "its connection)",
            recovery="-",
        )
    )
