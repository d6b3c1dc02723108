"""DAG flows: edge policies, diamonds, cycles, priorities, rerun and requeue."""

from __future__ import annotations

import asyncio
from typing import Any

import pydantic
import pytest

from pgjobs import (
    EdgePolicy,
    Fatal,
    Flow,
    FlowConflict,
    FlowCycle,
    FlowRunning,
    InvalidFlow,
    JobContext,
    JobFilter,
    JobQueue,
    Registry,
    Status,
    WaitForPrerequisites,
)
from tests.helpers import eventually


class Step(pydantic.BaseModel):
    label: str
    fail: bool = False


@pytest.fixture
def ran(registry: Registry) -> list[str]:
    order: list[str] = []
    failing: set[str] = set()

    @registry.kind("step", input=Step, max_attempts=1)
    async def step(ctx: JobContext, data: Step) -> dict:
        if data.fail and data.label not in failing:
            failing.add(data.label)  # fails on its first run only
            raise Fatal(f"{data.label} failed")
        order.append(data.label)
        inputs = {
            p["name"]: p["output"] for p in await ctx.prerequisites() if p["status"] == "completed"
        }
        return {"label": data.label, "inputs": inputs}

    @registry.kind("other_queue_step", input=Step, queue="second", max_attempts=1)
    async def other(ctx: JobContext, data: Step) -> str:
        order.append(data.label)
        return data.label

    return order


def node(flow: Flow, label: str, fail: bool = False, **options) -> str:
    return flow.add(label, "step", {"label": label, "fail": fail}, name=label, **options)


async def drain(jobs: JobQueue, queues: list[str] | None = None) -> None:
    await jobs.worker(concurrency=4, queues=queues or ["default", "second"]).run(until_drained=True)


async def status(jobs: JobQueue, job_id: int) -> Status:
    row = await jobs.get(job_id)
    assert row is not None
    return row.status


async def count(jobs: JobQueue, table: str = "jobs") -> int:
    return await jobs.db.pool.fetchval(f"SELECT count(*) FROM {jobs.schema}.{table}")


async def test_diamond_runs_each_node_once_and_dependents_read_outputs(
    jobs: JobQueue, ran: list[str]
) -> None:
    flow = Flow("diamond")
    for label in "abcd":
        node(flow, label)
    flow.edge("a", "b")
    flow.edge("a", "c")
    flow.edge("b", "d")
    flow.edge("c", "d")
    submitted = await jobs.submit_flow(flow, metadata={"source": "test"})
    await drain(jobs)
    assert sorted(ran) == ["a", "b", "c", "d"]
    assert ran[0] == "a" and ran[-1] == "d"
    row = await jobs.get(submitted.job_ids["d"])
    assert row is not None and row.flow_id == submitted.flow_id
    assert set(row.output["inputs"]) == {"b", "c"}
    assert row.output["inputs"]["b"]["inputs"] == {"a": {"label": "a", "inputs": {}}}


async def test_multi_parent_dag_across_queues(jobs: JobQueue, ran: list[str]) -> None:
    flow = Flow()
    node(flow, "left")
    flow.add("right", "other_queue_step", {"label": "right"}, name="right")
    node(flow, "join")
    flow.edge("left", "join")
    flow.edge("right", "join")
    submitted = await jobs.submit_flow(flow)
    await drain(jobs)
    assert ran[-1] == "join"
    row = await jobs.get(submitted.job_ids["right"])
    assert row is not None and row.queue == "second"


async def test_cycle_and_dangling_edges_are_rejected_with_nothing_written(
    jobs: JobQueue, ran: list[str]
) -> None:
    flow = Flow()
    for label in "abc":
        node(flow, label)
    flow.edge("a", "b")
    flow.edge("b", "c")
    flow.edge("c", "a")
    with pytest.raises(FlowCycle) as info:
        await jobs.submit_flow(flow)
    assert info.value.nodes == ["a", "b", "c"]
    dangling = Flow()
    node(dangling, "a")
    dangling.edge("a", "ghost")
    with pytest.raises(InvalidFlow, match="ghost"):
        await jobs.submit_flow(dangling)
    with pytest.raises(FlowCycle):
        Flow().edge("x", "x")
    assert (
        await count(jobs) == 0
        and await count(jobs, "flows") == 0
        and await count(jobs, "job_edges") == 0
    )


