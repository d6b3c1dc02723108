"""Enqueue: ordering, delays, bulk, transactions, dedup, tenants, and bad input."""

from __future__ import annotations

import asyncio
import json
import math
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import asyncpg
import pydantic
import pytest

from pgjobs import (
    Backoff,
    InvalidJobInput,
    InvalidOption,
    JobQueue,
    JobSpec,
    JsonText,
    Keep,
    Registry,
    Status,
    UnknownKind,
)
from pgjobs.enqueue import prepare


class Item(pydantic.BaseModel):
    n: int
    label: str = ""


class Measure(pydantic.BaseModel):
    value: float


@pytest.fixture
def seen(registry: Registry) -> list[int]:
    order: list[int] = []

    @registry.kind("item", input=Item)
    async def item(ctx, data: Item) -> int:
        order.append(data.n)
        return data.n

    registry.declare("measure", input=Measure)
    return order


async def count(jobs: JobQueue) -> int:
    return await jobs.db.pool.fetchval(f"SELECT count(*) FROM {jobs.schema}.jobs")


async def test_order_is_priority_desc_then_run_at_then_id(jobs: JobQueue, seen: list[int]) -> None:
    past = datetime.now(UTC) - timedelta(minutes=5)
    await jobs.enqueue("item", {"n": 1}, priority=0)
    await jobs.enqueue("item", {"n": 2}, priority=5)
    await jobs.enqueue("item", {"n": 3}, priority=5, run_at=past)  # older run_at wins a tie
    await jobs.enqueue("item", {"n": 4}, priority=-3)
    await jobs.enqueue("item", {"n": 5}, priority=5)  # same priority and run_at shape: by id
    await jobs.enqueue("item", {"n": 6}, priority=0)
    await jobs.worker(concurrency=1).run(until_drained=True)
    assert seen == [3, 2, 5, 1, 6, 4]


async def test_delayed_job_waits_for_its_time(jobs: JobQueue, seen: list[int]) -> None:
    delayed = await jobs.enqueue("item", {"n": 1}, delay=0.5)
    await jobs.enqueue("item", {"n": 2})
    worker = jobs.worker(concurrency=1, poll_interval=5)
    await worker.run(until_drained=True)
    row = await jobs.get(delayed.id)
    assert seen == [2, 1]
    assert row is not None and row.started_at is not None
    assert row.started_at >= row.run_at
    assert row.run_at - row.created_at >= timedelta(seconds=0.5)


async def test_bulk_enqueue_writes_all_in_input_order(jobs: JobQueue, seen: list[int]) -> None:
    specs = [JobSpec("item", {"n": i}, priority=i % 3) for i in range(2000)]
    results = await jobs.enqueue_many(specs)
    assert len(results) == 2000
    assert [r.duplicate for r in results] == [False] * 2000
    ids = [r.id for r in results]
    assert ids == sorted(ids) and len(set(ids)) == 2000
    rows = await jobs.db.pool.fetch(
        f"SELECT id, payload, priority FROM {jobs.schema}.jobs ORDER BY id"
    )
    assert [(r["id"], r["priority"]) for r in rows] == [(ids[i], i % 3) for i in range(2000)]
    assert rows[1234]["payload"] == '{"n": 1234, "label": ""}'


async def test_bulk_enqueue_resolves_dedup_inside_batch_and_against_table(
    jobs: JobQueue, seen: list[int]
) -> None:
    held = await jobs.enqueue("item", {"n": 0}, dedup_key="k-held")
    results = await jobs.enqueue_many(
        [
            JobSpec("item", {"n": 1}, dedup_key="k1"),
            JobSpec("item", {"n": 2}, dedup_key="k1"),
            JobSpec("item", {"n": 3}, dedup_key="k-held"),
            JobSpec("item", {"n": 4}),
        ]
    )
    assert results[0].duplicate is False
    assert results[1].id == results[0].id and results[1].duplicate is True
    assert results[2].id == held.id and results[2].duplicate is True
    assert results[3].duplicate is False
    assert await count(jobs) == 3


async def test_bulk_with_one_bad_spec_writes_nothing(jobs: JobQueue, seen: list[int]) -> None:
    with pytest.raises(InvalidJobInput) as info:
        await jobs.enqueue_many([JobSpec("item", {"n": 1}), JobSpec("item", {"n": "x"})])
    assert info.value.field == "n"
    assert await count(jobs) == 0


