"""A completed prerequisite deleted while its satisfied edge stands (a retention rule, a purge,
the GC) leaves the edge with what the dependent reads of it (kind, name, queue, job key,
output), as BullMQ keeps a removed child's value in its parent's processed set; the edge goes
with its dependent. Overlaps of that deletion with the dependent's own removal and with its
reads, and a stress run."""

from __future__ import annotations

import asyncio
from typing import Any

import pydantic
import pytest

from pgjobs import Flow, JobContext, JobFilter, JobQueue, Keep, Registry
from pgjobs.completer import write_outcomes
from pgjobs.outcomes import Outcome
from tests.interleave import overlap


class Item(pydantic.BaseModel):
    n: int = 0


@pytest.fixture
def kinds(registry: Registry) -> None:
    @registry.kind("x", input=Item, max_attempts=1)
    async def x(ctx: JobContext, item: Item) -> Any:
        return {"n": item.n, "prerequisites": [p["output"] for p in await ctx.prerequisites()]}


async def _edges(jobs: JobQueue) -> list[Any]:
    return list(
        await jobs.pool.fetch(
            f"SELECT prerequisite_id, dependent_id, state, removed_prerequisite IS NOT NULL AS kept"
            f" FROM {jobs.db.schema}.job_edges ORDER BY 1, 2"
        )
    )


async def _flow(
    jobs: JobQueue, keep: Keep | None = None, children: int = 2, keyed: bool = True
) -> Any:
    flow = Flow("kept")
    flow.add("parent", "x", {"n": 0})
    for i in range(1, children + 1):
        key = f"key{i}" if keyed else None
        flow.add(f"child{i}", "x", {"n": i}, job_key=key, keep_completed=keep)
        flow.edge(f"child{i}", "parent")
    return await jobs.submit_flow(flow)


async def test_children_removed_at_completion_leave_their_outputs_to_the_parent(
    jobs: JobQueue, kinds
) -> None:
    submitted = await _flow(jobs, Keep(count=0))
    await jobs.worker().run(until_drained=True)
    ids = submitted.job_ids
    assert await jobs.get(ids["child1"]) is None and await jobs.get(ids["child2"]) is None
    parent = await jobs.get(ids["parent"])
    assert parent is not None and parent.status == "completed"
    assert parent.output["prerequisites"] == [
        {"n": 1, "prerequisites": []},
        {"n": 2, "prerequisites": []},
    ]
    read = await jobs.prerequisite_results(ids["parent"])
    assert [(r["id"], r["kind"], r["name"], r["queue"], r["job_key"]) for r in read] == [
        (ids["child1"], "x", "x", "default", "key1"),
        (ids["child2"], "x", "x", "default", "key2"),
    ]
    assert all(r["status"] == "completed" and r["state"] == "satisfied" for r in read)
    # the graph shows the jobs there are; the parent's deletion takes the kept edges
    view = await jobs.flow_view(submitted.flow_id)
    assert view is not None and view.edges == []
    await jobs.purge(JobFilter(ids=(ids["parent"],)))
    assert await _edges(jobs) == []


async def test_children_purged_after_the_parent_completed_keep_their_outputs(
    jobs: JobQueue, kinds
) -> None:
    submitted = await _flow(jobs)
    await jobs.worker().run(until_drained=True)
    ids = submitted.job_ids
    await jobs.purge(JobFilter(ids=(ids["child1"],)))
    read = {r["id"]: r for r in await jobs.prerequisite_results(ids["parent"])}
    assert read[ids["child1"]]["output"] == {"n": 1, "prerequisites": []}
    assert read[ids["child2"]]["output"] == {"n": 2, "prerequisites": []}
    assert [e["kept"] for e in await _edges(jobs)] == [True, False]


async def test_an_edge_not_satisfied_goes_with_its_prerequisite(jobs: JobQueue, kinds) -> None:
    submitted = await _flow(jobs, children=1)
    await jobs.purge(JobFilter(ids=(submitted.job_ids["child1"],)))  # open: released, gone
    assert await _edges(jobs) == []
    parent = await jobs.get(submitted.job_ids["parent"])
    assert parent is not None and parent.pending_deps == 0


async def test_a_rerun_clones_only_the_edges_of_jobs_there_are(jobs: JobQueue, kinds) -> None:
    submitted = await _flow(jobs)
    await jobs.worker().run(until_drained=True)
    await jobs.purge(JobFilter(ids=(submitted.job_ids["child1"],)))
    again = await jobs.rerun_flow(submitted.flow_id)
    parent = await jobs.get(again.job_ids[str(submitted.job_ids["parent"])])
    assert parent is not None and parent.pending_deps == 1  # child2's clone only
    await jobs.worker().run(until_drained=True)
    parent = await jobs.get(parent.id)
    assert parent is not None and parent.status == "completed"


@pytest.mark.parametrize("second_commits_first", [False, True])
async def test_a_prerequisite_and_its_dependent_deleted_together(
    jobs: JobQueue, kinds, second_commits_first: bool
) -> None:
    """The child's deletion keeps its edge while the parent's deletion takes it: whichever
    commits first, no edge is left naming two jobs that are gone."""
    submitted = await _flow(jobs, children=1)
    await jobs.worker().run(until_drained=True)
    ids = submitted.job_ids

    def purge(job_id: int) -> Any:
        async def run(conn: Any) -> Any:
            return await jobs.purge(JobFilter(ids=(job_id,)), connection=conn)

        return run

    await overlap(
        jobs.pool,
        purge(ids["child1"]),
        purge(ids["parent"]),
        second_commits_first=second_commits_first,
    )
    assert await _edges(jobs) == []


async def test_a_completion_and_a_removal_of_the_prerequisite_overlap(
    jobs: JobQueue, kinds
) -> None:
    """The child completes (its edge satisfied) in one transaction while a purge of it waits:
    the purge then keeps the satisfied edge with the output it reads on the deleted row."""
    submitted = await _flow(jobs, children=1)
    [child] = await jobs.db.fetch("claim", ["default"], ["x"], 1, 30.0, 0)
    assert child["id"] == submitted.job_ids["child1"]

    async def complete(conn: Any) -> set[int]:
        outcome = Outcome(child["id"], child["lock_token"], "completed", output_json='"v"')
        return await write_outcomes(jobs.db, [outcome], conn)

    async def purge(conn: Any) -> Any:
        return await jobs.purge(JobFilter(ids=(child["id"],)), running="cancel", connection=conn)

    _, _, waited = await overlap(jobs.pool, complete, purge)
    assert waited
    [read] = await jobs.prerequisite_results(submitted.job_ids["parent"])
    assert (read["output"], read["state"]) == ("v", "satisfied")


async def test_stress_children_removed_as_they_complete(jobs: JobQueue, kinds) -> None:
    """Flows whose children go at completion, run by several workers at once: every parent
    reads every child's output."""
    flows = [await _flow(jobs, Keep(count=0), children=3, keyed=False) for _ in range(15)]
    workers = [jobs.worker(concurrency=4) for _ in range(3)]
    await asyncio.gather(*(w.run(until_drained=True) for w in workers))
    for submitted in flows:
        parent = await jobs.get(submitted.job_ids["parent"])
        assert parent is not None and parent.status == "completed"
        assert [p["n"] for p in parent.output["prerequisites"]] == [1, 2, 3]
    assert await jobs.pool.fetchval(f"SELECT count(*) FROM {jobs.db.schema}.jobs") == 15
