"""The cascade_deferred edge policy (BullMQ's failParentOnFailure): a prerequisite that dies
makes its pending dependent claimable with a deferred failure, which the worker of the
dependent's queue records without running the handler; the dependent's own dependents are
resolved then. Through a handler's failure and through a stall; several levels; races of the
deferral against a cancel or a removal of the dependent (two connections, both orders); a
stress run."""

from __future__ import annotations

import asyncio
from typing import Any

import pydantic
import pytest

from pgjobs import (
    EdgePolicy,
    Fatal,
    Flow,
    JobContext,
    JobFilter,
    JobQueue,
    Keep,
    Registry,
    Status,
    SubState,
)
from pgjobs.completer import write_outcomes
from pgjobs.config import notify_channel
from pgjobs.outcomes import Outcome
from tests.helpers import expire_lease
from tests.interleave import overlap

DEFERRED = EdgePolicy.CASCADE_DEFERRED


class Item(pydantic.BaseModel):
    label: str = ""
    fail: bool = False


@pytest.fixture
def ran(registry: Registry) -> list[str]:
    """Kind ``x`` (fails when asked) in every queue a test names; the labels it ran, in order."""
    order: list[str] = []

    @registry.kind("x", input=Item, max_attempts=1)
    async def x(ctx: JobContext, item: Item) -> str:
        if item.fail:
            raise Fatal(f"{item.label} failed")
        order.append(item.label)
        return item.label

    return order


def node(flow: Flow, label: str, fail: bool = False, **options: Any) -> str:
    return flow.add(label, "x", {"label": label, "fail": fail}, name=label, **options)


async def drain(jobs: JobQueue, *queues: str) -> None:
    await jobs.worker(concurrency=4, queues=list(queues or ["default"])).run(until_drained=True)


async def row(jobs: JobQueue, job_id: int) -> Any:
    found = await jobs.get(job_id)
    assert found is not None
    return found


async def edge_states(jobs: JobQueue, dependent: int) -> dict[int, str]:
    rows = await jobs.pool.fetch(
        f"SELECT prerequisite_id, state FROM {jobs.schema}.job_edges WHERE dependent_id = $1",
        dependent,
    )
    return {r["prerequisite_id"]: r["state"] for r in rows}


async def test_a_failed_prerequisite_hands_its_dependent_to_its_worker(
    jobs: JobQueue, ran: list[str]
) -> None:
    """The dependent (in queue "parents") becomes claimable at once, its other prerequisite
    still pending and its delay cut short, carrying the deferred failure; only a worker of its
    queue fails it, unrun, with the failure naming the prerequisite by id, queue and key."""
    flow = Flow()
    node(flow, "root", fail=True, job_key="the-root")
    node(flow, "slow", queue="held")
    node(flow, "parent", queue="parents", delay=3600)
    flow.edge("root", "parent", DEFERRED)
    flow.edge("slow", "parent", DEFERRED)
    ids = (await jobs.submit_flow(flow)).job_ids
    await drain(jobs)  # the root fails; no worker of "parents" yet
    parent = await row(jobs, ids["parent"])
    assert parent.status is Status.PENDING and parent.sub_state is SubState.READY
    assert parent.pending_deps == 0
    error = parent.last_error
    assert error["deferred"] is True and error["type"] == "DependencyFailed"
    assert (error["prerequisite"], error["prerequisite_queue"], error["prerequisite_key"]) == (
        ids["root"],
        "default",
        "the-root",
    )
    assert await edge_states(jobs, ids["parent"]) == {
        ids["root"]: "failed",
        ids["slow"]: "released",
    }
    [ctx] = await jobs.claim(["parents"], kinds=["x"])
    assert ctx.deferred_failure is not None and ctx.deferred_failure["prerequisite"] == ids["root"]
    await ctx.release()  # given back unrun: the deferred failure stays for the next claim
    await drain(jobs, "parents")
    parent = await row(jobs, ids["parent"])
    assert parent.status is Status.DEAD and "deferred" not in parent.last_error
    assert parent.last_error["prerequisite"] == ids["root"]
    assert ran == []  # neither the parent nor anything else ran


async def test_a_completed_prerequisite_or_a_cancelled_one(jobs: JobQueue, ran: list[str]) -> None:
    """A completion releases the edge as any policy does; a cancellation cancels the dependent
    at once, as cascade does (there is no failure for a worker to record)."""
    flow = Flow()
    node(flow, "done")
    node(flow, "held", queue="held")
    node(flow, "parent")
    flow.edge("done", "parent", DEFERRED)
    flow.edge("held", "parent", DEFERRED)
    ids = (await jobs.submit_flow(flow)).job_ids
    await drain(jobs)
    assert (await row(jobs, ids["parent"])).pending_deps == 1
    assert await jobs.cancel(ids["held"])
    parent = await row(jobs, ids["parent"])
    assert parent.status is Status.CANCELLED and parent.last_error["prerequisite"] == ids["held"]
    assert ran == ["done"]