async def test_uniform_bulk_keeps_each_jobs_input_and_name_in_order(
    jobs: JobQueue, registry: Registry
) -> None:
    """A batch whose jobs share every option (one statement binds them once) still gives each
    job its own input, and its own name when the kind names jobs from their input."""
    registry.declare("named", input=Item, job_name=lambda item: f"named-{item.n}")
    results = await jobs.enqueue_many(
        [JobSpec("named", {"n": i}) for i in range(300)]
        + [JobSpec("named", {"n": 300}, priority=9)]  # one differs: the general statement
    )
    uniform = await jobs.enqueue_many(JobSpec("named", {"n": i}) for i in range(301, 600))
    ids = [r.id for r in results + uniform]
    assert ids == sorted(ids) and len(set(ids)) == 600
    rows = await jobs.db.pool.fetch(
        f"SELECT id, name, payload, priority FROM {jobs.schema}.jobs ORDER BY id"
    )
    assert [r["name"] for r in rows] == [f"named-{i}" for i in range(600)]
    assert [r["payload"] for r in rows] == [f'{{"n": {i}, "label": ""}}' for i in range(600)]
    assert [r["priority"] for r in rows] == [0] * 300 + [9] + [0] * 299


async def test_enqueue_batch_shares_options_and_keeps_inputs_names_and_order(
    jobs: JobQueue, seen: list[int]
) -> None:
    later = datetime.now(UTC) + timedelta(hours=1)
    results = await jobs.enqueue_batch(
        "item",
        ({"n": i} for i in range(500)),
        names=[f"job-{i}" for i in range(500)],
        queue="batch",
        priority=4,
        run_at=later,
        tenant="acme",
        metadata={"source": "import"},
        max_attempts=2,
    )
    ids = [r.id for r in results]
    assert ids == sorted(ids) and len(set(ids)) == 500
    assert not any(r.duplicate for r in results)
    row = await jobs.get(ids[123], tenant="acme")
    assert row is not None
    assert (row.queue, row.name, row.payload, row.priority, row.max_attempts) == (
        "batch",
        "job-123",
        {"n": 123, "label": ""},
        4,
        2,
    )
    assert row.run_at == later and row.metadata == {"source": "import"}
    assert await jobs.enqueue_batch("item", []) == []


async def test_enqueue_batch_of_a_kind_that_names_and_groups_from_input(
    jobs: JobQueue, registry: Registry
) -> None:
    registry.declare(
        "grouped",
        input=Item,
        job_name=lambda item: f"g-{item.n}",
        group_key=lambda item: item.label or None,
    )
    results = await jobs.enqueue_batch("grouped", [{"n": 1, "label": "a"}, {"n": 2}])
    rows = [await jobs.get(r.id) for r in results]
    assert [(r.name, r.group_key) for r in rows if r] == [("g-1", "a"), ("g-2", None)]


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"job_key": "k"}, "job_key"),
        ({"dedup_key": "k"}, "dedup_key"),
        ({"lifo": True}, "lifo"),
        ({"name": "one"}, "name"),
        ({"names": ["only-one"]}, "names"),
        ({"priority": "high"}, "priority"),
    ],
)
async def test_enqueue_batch_refuses_per_job_options_and_writes_nothing(
    jobs: JobQueue, seen: list[int], options: dict, field: str
) -> None:
    with pytest.raises(InvalidOption) as info:
        await jobs.enqueue_batch("item", [{"n": 1}, {"n": 2}], **options)
    assert info.value.option == field
    assert await count(jobs) == 0


async def test_enqueue_batch_with_one_bad_input_writes_nothing(
    jobs: JobQueue, seen: list[int]
) -> None:
    with pytest.raises(InvalidJobInput) as info:
        await jobs.enqueue_batch("item", [{"n": 1}, {"n": "x"}])
    assert (info.value.field, info.value.index) == ("n", 1)
    assert "input 1: field 'n'" in str(info.value)
    with pytest.raises(InvalidOption) as bad_name:
        await jobs.enqueue_batch("item", [{"n": 1}, {"n": 2}], names=["a", ""])
    assert bad_name.value.option == "name"
    assert await count(jobs) == 0


