"""Durability levels: an ``async`` write sets synchronous_commit off for its own transaction
only (what it risks in a crash: tests/reliability/test_durability_crash.py); ``durable``
leaves the server's setting alone."""

from __future__ import annotations

import pydantic
import pytest

from pgjobs import Durability, Flow, InvalidOption, JobQueue, JobSpec, Registry
from pgjobs.completer import write_outcomes
from pgjobs.outcomes import Outcome


class Item(pydantic.BaseModel):
    n: int = 0


@pytest.fixture
def kinds(registry: Registry) -> None:
    @registry.kind("item", input=Item)
    async def item(ctx, data: Item) -> int:
        return data.n


async def _commit_mode_after(jobs: JobQueue, write) -> str:
    async with jobs.transaction() as conn:
        await write(conn)
        return await conn.fetchval("SHOW synchronous_commit")


@pytest.mark.parametrize(
    ("durability", "expected"), [(None, "on"), ("durable", "on"), ("async", "off")]
)
async def test_each_write_path_sets_its_transactions_commit_mode(
    jobs: JobQueue, kinds, durability: str | None, expected: str
) -> None:
    async def one(conn) -> None:
        await jobs.enqueue("item", {"n": 1}, connection=conn, durability=durability)

    async def many(conn) -> None:
        specs = [JobSpec("item", {"n": i}) for i in range(3)]
        await jobs.enqueue_many(specs, connection=conn, durability=durability)

    async def mixed(conn) -> None:  # per-job options: the JSON-document statement
        specs = [JobSpec("item", {"n": i}, job_key=f"k{i}", priority=i) for i in range(3)]
        await jobs.enqueue_many(specs, connection=conn, durability=durability)

    async def batch(conn) -> None:
        await jobs.enqueue_batch(
            "item", [{"n": 1}, {"n": 2}], connection=conn, durability=durability
        )

    async def flow(conn) -> None:
        built = Flow()
        built.add("a", "item", {})
        built.add("b", "item", {})
        built.edge("a", "b")
        await jobs.submit_flow(built, connection=conn, durability=durability)

    async def held_dedup(conn) -> None:
        await jobs.enqueue(
            "item", {}, dedup_key="k", dedup_ttl=60, connection=conn, durability=durability
        )

    for write in (one, many, mixed, batch, flow, held_dedup):
        assert await _commit_mode_after(jobs, write) == expected, write.__name__


async def test_a_queues_level_is_the_default_of_its_calls_workers_and_claims(
    pool, schema_name: str, registry: Registry, kinds
) -> None:
    relaxed = await JobQueue.connect(
        pool=pool, schema=schema_name, registry=registry, durability="async"
    )
    await relaxed.migrate()
    assert relaxed.durability is Durability.ASYNC
    assert relaxed.worker().durability is Durability.ASYNC
    assert relaxed.worker(durability="durable").durability is Durability.DURABLE

    async def default(conn) -> None:
        await relaxed.enqueue("item", {}, connection=conn)

    async def overridden(conn) -> None:
        await relaxed.enqueue("item", {}, connection=conn, durability="durable")

    assert await _commit_mode_after(relaxed, default) == "off"
    assert await _commit_mode_after(relaxed, overridden) == "on"


async def test_an_outcome_write_sets_its_transactions_commit_mode(jobs: JobQueue, kinds) -> None:
    await jobs.enqueue("item", {})
    await jobs.enqueue("item", {})
    claimed = await jobs.db.fetch("claim", ["default"], ["item"], 2, 30.0, 0)
    for row, commit, expected in zip(claimed, (None, "off"), ("on", "off"), strict=True):
        outcome = Outcome(row["id"], row["lock_token"], "completed", output_json="1")

        async def finish(conn, outcome=outcome, commit=commit) -> None:
            assert await write_outcomes(jobs.db, [outcome], conn, commit) == {outcome.job_id}

        assert await _commit_mode_after(jobs, finish) == expected


async def test_an_unknown_level_names_the_option(jobs: JobQueue, kinds) -> None:
    with pytest.raises(InvalidOption, match=r"durability.*'durable' or 'async'"):
        await jobs.enqueue("item", {}, durability="fsync")
    with pytest.raises(InvalidOption, match="durability"):
        jobs.worker(durability="sometimes")
    with pytest.raises(InvalidOption, match="durability"):
        await JobQueue.connect(pool=jobs.pool, schema=jobs.schema, durability=True)
