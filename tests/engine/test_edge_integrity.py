"""job_edges without foreign keys (sql/schema/job_edges_integrity.sql): a deleted job takes its
edges with it, and an edge is never written to a job that is gone, whatever commits in between."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from pgjobs import Flow, InvalidFlow, JobFilter, JobQueue, Registry
from tests.interleave import overlap


@pytest.fixture
def plain(registry: Registry) -> str:
    registry.declare("plain", input=Any, queue="edges")
    return "plain"


async def edges(jobs: JobQueue) -> list[tuple[int, int, str]]:
    rows = await jobs.db.pool.fetch(
        f"SELECT prerequisite_id, dependent_id, state FROM {jobs.schema}.job_edges ORDER BY 1, 2"
    )
    return [tuple(row) for row in rows]  # type: ignore[misc]


async def orphans(jobs: JobQueue) -> int:
    """Edges naming a job that does not exist."""
    return await jobs.db.pool.fetchval(
        f"SELECT count(*) FROM {jobs.schema}.job_edges e"
        f" WHERE NOT EXISTS (SELECT FROM {jobs.schema}.jobs p WHERE p.id = e.prerequisite_id)"
        f"    OR NOT EXISTS (SELECT FROM {jobs.schema}.jobs d WHERE d.id = e.dependent_id)"
    )


async def miscounted(jobs: JobQueue) -> list[int]:
    """Pending jobs whose pending_deps is not their number of open or blocked edges."""
    rows = await jobs.db.pool.fetch(
        f"SELECT d.id FROM {jobs.schema}.jobs d WHERE d.status = 'pending' AND d.pending_deps"
        f" <> (SELECT count(*) FROM {jobs.schema}.job_edges e"
        f"     WHERE e.dependent_id = d.id AND e.state IN ('open', 'blocked'))"
    )
    return [row["id"] for row in rows]


async def chain(jobs: JobQueue, kind: str) -> dict[str, int]:
    """a -> b -> c, all pending (a due in an hour, so nothing claims it)."""
    flow = Flow()
    for label in "abc":
        flow.add(label, kind, {"label": label}, delay=3600)
    flow.edge("a", "b")
    flow.edge("b", "c")
    return (await jobs.submit_flow(flow)).job_ids


async def test_deleting_a_job_deletes_its_edges_at_either_end(jobs: JobQueue, plain: str) -> None:
    ids = await chain(jobs, plain)
    assert await edges(jobs) == [(ids["a"], ids["b"], "open"), (ids["b"], ids["c"], "open")]
    result = await jobs.purge(JobFilter(ids=(ids["b"],)))
    assert result.deleted == 1
    assert await edges(jobs) == []  # b was the dependent of one and the prerequisite of other
    # a statement deleting several jobs at once, and one deleting none
    more = await chain(jobs, plain)
    await jobs.db.pool.execute(f"DELETE FROM {jobs.schema}.jobs WHERE id = -1")
    assert len(await edges(jobs)) == 2
    await jobs.db.pool.execute(
        f"DELETE FROM {jobs.schema}.jobs WHERE id = ANY($1::bigint[])", [more["a"], more["c"]]
    )
    assert await edges(jobs) == []
    await chain(jobs, plain)
    await jobs.db.pool.execute(f"TRUNCATE {jobs.schema}.jobs CASCADE")  # job_logs refers
    assert await edges(jobs) == []
    await chain(jobs, plain)  # a TRUNCATE naming both tables (a test's reset, say)
    await jobs.db.pool.execute(f"TRUNCATE {jobs.schema}.jobs, {jobs.schema}.job_edges CASCADE")
    assert (
        await edges(jobs) == []
        and await jobs.db.pool.fetchval(f"SELECT count(*) FROM {jobs.schema}.jobs") == 0
    )


async def test_a_dependency_on_a_job_that_is_gone_is_refused(jobs: JobQueue, plain: str) -> None:
    ids = await chain(jobs, plain)
    with pytest.raises(InvalidFlow, match=f"no job {10**9} to depend on"):
        await jobs.add_dependency(10**9, ids["c"])
    assert await orphans(jobs) == 0 and len(await edges(jobs)) == 2
    row = await jobs.get(ids["c"])
    assert row is not None and row.pending_deps == 1


async def test_a_purge_waits_for_a_dependency_being_added_and_takes_its_edge(
    jobs: JobQueue, plain: str
) -> None:
    """attach first: it locks the prerequisite; the purge waits for its commit, then resolves
    and deletes the new edge with the job (the dependent counts nothing for it)."""
    ids = await chain(jobs, plain)
    lone = (await jobs.enqueue(plain, {}, delay=3600)).id

    async def attach(conn: Any) -> None:
        await jobs.add_dependency(lone, ids["a"], connection=conn)

    async def purge(conn: Any) -> int:
        return (await jobs.purge(JobFilter(ids=(lone,)), connection=conn)).deleted

    _, deleted, waited = await overlap(jobs.db.pool, attach, purge)
    assert waited and deleted == 1
    assert await orphans(jobs) == 0
    assert [e for e in await edges(jobs) if lone in e[:2]] == []
    assert await miscounted(jobs) == []
    row = await jobs.get(ids["a"])
    assert row is not None and row.pending_deps == 0


async def test_a_dependency_added_while_its_prerequisite_is_purged_is_refused(
    jobs: JobQueue, plain: str
) -> None:
    """purge first: the attach waits for the purge's lock, then finds no job and writes
    nothing (with a foreign key gone, only the attach's own check stops an orphan edge)."""
    ids = await chain(jobs, plain)
    lone = (await jobs.enqueue(plain, {}, delay=3600)).id

    async def purge(conn: Any) -> int:
        return (await jobs.purge(JobFilter(ids=(lone,)), connection=conn)).deleted

    async def attach(conn: Any) -> None:
        await jobs.add_dependency(lone, ids["a"], connection=conn)

    with pytest.raises(InvalidFlow, match=f"no job {lone}"):
        await overlap(jobs.db.pool, purge, attach)
    assert await jobs.get(lone) is None
    assert await orphans(jobs) == 0 and len(await edges(jobs)) == 2
    assert await miscounted(jobs) == []


async def test_stress_dependencies_added_while_jobs_are_purged(jobs: JobQueue, plain: str) -> None:
    """Four tasks add dependencies between random jobs while two purge random jobs: at the end
    no edge names a missing job and every pending job counts exactly its open edges."""
    pool_ids = [(await jobs.enqueue(plain, {"i": i}, delay=3600)).id for i in range(60)]
    rng = random.Random(17)
    refused = added = purged = 0

    async def adder() -> None:
        nonlocal refused, added
        for _ in range(40):
            pre, dep = rng.sample(pool_ids, 2)
            try:
                await jobs.add_dependency(pre, dep)
                added += 1
            except InvalidFlow:  # a job gone, or a cycle (FlowCycle)
                refused += 1

    async def purger() -> None:
        nonlocal purged
        for _ in range(10):
            purged += (await jobs.purge(JobFilter(ids=(rng.choice(pool_ids),)))).deleted
            await asyncio.sleep(0)

    await asyncio.gather(*(adder() for _ in range(4)), purger(), purger())
    assert added > 0 and purged > 0
    assert await orphans(jobs) == 0
    assert await miscounted(jobs) == []


async def test_a_tenant_cannot_depend_on_another_tenants_job(jobs: JobQueue, plain: str) -> None:
    """Another tenant's job is refused as a prerequisite exactly like a missing one (its
    existence is not revealed); a caller acting for every tenant may link them."""
    mine = (await jobs.enqueue(plain, {}, delay=3600, tenant="a")).id
    theirs = (await jobs.enqueue(plain, {}, delay=3600, tenant="b")).id
    with pytest.raises(InvalidFlow, match=f"no job {theirs} to depend on"):
        await jobs.add_dependency(theirs, mine, tenant="a")
    assert await edges(jobs) == []
    await jobs.add_dependency(theirs, mine, any_tenant=True)
    assert await edges(jobs) == [(theirs, mine, "open")]
    # removing the edge is scoped the same way: neither tenant alone may, nor the default
    for tenant in ("a", "b", None):
        assert not await jobs.remove_dependency(theirs, mine, tenant=tenant)
    assert await edges(jobs) == [(theirs, mine, "open")]
    # what a job's prerequisites produced is read only for the dependent's own tenant
    assert [p["id"] for p in await jobs.prerequisite_results(mine, tenant="a")] == [theirs]
    assert await jobs.prerequisite_results(mine, tenant="b") == []
    assert await jobs.prerequisite_results(mine) == []
    assert len(await jobs.prerequisite_results(mine, any_tenant=True)) == 1
    assert await jobs.remove_dependency(theirs, mine, any_tenant=True)
    assert await edges(jobs) == []
    same = (await jobs.enqueue(plain, {}, delay=3600, tenant="a")).id
    await jobs.add_dependency(same, mine, tenant="a")
    assert not await jobs.remove_dependency(same, mine)  # the default is the jobs without one
    assert await jobs.remove_dependency(same, mine, tenant="a")
    row = await jobs.get(mine, tenant="a")
    assert row is not None and row.pending_deps == 0