async def test_transactional_enqueue_rolled_back_leaves_no_job(
    jobs: JobQueue, seen: list[int]
) -> None:
    async with jobs.db.pool.acquire() as conn:
        with pytest.raises(RuntimeError):
            async with conn.transaction():
                await jobs.enqueue("item", {"n": 1}, connection=conn)
                assert await conn.fetchval(f"SELECT count(*) FROM {jobs.schema}.jobs") == 1
                raise RuntimeError("business write failed")
    assert await count(jobs) == 0


async def test_transactional_enqueue_publishes_at_commit_and_wakes_worker(
    jobs: JobQueue, registry: Registry
) -> None:
    done = asyncio.Event()

    @registry.kind("ping", input=Item)
    async def ping(ctx, data: Item) -> None:
        done.set()

    # A 60 s poll: only the NOTIFY sent at commit can wake the worker within the wait below.
    worker = jobs.worker(concurrency=1, poll_interval=60)
    worker.start()
    await asyncio.sleep(0)
    async with jobs.db.pool.acquire() as conn:
        async with conn.transaction():
            result = await jobs.enqueue("ping", {"n": 1}, connection=conn)
            await conn.execute(f"CREATE TABLE {jobs.schema}.business (id int)")
        # committed here
    await asyncio.wait_for(done.wait(), timeout=20)
    await worker.stop()
    row = await jobs.get(result.id)
    assert row is not None and row.status is Status.COMPLETED


async def test_fifty_concurrent_enqueues_with_one_dedup_key_make_one_job(
    jobs: JobQueue, seen: list[int]
) -> None:
    results = await asyncio.gather(
        *(jobs.enqueue("item", {"n": i}, dedup_key="same") for i in range(50))
    )
    ids = {r.id for r in results}
    assert len(ids) == 1
    assert sum(not r.duplicate for r in results) == 1
    assert await count(jobs) == 1
    held = await jobs.get_by_dedup_key("default", "same")
    assert held is not None and held.id in ids


async def test_dedup_key_is_free_again_once_the_holder_finished(
    jobs: JobQueue, seen: list[int]
) -> None:
    first = await jobs.enqueue("item", {"n": 1}, dedup_key="k")
    await jobs.worker().run(until_drained=True)
    assert await jobs.get_by_dedup_key("default", "k") is None
    second = await jobs.enqueue("item", {"n": 2}, dedup_key="k")
    assert second.id != first.id and not second.duplicate


async def test_dedup_key_is_scoped_by_queue_and_tenant(jobs: JobQueue, seen: list[int]) -> None:
    a = await jobs.enqueue("item", {"n": 1}, dedup_key="k", tenant="org-a")
    b = await jobs.enqueue("item", {"n": 2}, dedup_key="k", tenant="org-b")
    c = await jobs.enqueue("item", {"n": 3}, dedup_key="k", queue="other", tenant="org-a")
    assert len({a.id, b.id, c.id}) == 3
    again = await jobs.enqueue("item", {"n": 4}, dedup_key="k", tenant="org-b")
    assert again.id == b.id and again.duplicate
    assert await jobs.get_by_dedup_key("default", "k", tenant="org-c") is None
    found = await jobs.get_by_dedup_key("default", "k", tenant="org-a")
    assert found is not None and found.id == a.id


async def test_get_never_returns_another_tenants_job(jobs: JobQueue, seen: list[int]) -> None:
    mine = await jobs.enqueue("item", {"n": 1}, tenant="org-a")
    plain = await jobs.enqueue("item", {"n": 2})
    assert await jobs.get(mine.id, tenant="org-b") is None
    assert await jobs.get(mine.id) is None  # no tenant given: only untenanted jobs
    row = await jobs.get(mine.id, tenant="org-a")
    assert row is not None and row.tenant == "org-a" and row.payload == {"n": 1, "label": ""}
    assert await jobs.get(plain.id, tenant="org-a") is None
    assert await jobs.get(plain.id) is not None
    assert await jobs.get(mine.id, any_tenant=True) is not None
    assert await jobs.get(10**12) is None