async def test_a_removed_prerequisite_cancels_the_dependent(jobs: JobQueue, ran: list[str]) -> None:
    flow = Flow()
    node(flow, "held", queue="held")
    node(flow, "parent")
    flow.edge("held", "parent", DEFERRED)
    ids = (await jobs.submit_flow(flow)).job_ids
    assert (await jobs.purge(JobFilter(ids=(ids["held"],)))).deleted == 1
    assert (await row(jobs, ids["parent"])).status is Status.CANCELLED


async def test_a_stall_past_the_budget_fails_the_dependent_through_its_worker(
    jobs: JobQueue, ran: list[str]
) -> None:
    """The prerequisite stalls past its queue's stall budget: its own failure is deferred, its
    worker records it, and that death defers the dependent's, which its worker records."""
    await jobs.set_max_stalls("default", 0)
    flow = Flow()
    node(flow, "child")
    node(flow, "parent", queue="parents")
    flow.edge("child", "parent", DEFERRED)
    ids = (await jobs.submit_flow(flow)).job_ids
    [claimed] = await jobs.db.fetch("claim", ["default"], ["x"], 1, 30.0, 0)
    await expire_lease(jobs, claimed["id"])
    await jobs.db.fetch("rescue_stalled", 100, notify_channel(jobs.schema))
    assert (await row(jobs, ids["parent"])).sub_state is SubState.WAITING_CHILDREN
    await drain(jobs)  # records the child's deferred stall failure
    child = await row(jobs, ids["child"])
    assert child.status is Status.DEAD
    assert child.last_error["message"] == "job stalled more than allowable limit"
    parent = await row(jobs, ids["parent"])
    assert parent.sub_state is SubState.READY and parent.last_error["deferred"] is True
    await drain(jobs, "parents")
    parent = await row(jobs, ids["parent"])
    assert parent.status is Status.DEAD and parent.last_error["prerequisite"] == ids["child"]
    assert ran == []


async def test_a_stall_on_the_last_attempt_defers_the_dependent_from_the_rescue(
    jobs: JobQueue, ran: list[str]
) -> None:
    """Without a stall budget the rescue kills the prerequisite itself: the dependent's failure
    is deferred in the rescue's transaction."""
    flow = Flow()
    node(flow, "child")
    node(flow, "parent", queue="parents")
    flow.edge("child", "parent", DEFERRED)
    ids = (await jobs.submit_flow(flow)).job_ids
    [claimed] = await jobs.db.fetch("claim", ["default"], ["x"], 1, 30.0, 0)
    await expire_lease(jobs, claimed["id"])
    rescued = await jobs.db.fetch("rescue_stalled", 100, notify_channel(jobs.schema))
    assert [r["status"] for r in rescued] == ["dead"]
    parent = await row(jobs, ids["parent"])
    assert parent.sub_state is SubState.READY and parent.last_error["prerequisite"] == ids["child"]
    await drain(jobs, "parents")
    assert (await row(jobs, ids["parent"])).status is Status.DEAD
    assert ran == []


async def test_each_level_fails_when_the_one_below_is_recorded(
    jobs: JobQueue, ran: list[str]
) -> None:
    """root -> parent -> grandparent, all cascade_deferred, each level in its own queue: the
    grandparent keeps waiting until the parent's deferred failure is recorded, then is handed
    to its own worker, naming the parent."""
    flow = Flow()
    node(flow, "root", fail=True)
    node(flow, "parent", queue="parents", job_key="the-parent")
    node(flow, "grandparent", queue="grandparents")
    node(flow, "uncle", queue="held")
    flow.edge("root", "parent", DEFERRED)
    flow.edge("parent", "grandparent", DEFERRED)
    flow.edge("uncle", "grandparent", DEFERRED)
    ids = (await jobs.submit_flow(flow)).job_ids
    await drain(jobs)
    assert (await row(jobs, ids["parent"])).sub_state is SubState.READY
    assert (await row(jobs, ids["grandparent"])).sub_state is SubState.WAITING_CHILDREN
    await drain(jobs, "parents")
    assert (await row(jobs, ids["parent"])).status is Status.DEAD
    grandparent = await row(jobs, ids["grandparent"])
    assert grandparent.sub_state is SubState.READY and grandparent.last_error["deferred"]
    assert grandparent.last_error["prerequisite_key"] == "the-parent"
    await drain(jobs, "grandparents")
    grandparent = await row(jobs, ids["grandparent"])
    assert grandparent.status is Status.DEAD
    assert grandparent.last_error["prerequisite"] == ids["parent"]
    assert (await row(jobs, ids["uncle"])).status is Status.PENDING
    assert ran == []


