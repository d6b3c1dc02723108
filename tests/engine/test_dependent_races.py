"""A dependent's count of open prerequisites stays exact when its prerequisites end in
overlapping transactions: finishes, cancels, purges, rescues and re-drives, in both commit
orders. Each test interleaves two connections deterministically (tests/interleave.py); the
stress test at the end runs many flows through several workers at once."""

from __future__ import annotations

import asyncio
from typing import Any

import pydantic
import pytest

from pgjobs import (
    EdgePolicy,
    Flow,
    ImportedEdge,
    ImportedJob,
    InvalidFlow,
    JobContext,
    JobFilter,
    JobQueue,
    JobSpec,
    Registry,
)
from pgjobs.completer import write_outcomes, write_outcomes_refusing
from pgjobs.outcomes import Outcome
from tests.helpers import expire_lease
from tests.interleave import overlap


class Item(pydantic.BaseModel):
    n: int = 0


@pytest.fixture
def kinds(registry: Registry) -> None:
    @registry.kind("x", input=Item, max_attempts=1)
    async def x(ctx: JobContext, item: Item) -> int:
        return item.n


async def _flow(jobs: JobQueue, policy: EdgePolicy = EdgePolicy.BLOCK, children: int = 2) -> Any:
    flow = Flow("race")
    flow.add("parent", "x", {"n": -1})
    for i in range(children):
        flow.add(f"child{i}", "x", {"n": i})
        flow.edge(f"child{i}", "parent", policy)
    return await jobs.submit_flow(flow)


async def _claim_children(jobs: JobQueue, count: int = 2) -> list[Any]:
    claimed = await jobs.db.fetch("claim", ["default"], ["x"], count, 30.0, 0)
    assert len(claimed) == count
    return sorted(claimed, key=lambda r: r["id"])


def _finish(jobs: JobQueue, row: Any, status: str = "completed"):
    async def write(conn: Any) -> set[int]:
        error = None if status == "completed" else '{"message": "boom"}'
        outcome = Outcome(row["id"], row["lock_token"], status, output_json="1", error_json=error)  # type: ignore[arg-type]
        return await write_outcomes(jobs.db, [outcome], conn)

    return write


async def _parent(jobs: JobQueue, submitted: Any) -> Any:
    return await jobs.get(submitted.job_ids["parent"])


@pytest.mark.parametrize("second_commits_first", [False, True])
async def test_two_prerequisites_finishing_together_release_their_dependent(
    jobs: JobQueue, kinds, second_commits_first: bool
) -> None:
    """The second finish waits for the first's lock on the dependent; when it resumes, its
    statement's snapshot predates the first commit. The count must still reach 0."""
    submitted = await _flow(jobs)
    one, two = await _claim_children(jobs)
    _, _, waited = await overlap(
        jobs.pool,
        _finish(jobs, one),
        _finish(jobs, two),
        second_commits_first=second_commits_first,
    )
    assert waited  # both write the dependent's row
    parent = await _parent(jobs, submitted)
    assert parent.pending_deps == 0 and parent.sub_state == "ready"
    await jobs.worker().run(until_drained=True)
    assert (await _parent(jobs, submitted)).status == "completed"


@pytest.mark.parametrize("policy", [EdgePolicy.IGNORE, EdgePolicy.CASCADE, EdgePolicy.CONTINUE])
async def test_a_finish_and_a_cancel_of_two_prerequisites_overlap(
    jobs: JobQueue, kinds, policy: EdgePolicy
) -> None:
    submitted = await _flow(jobs, policy)
    one, _ = await _claim_children(jobs)

    async def cancel_other(conn: Any) -> list[int]:
        return await jobs.cancel(submitted.job_ids["child1"], connection=conn)

    await overlap(jobs.pool, _finish(jobs, one), cancel_other)
    parent = await _parent(jobs, submitted)
    if policy is EdgePolicy.CASCADE:
        assert parent.status == "cancelled"
    else:
        assert parent.pending_deps == 0 and parent.sub_state == "ready"


async def test_a_finish_and_a_purge_of_two_prerequisites_overlap(jobs: JobQueue, kinds) -> None:
    submitted = await _flow(jobs)
    one, two = await _claim_children(jobs)

    async def purge_other(conn: Any) -> Any:
        return await jobs.purge(JobFilter(ids=(two["id"],)), running="cancel", connection=conn)

    await overlap(jobs.pool, _finish(jobs, one), purge_other)
    parent = await _parent(jobs, submitted)
    assert parent.pending_deps == 0 and parent.sub_state == "ready"