async def test_invalid_node_input_writes_nothing(jobs: JobQueue, ran: list[str]) -> None:
    flow = Flow()
    node(flow, "a")
    flow.add("b", "step", {"label": 7.5j})
    flow.edge("a", "b")
    with pytest.raises(Exception, match="label"):
        await jobs.submit_flow(flow)
    assert await count(jobs) == 0 and await count(jobs, "flows") == 0


async def test_priority_node_then_flow_default_then_kind(jobs: JobQueue, ran: list[str]) -> None:
    flow = Flow()
    node(flow, "explicit_zero", priority=0)
    node(flow, "own", priority=9)
    node(flow, "unset")
    late = Flow()
    node(late, "no_default")
    late.priority("no_default", 3)
    node(late, "kind_default")
    with_default = await jobs.submit_flow(flow, default_priority=5)
    without = await jobs.submit_flow(late)
    priorities = {
        label: (await jobs.get(job_id)).priority  # type: ignore[union-attr]
        for result in (with_default, without)
        for label, job_id in result.job_ids.items()
    }
    assert priorities == {
        "explicit_zero": 0,
        "own": 9,
        "unset": 5,
        "no_default": 3,
        "kind_default": 0,
    }


async def test_block_waits_for_redrive_then_the_dependent_runs(
    jobs: JobQueue, ran: list[str]
) -> None:
    flow = Flow()
    node(flow, "parent_of", fail=True)
    node(flow, "dependent")
    flow.edge("parent_of", "dependent", EdgePolicy.BLOCK)
    submitted = await jobs.submit_flow(flow)
    await drain(jobs)
    assert await status(jobs, submitted.job_ids["parent_of"]) is Status.DEAD
    waiting = await jobs.get(submitted.job_ids["dependent"])
    assert waiting is not None and waiting.status is Status.PENDING and waiting.pending_deps == 1
    assert "dependent" not in ran
    assert await jobs.requeue(submitted.job_ids["parent_of"])
    await drain(jobs)
    assert ran == ["parent_of", "dependent"]
    assert await status(jobs, submitted.job_ids["dependent"]) is Status.COMPLETED


async def test_block_is_released_when_the_failed_prerequisite_is_removed(
    jobs: JobQueue, ran: list[str]
) -> None:
    flow = Flow()
    node(flow, "doomed", fail=True)
    node(flow, "dependent")
    flow.edge("doomed", "dependent")
    submitted = await jobs.submit_flow(flow)
    await drain(jobs)
    result = await jobs.purge(JobFilter(ids=(submitted.job_ids["doomed"],)))
    assert result.deleted == 1
    await drain(jobs)
    assert ran == ["dependent"]


async def test_cascade_fails_dependents_transitively(jobs: JobQueue, ran: list[str]) -> None:
    flow = Flow()
    node(flow, "root", fail=True)
    node(flow, "child")
    node(flow, "grandchild")
    node(flow, "sibling")
    flow.edge("root", "child", EdgePolicy.CASCADE)
    flow.edge("child", "grandchild", EdgePolicy.CASCADE)
    flow.edge("root", "sibling", EdgePolicy.BLOCK)
    submitted = await jobs.submit_flow(flow)
    await drain(jobs)
    ids = submitted.job_ids
    assert await status(jobs, ids["child"]) is Status.DEAD
    assert await status(jobs, ids["grandchild"]) is Status.DEAD
    assert await status(jobs, ids["sibling"]) is Status.PENDING
    child = await jobs.get(ids["child"])
    assert child is not None and child.last_error["type"] == "DependencyFailed"
    assert child.last_error["prerequisite"] == ids["root"]
    assert ran == []


async def test_cancelled_prerequisite_cascades_as_cancelled(jobs: JobQueue, ran: list[str]) -> None:
    flow = Flow()
    node(flow, "root", delay=3600)
    node(flow, "child")
    flow.edge("root", "child", EdgePolicy.CASCADE)
    submitted = await jobs.submit_flow(flow)
    assert await jobs.cancel(submitted.job_ids["root"])
    assert await status(jobs, submitted.job_ids["child"]) is Status.CANCELLED