async def test_kind_defaults_and_derived_name_and_group(jobs: JobQueue, registry: Registry) -> None:
    registry.declare(
        "cover",
        input=Item,
        queue="covers",
        max_attempts=7,
        max_deferrals=4,
        priority=3,
        backoff=Backoff.fixed(2.0),
        job_name=lambda item: f"cover-{item.n}",
        group_key=lambda item: item.label or None,
    )
    result = await jobs.enqueue(
        "cover", {"n": 123, "label": "series-9"}, metadata={"source": "test"}
    )
    row = await jobs.get(result.id)
    assert row is not None
    assert (row.queue, row.name, row.group_key, row.priority) == (
        "covers",
        "cover-123",
        "series-9",
        3,
    )
    assert (row.max_attempts, row.max_deferrals) == (7, 4)
    assert row.backoff == {"type": "fixed", "delay": 2.0, "max_delay": None, "jitter": 0.0}
    assert row.metadata == {"source": "test"}
    override = await jobs.enqueue(
        "cover", {"n": 1}, name="custom", priority=0, max_attempts=1, queue="q2"
    )
    row = await jobs.get(override.id)
    assert row is not None and (row.name, row.priority, row.max_attempts, row.queue) == (
        "custom",
        0,
        1,
        "q2",
    )


@pytest.mark.parametrize(
    ("kind", "payload", "options", "error", "field"),
    [
        ("nope", {"n": 1}, {}, UnknownKind, None),
        ("item", {"n": "not a number"}, {}, InvalidJobInput, "n"),
        ("item", {}, {}, InvalidJobInput, "n"),
        ("item", "a string", {}, InvalidJobInput, ""),
        ("measure", {"value": math.nan}, {}, InvalidJobInput, "value"),
        ("measure", {"value": math.inf}, {}, InvalidJobInput, "value"),
        ("item", {"n": 1, "label": "nul\x00byte"}, {}, InvalidJobInput, "label"),
        ("item", {"n": 1, "label": "lone \ud800 surrogate"}, {}, InvalidJobInput, "label"),
        ("item", {"n": 1}, {"delay": -1}, InvalidOption, "delay"),
        ("item", {"n": 1}, {"delay": math.nan}, InvalidOption, "delay"),
        ("item", {"n": 1}, {"delay": 10**12}, InvalidOption, "delay"),
        ("item", {"n": 1}, {"priority": 10**12}, InvalidOption, "priority"),
        ("item", {"n": 1}, {"priority": 1.5}, InvalidOption, "priority"),
        ("item", {"n": 1}, {"priority": True}, InvalidOption, "priority"),
        ("item", {"n": 1}, {"max_attempts": 0}, InvalidOption, "max_attempts"),
        ("item", {"n": 1}, {"max_deferrals": -1}, InvalidOption, "max_deferrals"),
        ("item", {"n": 1}, {"run_at": datetime(2030, 1, 1)}, InvalidOption, "run_at"),
        ("item", {"n": 1}, {"run_at": datetime.now(UTC), "delay": 1}, InvalidOption, "delay"),
        ("item", {"n": 1}, {"name": ""}, InvalidOption, "name"),
        ("item", {"n": 1}, {"name": "x" * 1_000_000}, InvalidOption, "name"),
        ("item", {"n": 1}, {"queue": ""}, InvalidOption, "queue"),
        ("item", {"n": 1}, {"queue": "q\x00"}, InvalidOption, "queue"),
        ("item", {"n": 1}, {"dedup_key": 42}, InvalidOption, "dedup_key"),
        ("item", {"n": 1}, {"metadata": {"x": math.nan}}, InvalidOption, "metadata"),
        ("item", {"n": 1}, {"metadata": {"x": object()}}, InvalidOption, "metadata"),
        ("item", {"n": 1}, {"backoff": "soon"}, InvalidOption, "backoff"),
        ("item", {"n": 1}, {"backoff": {"type": "linear"}}, InvalidOption, "backoff.type"),
    ],
)
async def test_bad_input_is_a_clear_error_and_writes_nothing(
    jobs: JobQueue, seen: list[int], kind, payload, options, error, field
) -> None:
    with pytest.raises(error) as info:
        await jobs.enqueue(kind, payload, **options)
    if field is not None:
        attribute = "field" if error is InvalidJobInput else "option"
        assert getattr(info.value, attribute) == field
        assert repr(field) in str(info.value) or field == ""
    if error is InvalidJobInput:
        assert repr(kind) in str(info.value)
    assert await count(jobs) == 0


async def test_sql_metacharacters_are_plain_data(jobs: JobQueue, seen: list[int]) -> None:
    nasty = "x'); DROP TABLE jobs; --"
    result = await jobs.enqueue(
        "item", {"n": 1, "label": nasty}, name=nasty, dedup_key=nasty, queue=nasty
    )
    row = await jobs.get(result.id)
    assert (
        row is not None
        and row.name == nasty
        and row.queue == nasty
        and row.payload["label"] == nasty
    )