@pytest.mark.parametrize("second_commits_first", [False, True])
async def test_a_rescue_to_dead_and_a_finish_overlap(
    jobs: JobQueue, kinds, second_commits_first: bool
) -> None:
    """One prerequisite dies of its last lease (ignore policy) while its sibling completes."""
    submitted = await _flow(jobs, EdgePolicy.IGNORE)
    one, two = await _claim_children(jobs)
    await expire_lease(jobs, two["id"])

    async def rescue(conn: Any) -> Any:
        return await jobs.db.fetch("rescue_stalled", 10, "unused_channel", conn=conn)

    await overlap(jobs.pool, _finish(jobs, one), rescue, second_commits_first=second_commits_first)
    assert (await jobs.get(two["id"])).status == "dead"
    parent = await _parent(jobs, submitted)
    assert parent.pending_deps == 0 and parent.sub_state == "ready"


async def test_a_redrive_of_a_cancelled_dependent_overlapping_its_prerequisites_finish(
    jobs: JobQueue, kinds
) -> None:
    """The dependent was cancelled while its prerequisite ran; an operator re-drives it while
    the prerequisite completes. It must not be left counting an edge that is satisfied."""
    submitted = await _flow(jobs, children=1)
    (child,) = await _claim_children(jobs, 1)
    assert await jobs.cancel(submitted.job_ids["parent"])

    async def redrive(conn: Any) -> list[int]:
        return await jobs.requeue_finished(
            JobFilter(ids=(submitted.job_ids["parent"],)), connection=conn
        )

    _, redriven, waited = await overlap(jobs.pool, _finish(jobs, child), redrive)
    assert waited and redriven == [submitted.job_ids["parent"]]
    parent = await _parent(jobs, submitted)
    assert parent.pending_deps == 0 and parent.sub_state == "ready"


@pytest.mark.parametrize("second_commits_first", [False, True])
async def test_attaching_a_running_prerequisite_overlapping_its_finish(
    jobs: JobQueue, kinds, second_commits_first: bool
) -> None:
    """A job key names a running job that a waiting job is given as a new prerequisite; the
    running job completes while the edge is added. The dependent must not wait for a
    prerequisite that is already done."""
    await jobs.enqueue("x", {"n": 7}, job_key="shared")
    (running,) = await _claim_children(jobs, 1)
    dependent = await jobs.enqueue("x", {"n": 8})

    async def attach(conn: Any) -> Any:
        return await jobs.add_prerequisite(
            dependent.id, "x", {"n": 7}, job_key="shared", connection=conn
        )

    _, attached, _ = await overlap(
        jobs.pool, _finish(jobs, running), attach, second_commits_first=second_commits_first
    )
    assert attached.id == running["id"] and attached.duplicate
    row = await jobs.get(dependent.id)
    assert row.pending_deps == 0 and row.sub_state == "ready"


@pytest.mark.parametrize("second_commits_first", [False, True])
async def test_importing_a_dependent_of_a_running_job_overlapping_its_finish(
    jobs: JobQueue, kinds, second_commits_first: bool
) -> None:
    """An import adds a job waiting for an existing running job, which completes meanwhile."""
    await jobs.enqueue("x", {"n": 1})
    (running,) = await _claim_children(jobs, 1)

    async def import_dependent(conn: Any) -> Any:
        return await jobs.import_jobs(
            [ImportedJob(JobSpec("x", {"n": 2}), handle="d")],
            [ImportedEdge(running["id"], "d")],
            connection=conn,
        )

    _, (imported,), _ = await overlap(
        jobs.pool,
        _finish(jobs, running),
        import_dependent,
        second_commits_first=second_commits_first,
    )
    row = await jobs.get(imported.id)
    assert row.pending_deps == 0 and row.sub_state == "ready"


@pytest.mark.parametrize("second_commits_first", [False, True])
async def test_detaching_a_prerequisite_overlapping_its_own_finish(
    jobs: JobQueue, kinds, second_commits_first: bool
) -> None:
    """The edge leaves the count once, whether the finish or the detach moves it first."""
    submitted = await _flow(jobs)
    one, _ = await _claim_children(jobs)

    async def detach(conn: Any) -> bool:
        return await jobs.remove_dependency(one["id"], submitted.job_ids["parent"], connection=conn)

    _, detached, waited = await overlap(
        jobs.pool, _finish(jobs, one), detach, second_commits_first=second_commits_first
    )
    assert waited and detached  # the finish held the edge's lock; the edge is gone after it
    parent = await _parent(jobs, submitted)
    assert parent.pending_deps == 1 and parent.sub_state == "waiting_children"
    assert [d["id"] for d in await jobs.dependents_of(one["id"])] == []