async def test_ignore_proceeds_and_records_the_failure(jobs: JobQueue, ran: list[str]) -> None:
    flow = Flow()
    node(flow, "flaky", fail=True)
    node(flow, "fine")
    node(flow, "dependent")
    flow.edge("flaky", "dependent", EdgePolicy.IGNORE)
    flow.edge("fine", "dependent")
    submitted = await jobs.submit_flow(flow)
    await drain(jobs)
    assert ran[-1] == "dependent" and "flaky" not in ran
    prerequisites = {
        p["name"]: p for p in await jobs.prerequisite_results(submitted.job_ids["dependent"])
    }
    assert (
        prerequisites["flaky"]["state"] == "ignored" and prerequisites["flaky"]["status"] == "dead"
    )
    assert prerequisites["flaky"]["failure"]["message"] == "flaky failed"
    assert (
        prerequisites["fine"]["state"] == "satisfied"
        and prerequisites["fine"]["output"]["label"] == "fine"
    )


async def test_ignore_still_waits_for_other_prerequisites_but_continue_does_not(
    jobs: JobQueue, ran: list[str]
) -> None:
    flows = {}
    for policy in (EdgePolicy.IGNORE, EdgePolicy.CONTINUE):
        flow = Flow()
        node(flow, f"{policy}-fails", fail=True)
        node(flow, f"{policy}-later", delay=3600)  # stays pending throughout the test
        node(flow, f"{policy}-dependent")
        flow.edge(f"{policy}-fails", f"{policy}-dependent", policy)
        flow.edge(f"{policy}-later", f"{policy}-dependent", EdgePolicy.BLOCK)
        flows[policy] = await jobs.submit_flow(flow)
    worker = jobs.worker(concurrency=2)
    task = worker.start()

    async def continued() -> bool:
        return (
            await status(jobs, flows[EdgePolicy.CONTINUE].job_ids["continue-dependent"])
            is Status.COMPLETED
        )

    await eventually(continued)
    await worker.stop()
    await task
    assert (
        await status(jobs, flows[EdgePolicy.IGNORE].job_ids["ignore-dependent"]) is Status.PENDING
    )
    assert (
        await status(jobs, flows[EdgePolicy.CONTINUE].job_ids["continue-later"]) is Status.PENDING
    )


async def test_requeue_flow_redrives_in_place_keeping_completed_nodes(
    jobs: JobQueue, ran: list[str]
) -> None:
    flow = Flow()
    node(flow, "done")
    node(flow, "broken", fail=True)
    node(flow, "after")
    flow.edge("done", "broken")
    flow.edge("broken", "after", EdgePolicy.CASCADE)
    submitted = await jobs.submit_flow(flow, default_priority=4)
    await drain(jobs)
    ids = submitted.job_ids
    assert [await status(jobs, ids[n]) for n in ("done", "broken", "after")] == [
        Status.COMPLETED,
        Status.DEAD,
        Status.DEAD,
    ]
    before = await jobs.get(ids["done"])
    redriven = await jobs.requeue_flow(submitted.flow_id)
    assert sorted(redriven) == sorted([ids["broken"], ids["after"]])
    after_row = await jobs.get(ids["after"])
    assert after_row is not None and after_row.pending_deps == 1 and after_row.attempts == 0
    await drain(jobs)
    assert ran == ["done", "broken", "after"]  # "done" did not run again
    assert await jobs.get(ids["done"]) == before
    assert all([await status(jobs, i) is Status.COMPLETED for i in ids.values()])


async def test_rerun_flow_clones_under_a_new_id(jobs: JobQueue, ran: list[str]) -> None:
    flow = Flow("original")
    node(flow, "a", priority=7)
    node(flow, "b", max_attempts=4)
    flow.edge("a", "b", EdgePolicy.IGNORE)
    first = await jobs.submit_flow(flow)
    await drain(jobs)
    second = await jobs.rerun_flow(first.flow_id)
    assert second.flow_id != first.flow_id
    clone_a = await jobs.get(second.job_ids[str(first.job_ids["a"])])
    clone_b = await jobs.get(second.job_ids[str(first.job_ids["b"])])
    assert clone_a is not None and clone_b is not None
    assert (clone_a.status, clone_a.priority, clone_a.flow_id) == (
        Status.PENDING,
        7,
        second.flow_id,
    )
    assert (clone_b.pending_deps, clone_b.max_attempts) == (1, 4)
    edges = await jobs.prerequisite_results(clone_b.id)
    assert [(e["id"], e["policy"]) for e in edges] == [(clone_a.id, "ignore")]
    await drain(jobs)
    assert ran == ["a", "b", "a", "b"]
    name = await jobs.db.pool.fetchval(
        f"SELECT name FROM {jobs.schema}.flows WHERE id = $1", second.flow_id
    )
    assert name == "original"