@pytest.mark.parametrize(
    ("option", "valid", "equal_but_invalid"),
    [
        ("priority", 1, True),
        ("max_attempts", 1, True),
        ("max_attempts", 2, 2.0),
        ("max_deferrals", 0, False),
        ("delay", 0, False),
        ("keep_completed", Keep(count=1), Keep(count=True)),
        ("keep_dead", Keep(age=0), Keep(age=False)),
    ],
)
def test_options_validated_before_are_not_taken_for_equal_values_of_another_type(
    option: str, valid: Any, equal_but_invalid: Any
) -> None:
    """prepare remembers validated option sets; True == 1 must not let a bool through."""
    registry = Registry()
    registry.declare("item", input=Item)
    prepare(JobSpec("item", {"n": 1}, **{option: valid}), registry)
    with pytest.raises(InvalidOption) as info:
        prepare(JobSpec("item", {"n": 1}, **{option: equal_but_invalid}), registry)
    assert info.value.option.split(".")[0] == option


def test_remembered_options_keep_each_retention_rule_apart() -> None:
    """Option sets that differ only by a retention rule each store their own rules."""
    registry = Registry()
    registry.declare("item", input=Item)
    stored = [
        prepare(JobSpec("item", {"n": 1}, priority=2, **options), registry).retention
        for options in (
            {"keep_completed": Keep(count=0)},
            {"keep_completed": Keep(count=5)},
            {"keep_completed": Keep(count=5), "keep_dead": Keep(age=60)},
            {"keep_dead": Keep(count=5)},
            {},
            {"keep_completed": Keep(count=0)},
        )
    ]
    assert stored == [
        '{"completed":{"count":0}}',
        '{"completed":{"count":5}}',
        '{"completed":{"count":5},"dead":{"age":60.0}}',
        '{"dead":{"count":5}}',
        None,
        '{"completed":{"count":0}}',
    ]


def test_remembered_options_belong_to_the_kind_they_were_validated_with() -> None:
    """Two registries declaring one kind name differently: the same options give each its
    own kind's columns."""
    first, second = Registry(), Registry()
    first.declare("item", input=Item, queue="first", max_attempts=3)
    second.declare("item", input=Item, queue="second", max_attempts=7)
    for registry, queue, attempts in (
        (first, "first", 3),
        (second, "second", 7),
        (first, "first", 3),
    ):
        job = prepare(JobSpec("item", {"n": 1}, priority=5, name="same"), registry)
        assert (job.queue, job.max_attempts, job.priority) == (queue, attempts, 5)


async def test_a_batch_writes_every_column_as_one_enqueue_writes_it(
    jobs: JobQueue, seen: list[int]
) -> None:
    """A batch that is not uniform (per-job options) travels as one JSON document; the one-job
    path binds typed parameters. Both must store the same row, for values that JSON encodes with
    escapes: quotes, backslashes, non-ASCII and astral characters, a zone that is not UTC with
    microseconds, a fractional delay, negative numbers, JSON nulls inside a payload."""
    odd = 'quote " backslash \\ tab \t é ✓ 🎉 \u2028'
    zone = timezone(timedelta(hours=-3, minutes=-30))
    specs = [
        JobSpec(
            "item",
            {"n": 1, "label": odd},
            name=odd,
            queue="q-" + odd,
            priority=-7,
            run_at=datetime(2031, 5, 6, 7, 8, 9, 123456, tzinfo=zone),
            max_attempts=9,
            backoff=Backoff.exponential(1.5, max_delay=30),
            max_deferrals=4,
            group_key=odd,
            tenant=odd,
            metadata={"m": [odd, None, 1.25, {"x": None}]},
            keep_completed=Keep(count=3, age=60.5),
            keep_dead=Keep(count=0),
            events=True,
        ),
        JobSpec("item", {"n": 2}, delay=12.75, dedup_key="d-" + odd, job_key="k-" + odd),
        JobSpec("measure", {"value": -0.0001}, metadata=None, lifo=True),
        JobSpec("item", {"n": 3}),
    ]
    columns = (
        "queue, kind, name, payload, priority, max_attempts, max_deferrals, backoff, dedup_key, "
        "group_key, tenant, metadata, job_key, retention, flow_id, pending_deps, record_events, "
        "status, attempts, run_at, created_at"
    )

    async def rows(ids: list[int]) -> list[tuple[Any, ...]]:
        fetched = await jobs.db.pool.fetch(
            f"SELECT {columns} FROM {jobs.schema}.jobs WHERE id = ANY($1) ORDER BY id", ids
        )
        return [tuple(row) for row in fetched]

    one_by_one = [(await jobs.enqueue_many([spec]))[0].id for spec in specs]
    single = await rows(one_by_one)
    await jobs.db.pool.execute(f"DELETE FROM {jobs.schema}.jobs")  # frees the keys
    batched = await rows([result.id for result in await jobs.enqueue_many(specs)])
    assert len(batched) == len(specs)
    for one, many, spec in zip(single, batched, specs, strict=True):
        assert one[:-2] == many[:-2]  # every column but run_at and created_at
        if spec.run_at is not None:  # else run_at comes from the clock
            assert one[-2] == many[-2]
    assert batched[0][0] == "q-" + odd and batched[0][2] == odd and batched[0][10] == odd
    assert batched[0][-2] == datetime(2031, 5, 6, 10, 38, 9, 123456, tzinfo=UTC)
    assert timedelta(seconds=12.7) < batched[1][-2] - batched[1][-1] < timedelta(seconds=13.5)
    assert batched[2][-2] < batched[3][-2]  # LIFO: before an ordinary job
    assert json.loads(batched[0][3]) == {"n": 1, "label": odd}
    assert json.loads(batched[0][11]) == {"m": [odd, None, 1.25, {"x": None}]}
    assert batched[2][11] is None and json.loads(batched[0][13]) is not None