@pytest.mark.parametrize("second_commits_first", [False, True])
async def test_detaching_one_prerequisite_while_its_sibling_finishes(
    jobs: JobQueue, kinds, second_commits_first: bool
) -> None:
    """The detach and the sibling's finish both take one off the dependent: it runs."""
    submitted = await _flow(jobs)
    one, two = await _claim_children(jobs)

    async def detach(conn: Any) -> bool:
        return await jobs.remove_dependency(two["id"], submitted.job_ids["parent"], connection=conn)

    _, detached, _ = await overlap(
        jobs.pool, _finish(jobs, one), detach, second_commits_first=second_commits_first
    )
    assert detached
    parent = await _parent(jobs, submitted)
    assert parent.pending_deps == 0 and parent.sub_state == "ready"


async def test_many_siblings_of_many_parents_finish_concurrently(
    jobs: JobQueue, registry: Registry
) -> None:
    """Stress: 60 flows of 1 parent and 8 children, four workers claiming one job at a time so
    that siblings' outcomes are written by different workers at the same moments. Every parent
    runs exactly once, after all its children."""
    finished: dict[int, float] = {}
    parent_runs: dict[int, int] = {}
    loop = asyncio.get_running_loop()

    @registry.kind("leaf", input=Item, max_attempts=1)
    async def leaf(ctx: JobContext, item: Item) -> int:
        finished[ctx.id] = loop.time()
        return item.n

    @registry.kind("root", input=Item, max_attempts=1)
    async def root(ctx: JobContext, item: Item) -> int:
        parent_runs[ctx.id] = parent_runs.get(ctx.id, 0) + 1
        children = await ctx.prerequisites()
        assert all(c["status"] == "completed" for c in children)
        assert all(finished[c["id"]] <= loop.time() for c in children)
        return item.n

    flows = []
    for f in range(60):
        flow = Flow(f"stress-{f}")
        flow.add("parent", "root", {"n": f})
        for c in range(8):
            flow.add(f"c{c}", "leaf", {"n": c})
            flow.edge(f"c{c}", "parent")
        flows.append(await jobs.submit_flow(flow))
    workers = [jobs.worker(concurrency=4, claim_ahead=0) for _ in range(4)]
    await asyncio.gather(*(w.run(until_drained=True) for w in workers))
    parents = [s.job_ids["parent"] for s in flows]
    assert sorted(parent_runs) == sorted(parents)
    assert set(parent_runs.values()) == {1}
    left = await jobs.pool.fetchval(
        f"SELECT count(*) FROM {jobs.schema}.jobs WHERE status <> 'completed'"
    )
    assert left == 0


@pytest.mark.parametrize("attach_first", [True, False])
async def test_a_completion_and_an_attach_to_the_running_job_overlap(
    jobs: JobQueue, kinds, attach_first: bool
) -> None:
    """A prerequisite attached to a running job while it completes: the completion is decided
    on the job's locked row. Attach first: the completion waits for it, then is refused (the
    job stays running). Completion first: the attach waits, and finds the job completed."""
    await jobs.enqueue("x", {"n": 1})
    [row] = await _claim_children(jobs, 1)
    child = await jobs.enqueue("x", {"n": 2}, delay=3600)

    async def attach(conn: Any) -> None:
        await jobs.add_dependency(child.id, row["id"], connection=conn)

    async def complete(conn: Any) -> tuple[set[int], set[int]]:
        outcome = Outcome(row["id"], row["lock_token"], "completed", output_json="1")
        return await write_outcomes_refusing(jobs.db, [outcome], conn)

    if attach_first:
        _, (written, refused), waited = await overlap(jobs.pool, attach, complete)
        assert waited and written == set() and refused == {row["id"]}
        job = await jobs.get(row["id"])
        assert job is not None and job.status == "running" and job.pending_deps == 1
    else:
        with pytest.raises(InvalidFlow, match="completed"):
            await overlap(jobs.pool, complete, attach)
        job = await jobs.get(row["id"])
        assert job is not None and job.status == "completed" and job.pending_deps == 0