async def test_a_prerequisite_kept_for_none_goes_at_once(jobs: JobQueue, ran: list[str]) -> None:
    """A prerequisite dead under Keep(count=0) is not kept for the dependent it failed: the
    failure was copied onto it (BullMQ's removeOnFail child with failParentOnFailure)."""
    flow = Flow()
    node(flow, "root", fail=True, keep_dead=Keep(count=0), job_key="gone")
    node(flow, "parent", queue="parents")
    flow.edge("root", "parent", DEFERRED)
    ids = (await jobs.submit_flow(flow)).job_ids
    await drain(jobs)
    assert await jobs.get(ids["root"]) is None
    await drain(jobs, "parents")
    parent = await row(jobs, ids["parent"])
    assert parent.status is Status.DEAD and parent.last_error["prerequisite_key"] == "gone"


async def test_a_running_dependent_is_left_to_its_handler(jobs: JobQueue, ran: list[str]) -> None:
    """As under cascade: the edge reads failed, the running dependent is not touched."""
    parent = await jobs.enqueue("x", {"label": "parent"})
    [claimed] = await jobs.db.fetch("claim", ["default"], ["x"], 1, 30.0, 0)
    child = await jobs.enqueue("x", {"label": "child", "fail": True}, queue="children")
    await jobs.add_dependency(child.id, parent.id, policy=DEFERRED)
    await drain(jobs, "children")
    running = await row(jobs, parent.id)
    assert running.status is Status.RUNNING and running.last_error is None
    token = await jobs.pool.fetchval(
        f"SELECT lock_token FROM {jobs.schema}.jobs WHERE id = $1", parent.id
    )
    assert token == claimed["lock_token"]
    assert await edge_states(jobs, parent.id) == {child.id: "failed"}


# -- races: the deferral against a cancel or a removal of the dependent -------------------------


async def _waiting_parent(jobs: JobQueue) -> tuple[dict[str, int], Any]:
    """A parent (queue "parents") waiting for two children; the first is claimed."""
    flow = Flow()
    node(flow, "c0")
    node(flow, "c1", queue="held")
    node(flow, "parent", queue="parents")
    flow.edge("c0", "parent", DEFERRED)
    flow.edge("c1", "parent", DEFERRED)
    ids = (await jobs.submit_flow(flow)).job_ids
    [claimed] = await jobs.db.fetch("claim", ["default"], ["x"], 1, 30.0, 0)
    assert claimed["id"] == ids["c0"]
    return ids, claimed


def _child_dies(jobs: JobQueue, claimed: Any, how: str):
    async def die(conn: Any) -> Any:
        if how == "fails":
            outcome = Outcome(
                claimed["id"], claimed["lock_token"], "dead", error_json='{"message": "boom"}'
            )
            return await write_outcomes(jobs.db, [outcome], conn)
        await conn.execute(
            f"UPDATE {jobs.schema}.jobs SET locked_until = now() - interval '1 second'"
            " WHERE id = $1",
            claimed["id"],
        )
        return await jobs.db.fetch("rescue_stalled", 10, notify_channel(jobs.schema), conn=conn)

    return die


@pytest.mark.parametrize("how", ["fails", "stalls"])
@pytest.mark.parametrize("cancel_first", [False, True])
async def test_the_deferral_and_a_cancel_of_the_dependent_overlap(
    jobs: JobQueue, ran: list[str], how: str, cancel_first: bool
) -> None:
    """Whichever commits first, the cancel stands: cancelled after the deferral, or found
    cancelled by it (decided on the locked row: no deferred failure written on it)."""
    ids, claimed = await _waiting_parent(jobs)

    async def cancel(conn: Any) -> bool:
        return await jobs.cancel(ids["parent"], connection=conn)

    dies = _child_dies(jobs, claimed, how)
    first, second = (cancel, dies) if cancel_first else (dies, cancel)
    _, _, waited = await overlap(jobs.pool, first, second)
    assert waited
    assert (await row(jobs, ids["c0"])).status is Status.DEAD
    parent = await row(jobs, ids["parent"])
    assert parent.status is Status.CANCELLED
    if cancel_first:
        assert parent.last_error is None
    await drain(jobs, "parents")
    assert (await row(jobs, ids["parent"])).status is Status.CANCELLED
    assert ran == []