async def test_unknown_column_of_pool_does_not_leak_between_schemas(
    jobs: JobQueue, pool: asyncpg.Pool, seen: list[int]
) -> None:
    # Each test runs in its own schema: nothing lands in the default one.
    await jobs.enqueue("item", {"n": 1})
    assert await pool.fetchval("SELECT to_regclass('public.jobs')") is None


async def expire_holds(jobs: JobQueue) -> None:
    """Let time pass for every dedup hold (instead of sleeping through a ttl)."""
    await jobs.db.pool.execute(
        f"UPDATE {jobs.schema}.dedup_holds SET expires_at = now() - interval '1 second'"
    )


async def hold_seconds_left(jobs: JobQueue) -> float:
    return await jobs.db.pool.fetchval(
        f"SELECT extract(epoch FROM max(expires_at) - now()) FROM {jobs.schema}.dedup_holds"
    )


async def test_a_ttl_key_stays_taken_after_the_holder_finished(
    jobs: JobQueue, seen: list[int]
) -> None:
    first = await jobs.enqueue("item", {"n": 1}, dedup_key="t", dedup_ttl=60)
    await jobs.worker().run(until_drained=True)
    again = await jobs.enqueue("item", {"n": 2}, dedup_key="t", dedup_ttl=60)
    assert again.id == first.id and again.duplicate  # throttled although the first completed
    assert await jobs.dedup_holder("default", "t") == first.id
    await expire_holds(jobs)
    assert await jobs.dedup_holder("default", "t") is None
    third = await jobs.enqueue("item", {"n": 3}, dedup_key="t", dedup_ttl=60)
    assert not third.duplicate and third.id != first.id
    assert seen == [1]


async def test_a_ttl_key_expires_even_while_its_holder_is_in_flight(
    jobs: JobQueue, seen: list[int]
) -> None:
    first = await jobs.enqueue("item", {"n": 1}, dedup_key="t", dedup_ttl=60)
    await expire_holds(jobs)
    second = await jobs.enqueue("item", {"n": 2}, dedup_key="t", dedup_ttl=60)
    assert not second.duplicate and second.id != first.id
    assert await count(jobs) == 2


async def test_extend_restarts_the_hold_on_each_duplicate(jobs: JobQueue, seen: list[int]) -> None:
    await jobs.enqueue("item", {"n": 1}, dedup_key="e", dedup_ttl=10)
    await jobs.db.pool.execute(
        f"UPDATE {jobs.schema}.dedup_holds SET expires_at = now() + interval '1 second'"
    )
    plain = await jobs.enqueue("item", {"n": 2}, dedup_key="e", dedup_ttl=10)
    assert plain.duplicate and await hold_seconds_left(jobs) < 2  # no extend: unchanged
    extended = await jobs.enqueue("item", {"n": 3}, dedup_key="e", dedup_ttl=10, dedup_extend=True)
    assert extended.duplicate and await hold_seconds_left(jobs) > 9