async def test_requeue_flow_is_refused_while_a_node_runs(
    jobs: JobQueue, registry: Registry
) -> None:
    started, release = asyncio.Event(), asyncio.Event()

    @registry.kind("holds", input=Step)
    async def holds(ctx: JobContext, data: Step) -> None:
        started.set()
        await release.wait()

    flow = Flow()
    flow.add("h", "holds", {"label": "h"})
    submitted = await jobs.submit_flow(flow)
    worker = jobs.worker()
    worker.start()
    await asyncio.wait_for(started.wait(), 20)
    with pytest.raises(FlowRunning) as info:
        await jobs.requeue_flow(submitted.flow_id)
    assert info.value.running == [submitted.job_ids["h"]]
    release.set()
    await worker.stop()


async def test_node_with_a_taken_job_key_writes_nothing(jobs: JobQueue, ran: list[str]) -> None:
    existing = await jobs.enqueue("step", {"label": "x"}, job_key="unique-1")
    flow = Flow()
    node(flow, "a")
    node(flow, "b", job_key="unique-1")
    flow.edge("a", "b")
    with pytest.raises(FlowConflict) as info:
        await jobs.submit_flow(flow)
    assert info.value.node == "b" and info.value.existing_id == existing.id
    assert await count(jobs) == 1 and await count(jobs, "flows") == 0


async def test_a_running_job_adds_prerequisites_and_waits_for_them(
    jobs: JobQueue, registry: Registry
) -> None:
    runs: list[tuple[str, int, int]] = []

    @registry.kind("step", input=Any, queue="steps")
    async def step(ctx: JobContext, data: Any) -> Any:
        runs.append((data["role"], ctx.attempts, ctx.deferrals))
        if data["role"] == "child":
            return data["n"] * 10
        if not await ctx.prerequisites():  # first run: add two children, then wait
            for n in (1, 2):
                await jobs.add_prerequisite(
                    ctx.id, "step", {"role": "child", "n": n}, tenant=ctx.tenant
                )
            assert await ctx.open_prerequisites() == 2
            raise WaitForPrerequisites()
        return sorted(p["output"] for p in await ctx.prerequisites())

    parent = await jobs.enqueue("step", {"role": "parent"}, tenant="t1")
    await jobs.worker(queues=["steps"], concurrency=1).run(until_drained=True)
    row = await jobs.get(parent.id, tenant="t1")
    assert row is not None and row.status == Status.COMPLETED and row.output == [10, 20]
    assert row.attempts == 1 and row.deferrals == 0  # waiting used neither
    assert [r[0] for r in runs] == ["parent", "child", "child", "parent"]
    view = await jobs.flow_view(row.flow_id, tenant="t1")  # type: ignore[arg-type]
    assert view is not None and len(view.nodes) == 3 and len(view.edges) == 2
    assert {n.status for n in view.nodes} == {Status.COMPLETED}


async def test_adding_a_prerequisite_checks_its_dependent(
    jobs: JobQueue, registry: Registry
) -> None:
    @registry.kind("plain", input=Any, queue="p")
    async def plain(ctx: JobContext, data: Any) -> None:
        return None

    done = await jobs.enqueue("plain", {})
    await jobs.worker(queues=["p"]).run(until_drained=True)
    with pytest.raises(InvalidFlow, match="completed"):
        await jobs.add_prerequisite(done.id, "plain", {})
    with pytest.raises(InvalidFlow, match="no job"):
        await jobs.add_prerequisite(10**9, "plain", {})
    other = await jobs.enqueue("plain", {}, tenant="a")
    with pytest.raises(InvalidFlow, match="no job"):
        await jobs.add_prerequisite(other.id, "plain", {}, tenant="b")
    # an existing job key attaches that job (BullMQ reuses a child id)
    waiting = await jobs.enqueue("plain", {}, delay=3600, job_key="parent-key")
    child = await jobs.add_prerequisite(waiting.id, "plain", {}, job_key="shared")
    again = await jobs.add_prerequisite(waiting.id, "plain", {}, job_key="shared")
    assert again.id == child.id and again.duplicate
    row = await jobs.get(waiting.id)
    assert row is not None and row.pending_deps == 1
    # attaching the parent under its own child would close a cycle: refused, nothing written
    with pytest.raises(FlowCycle):
        await jobs.add_prerequisite(child.id, "plain", {}, job_key="parent-key")
    child_row = await jobs.get(child.id)
    assert child_row is not None and child_row.pending_deps == 0