@pytest.mark.parametrize("how", ["fails", "stalls"])
@pytest.mark.parametrize("remove_first", [False, True])
async def test_the_deferral_and_a_removal_of_the_dependent_overlap(
    jobs: JobQueue, ran: list[str], how: str, remove_first: bool
) -> None:
    """Removal first: the deferral waits for the edge, finds it gone with the parent, and
    writes nothing. Deferral first: the removal waits for the parent's row and deletes it."""
    ids, claimed = await _waiting_parent(jobs)

    async def remove(conn: Any) -> Any:
        return await jobs.purge(JobFilter(ids=(ids["parent"],)), connection=conn)

    dies = _child_dies(jobs, claimed, how)
    first, second = (remove, dies) if remove_first else (dies, remove)
    _, _, waited = await overlap(jobs.pool, first, second)
    assert waited
    assert await jobs.get(ids["parent"]) is None
    assert (await row(jobs, ids["c0"])).status is Status.DEAD
    assert (
        await jobs.pool.fetchval(
            f"SELECT count(*) FROM {jobs.schema}.job_edges WHERE dependent_id = $1", ids["parent"]
        )
        == 0
    )


async def test_two_children_dying_together_defer_the_parent_once(
    jobs: JobQueue, ran: list[str]
) -> None:
    """Both children of one parent die in overlapping transactions: the parent is handed over
    once, with the first death's failure; its count ends at 0."""
    flow = Flow()
    node(flow, "c0")
    node(flow, "c1")
    node(flow, "parent", queue="parents")
    flow.edge("c0", "parent", DEFERRED)
    flow.edge("c1", "parent", DEFERRED)
    ids = (await jobs.submit_flow(flow)).job_ids
    one, two = sorted(
        await jobs.db.fetch("claim", ["default"], ["x"], 2, 30.0, 0), key=lambda r: r["id"]
    )
    _, _, waited = await overlap(
        jobs.pool, _child_dies(jobs, one, "fails"), _child_dies(jobs, two, "fails")
    )
    assert waited
    parent = await row(jobs, ids["parent"])
    assert parent.pending_deps == 0 and parent.sub_state is SubState.READY
    assert parent.last_error["prerequisite"] == ids["c0"]
    await drain(jobs, "parents")
    assert (await row(jobs, ids["parent"])).status is Status.DEAD


async def test_many_flows_with_failing_children_fail_their_parents_through_workers(
    jobs: JobQueue, registry: Registry
) -> None:
    """Stress: 40 flows of a grandparent, a parent and 6 children (every third flow with one
    failing child), four workers over all queues claiming one job at a time, and cancels of
    some grandparents meanwhile. A parent with a failing child never runs and dies naming a
    child; its grandparent then dies naming it (unless cancelled); the other flows complete,
    each job run once."""
    runs: dict[int, int] = {}

    @registry.kind("y", input=Item, max_attempts=1)
    async def y(ctx: JobContext, item: Item) -> str:
        runs[ctx.id] = runs.get(ctx.id, 0) + 1
        if item.fail:
            raise Fatal("boom")
        return item.label

    flows = []
    for f in range(40):
        flow = Flow(f"stress-{f}")
        flow.add("grand", "y", {"label": "grand"}, queue="grands")
        flow.add("parent", "y", {"label": "parent"}, queue="parents")
        flow.edge("parent", "grand", DEFERRED)
        for c in range(6):
            flow.add(f"c{c}", "y", {"label": f"c{c}", "fail": f % 3 == 0 and c == 3})
            flow.edge(f"c{c}", "parent", DEFERRED)
        flows.append((f, await jobs.submit_flow(flow)))
    queues = ["default", "parents", "grands"]
    workers = [jobs.worker(concurrency=2, claim_ahead=0, queues=queues) for _ in range(4)]

    async def cancel_some() -> None:
        for _, submitted in flows[1::7]:
            await jobs.cancel(submitted.job_ids["grand"])
            await asyncio.sleep(0)

    await asyncio.gather(cancel_some(), *(w.run(until_drained=True) for w in workers))
    cancelled = {f for f, _ in flows[1::7]}
    for f, submitted in flows:
        ids = submitted.job_ids
        parent, grand = await row(jobs, ids["parent"]), await row(jobs, ids["grand"])
        if f % 3 == 0:
            assert parent.status is Status.DEAD and ids["parent"] not in runs
            assert parent.last_error["prerequisite"] == ids["c3"]
            if f in cancelled:
                assert grand.status in (Status.CANCELLED, Status.DEAD)
            else:
                assert grand.status is Status.DEAD
            if grand.status is Status.DEAD:
                assert grand.last_error["prerequisite"] == ids["parent"]
                assert ids["grand"] not in runs
        else:
            assert parent.status is Status.COMPLETED and runs[ids["parent"]] == 1
            if f in cancelled:
                assert grand.status in (Status.CANCELLED, Status.COMPLETED)
            else:
                assert grand.status is Status.COMPLETED
    assert set(runs.values()) == {1}
    left = await jobs.pool.fetchval(
        f"SELECT count(*) FROM {jobs.schema}.jobs WHERE status IN ('pending', 'running')"
    )
    assert left == 0