async def test_replace_swaps_a_delayed_holder_but_not_a_started_one(
    jobs: JobQueue, seen: list[int]
) -> None:
    first = await jobs.enqueue("item", {"n": 1}, dedup_key="d", dedup_ttl=60, delay=30,
                               dedup_replace=True)  # fmt: skip
    second = await jobs.enqueue("item", {"n": 2}, dedup_key="d", dedup_ttl=60, delay=30,
                                dedup_replace=True)  # fmt: skip
    assert not second.duplicate and second.id != first.id
    assert await jobs.get(first.id) is None  # the delayed holder was replaced
    assert (await jobs.get(second.id)).payload == {"n": 2, "label": ""}  # type: ignore[union-attr]
    await jobs.promote(second.id)
    await jobs.worker().run(until_drained=True)
    third = await jobs.enqueue("item", {"n": 3}, dedup_key="d", dedup_ttl=60, dedup_replace=True)
    assert third.duplicate and third.id == second.id  # a finished holder is not replaced
    assert seen == [2]


async def test_concurrent_ttl_enqueues_make_one_job(jobs: JobQueue, seen: list[int]) -> None:
    results = await asyncio.gather(
        *(jobs.enqueue("item", {"n": i}, dedup_key="c", dedup_ttl=60) for i in range(30)),
        jobs.enqueue_many([JobSpec("item", {"n": 99}, dedup_key="c", dedup_ttl=60)]),
    )
    flat = [r for r in results if not isinstance(r, list)] + results[-1]  # type: ignore[operator]
    assert len({r.id for r in flat}) == 1 and sum(not r.duplicate for r in flat) == 1
    assert await count(jobs) == 1


async def test_release_frees_ttl_and_in_flight_keys(jobs: JobQueue, seen: list[int]) -> None:
    await jobs.enqueue("item", {"n": 1}, dedup_key="r", dedup_ttl=60)
    await jobs.enqueue("item", {"n": 2}, dedup_key="s")
    assert await jobs.release_dedup_key("default", "r")
    assert await jobs.release_dedup_key("default", "s")
    assert not await jobs.release_dedup_key("default", "nothing")
    assert not (await jobs.enqueue("item", {"n": 3}, dedup_key="r", dedup_ttl=60)).duplicate
    assert not (await jobs.enqueue("item", {"n": 4}, dedup_key="s")).duplicate


async def test_time_bound_dedup_options_are_checked(jobs: JobQueue, seen: list[int]) -> None:
    with pytest.raises(InvalidOption, match="dedup_ttl"):
        await jobs.enqueue("item", {"n": 1}, dedup_ttl=5)
    with pytest.raises(InvalidOption, match="dedup_ttl"):
        await jobs.enqueue("item", {"n": 1}, dedup_key="k", dedup_ttl=0)
    with pytest.raises(InvalidOption, match="dedup_replace"):
        await jobs.enqueue("item", {"n": 1}, dedup_replace=True)
    with pytest.raises(InvalidOption, match="dedup_extend"):
        await jobs.enqueue("item", {"n": 1}, dedup_key="k", dedup_extend=True)
    assert await count(jobs) == 0


async def test_nan_and_infinity_are_refused_not_turned_into_null(
    jobs: JobQueue, seen: list[int]
) -> None:
    # pydantic accepts NaN for a float field and its JSON mode would store it as null: the
    # engine refuses it, naming the field, and writes nothing.
    for bad in (float("nan"), float("inf"), -float("inf")):
        with pytest.raises(InvalidJobInput) as info:
            await jobs.enqueue("measure", {"value": bad})
        assert info.value.field == "value"
    ok = await jobs.enqueue("measure", {"value": 1.5})
    assert (await jobs.get(ok.id)).payload == {"value": 1.5}  # type: ignore[union-attr]
    assert await count(jobs) == 1