async def test_removing_a_dependency_lets_the_dependent_run_without_it(
    jobs: JobQueue, ran: list[str]
) -> None:
    """remove_dependency drops the edge; a dependent left with nothing open runs, and the
    detached prerequisite stays a job of its own."""
    flow = Flow()
    node(flow, "blocked_forever", fail=True)
    node(flow, "slow")
    node(flow, "dependent")
    flow.edge("blocked_forever", "dependent")
    flow.edge("slow", "dependent")
    submitted = await jobs.submit_flow(flow)
    ids = submitted.job_ids
    await drain(jobs)  # slow completes, blocked_forever dies, dependent is blocked
    assert await status(jobs, ids["dependent"]) is Status.PENDING
    assert [d["id"] for d in await jobs.dependents_of(ids["blocked_forever"])] == [ids["dependent"]]
    assert await jobs.remove_dependency(ids["blocked_forever"], ids["dependent"])
    assert not await jobs.remove_dependency(ids["blocked_forever"], ids["dependent"])
    assert await jobs.dependents_of(ids["blocked_forever"]) == []
    await drain(jobs)
    assert await status(jobs, ids["dependent"]) is Status.COMPLETED
    assert await status(jobs, ids["blocked_forever"]) is Status.DEAD
    assert [p["name"] for p in await jobs.prerequisite_results(ids["dependent"])] == ["slow"]


async def test_removing_a_satisfied_dependency_changes_no_count(
    jobs: JobQueue, ran: list[str]
) -> None:
    flow = Flow()
    node(flow, "done")
    node(flow, "pending")
    node(flow, "dependent")
    flow.edge("done", "dependent")
    flow.edge("pending", "dependent")
    submitted = await jobs.submit_flow(flow)
    ids = submitted.job_ids
    claimed = await jobs.claim(queues=["default"], kinds=["step"], limit=3)
    done = next(c for c in claimed if c.id == ids["done"])
    await done.complete({"label": "done"})
    for other in claimed:
        if other.id != ids["done"]:
            await other.release()
    assert await jobs.remove_dependency(ids["done"], ids["dependent"])
    row = await jobs.get(ids["dependent"])
    assert row is not None and row.pending_deps == 1  # still waits for "pending"


@pytest.mark.parametrize("keyed", [False, True], ids=["keyless", "keyed"])
async def test_a_flow_is_written_whole_with_its_edges_and_counts(
    jobs: JobQueue, ran: list[str], keyed: bool
) -> None:
    # A keyless flow is one statement; a flow holding a key takes the checked path. Both write
    # the flow row, every node in it, every edge and each node's count of prerequisites.
    flow = Flow("shape")
    for label in "abc":
        node(flow, label, job_key=f"key-{label}" if keyed else None)
    flow.edge("a", "c")
    flow.edge("b", "c", EdgePolicy.IGNORE)
    submitted = await jobs.submit_flow(flow)
    rows = {label: await jobs.get(submitted.job_ids[label]) for label in "abc"}
    assert {label: (r.flow_id, r.pending_deps) for label, r in rows.items() if r} == {
        "a": (submitted.flow_id, 0),
        "b": (submitted.flow_id, 0),
        "c": (submitted.flow_id, 2),
    }
    edges = await jobs.db.pool.fetch(
        f"SELECT prerequisite_id, dependent_id, policy FROM {jobs.schema}.job_edges"
        " ORDER BY prerequisite_id"
    )
    ids = submitted.job_ids
    assert [tuple(e) for e in edges] == [
        (ids["a"], ids["c"], "block"),
        (ids["b"], ids["c"], "ignore"),
    ]
    await drain(jobs)
    assert ran[-1] == "c"


@pytest.mark.parametrize("keyed", [False, True], ids=["keyless", "keyed"])
async def test_a_flow_in_a_rolled_back_transaction_leaves_nothing(
    jobs: JobQueue, ran: list[str], keyed: bool
) -> None:
    flow = Flow()
    node(flow, "a", job_key="only-key" if keyed else None)
    node(flow, "b")
    flow.edge("a", "b")
    with pytest.raises(RuntimeError, match="caller gives up"):
        async with jobs.transaction() as conn:
            await jobs.submit_flow(flow, connection=conn)
            raise RuntimeError("caller gives up")
    assert await count(jobs) == 0 and await count(jobs, "flows") == 0
    assert await count(jobs, "job_edges") == 0