async def test_a_batch_given_as_one_json_array_text(
    jobs: JobQueue, registry: Registry, seen: list[int]
) -> None:
    """enqueue_batch takes one JsonText holding a JSON array: one job per element, in order;
    an Any kind stores each element, a typed kind validates each; a bad element is named by
    its position, text that is not an array is refused, and nothing is written then."""
    registry.declare("raw", input=Any, queue="raw")
    raw = await jobs.enqueue_batch(
        "raw", JsonText('[{"a": 1}, "two", [3], null]'), names=["w", "x", "y", "z"]
    )
    rows = [await jobs.get(r.id) for r in raw]
    assert [(r.name, r.payload) for r in rows if r] == [
        ("w", {"a": 1}), ("x", "two"), ("y", [3]), ("z", None),
    ]  # fmt: skip
    typed = await jobs.enqueue_batch("item", JsonText('[{"n": 1}, {"n": 2, "label": "b"}]'))
    rows = [await jobs.get(r.id) for r in typed]
    assert [r.payload for r in rows if r] == [{"n": 1, "label": ""}, {"n": 2, "label": "b"}]
    assert await jobs.enqueue_batch("raw", JsonText("[]")) == []
    before = await count(jobs)
    with pytest.raises(InvalidJobInput) as bad_item:
        await jobs.enqueue_batch("item", JsonText('[{"n": 1}, {"n": 2}, {"n": "x"}]'))
    assert (bad_item.value.index, bad_item.value.field) == (2, "n")
    with pytest.raises(InvalidJobInput, match=r"input 1: payload: .*jsonb cannot store"):
        await jobs.enqueue_batch("raw", JsonText('[{"ok": 1}, {"s": "a\\u0000b"}]'))
    for not_array in ('{"n": 1}', "[1, "):
        with pytest.raises(InvalidJobInput, match=r"JSON array|not JSON text"):
            await jobs.enqueue_batch("raw", JsonText(not_array))
        with pytest.raises(InvalidJobInput, match=r"JSON array|Invalid JSON"):
            await jobs.enqueue_batch("item", JsonText(not_array))
    with pytest.raises(InvalidOption, match="names"):
        await jobs.enqueue_batch("raw", JsonText("[1, 2]"), names=["only-one"])
    assert await count(jobs) == before


async def test_json_text_is_stored_as_it_is_by_an_any_kind_and_parsed_by_a_typed_one(
    jobs: JobQueue, registry: Registry, seen: list[int]
) -> None:
    """JsonText: JSON the caller already encoded. A kind whose input is Any stores the text
    untouched (no parse and re-encode); a typed kind validates it as its model; bad text is
    refused by name before anything is written."""
    registry.declare("raw", input=Any, queue="raw")
    text = '{"b": [1, 2.5, "x"], "a": {"nested": true}}'
    [one] = await jobs.enqueue_batch("raw", [JsonText(text)])
    single = await jobs.enqueue("raw", JsonText('"just a string"'))
    stored = await jobs.db.pool.fetchval(
        f"SELECT payload::text FROM {jobs.schema}.jobs WHERE id = $1", one.id
    )
    assert stored == '{"a": {"nested": true}, "b": [1, 2.5, "x"]}'  # jsonb's own order
    assert (await jobs.get(single.id)).payload == "just a string"  # type: ignore[union-attr]
    typed = await jobs.enqueue("item", JsonText('{"n": 7, "label": "seven"}'))
    assert (await jobs.get(typed.id)).payload == {"n": 7, "label": "seven"}  # type: ignore[union-attr]
    before = await count(jobs)
    with pytest.raises(InvalidJobInput, match="n") as bad_field:
        await jobs.enqueue("item", JsonText('{"n": "seven"}'))
    assert bad_field.value.kind == "item"
    for bad, says in (
        ('{"a": ', "not JSON text"),
        ('{"n": NaN}', "not JSON text"),
        ('{"s": "a\\u0000b"}', "jsonb cannot store"),
    ):
        with pytest.raises(InvalidJobInput, match=says):
            await jobs.enqueue_batch("raw", [JsonText('{"ok": 1}'), JsonText(bad)])
    assert await count(jobs) == before


async def test_a_queue_name_may_take_1024_bytes_beside_the_longest_key_and_tenant(
    jobs: JobQueue, registry: Registry
) -> None:
    """The unique indexes hold a queue beside a key (1,024 bytes) and a tenant (256): the
    longest of all three together still fits a btree entry; one byte more of queue is refused
    by name before anything is written."""
    registry.declare("wide", input=dict)
    queue = "é" * 512  # 1,024 bytes
    result = await jobs.enqueue(
        "wide", {}, queue=queue, job_key="k" * 1024, dedup_key="d" * 1024, tenant="t" * 256
    )
    assert (await jobs.get(result.id, tenant="t" * 256)).queue == queue
    with pytest.raises(InvalidOption, match="queue"):
        await jobs.enqueue("wide", {}, queue=queue + "x")
