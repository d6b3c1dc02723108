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
    Keep,
    PendingPrerequisites,
    PrerequisiteTaken,
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


async def test_a_cascaded_failure_names_the_prerequisite_by_queue_and_key(
    jobs: JobQueue, ran: list[str]
) -> None:
    flow = Flow()
    node(flow, "root", fail=True, job_key="the-root")
    node(flow, "child")
    node(flow, "grandchild")
    flow.edge("root", "child", EdgePolicy.CASCADE)
    flow.edge("child", "grandchild", EdgePolicy.CASCADE)
    submitted = await jobs.submit_flow(flow)
    await drain(jobs)
    ids = submitted.job_ids
    child = await jobs.get(ids["child"])
    assert child is not None and child.last_error["prerequisite"] == ids["root"]
    assert child.last_error["prerequisite_queue"] == "default"
    assert child.last_error["prerequisite_key"] == "the-root"
    grandchild = await jobs.get(ids["grandchild"])
    assert grandchild is not None and grandchild.last_error["prerequisite"] == ids["child"]
    assert grandchild.last_error["prerequisite_queue"] == "default"
    assert grandchild.last_error["prerequisite_key"] is None


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


async def test_dependents_of_names_each_dependents_queue_and_key(
    jobs: JobQueue, ran: list[str]
) -> None:
    flow = Flow()
    node(flow, "child")
    node(flow, "parent", job_key="the-parent", queue="second")
    flow.edge("child", "parent")
    ids = (await jobs.submit_flow(flow)).job_ids
    [dependent] = await jobs.dependents_of(ids["child"])
    assert (dependent["id"], dependent["queue"], dependent["job_key"]) == (
        ids["parent"],
        "second",
        "the-parent",
    )


def three_levels(flow: Flow) -> None:
    """root <- middle <- leaf, and root <- side; ``outside`` depends on ``leaf`` too."""
    for label in ("leaf", "middle", "side", "root", "outside"):
        node(flow, label)
    flow.edge("leaf", "middle")
    flow.edge("middle", "root")
    flow.edge("side", "root")
    flow.edge("leaf", "outside")


async def test_remove_tree_deletes_a_job_and_everything_it_waits_for(
    jobs: JobQueue, ran: list[str]
) -> None:
    """The job and its prerequisites, transitively, go in one call; a dependent outside the
    tree is resolved as by purge (its block edge released)."""
    flow = Flow()
    three_levels(flow)
    ids = (await jobs.submit_flow(flow)).job_ids
    assert await jobs.remove_tree(ids["middle"]) == 2  # middle and leaf
    assert await jobs.get(ids["leaf"]) is None and await jobs.get(ids["middle"]) is None
    outside, root = await jobs.get(ids["outside"]), await jobs.get(ids["root"])
    assert outside is not None and outside.pending_deps == 0  # released
    assert root is not None and root.pending_deps == 1  # still waits for side
    assert await jobs.remove_tree(ids["root"]) == 2  # root and side
    assert await jobs.remove_tree(ids["root"]) == 0  # gone: nothing to delete
    assert await count(jobs) == 1  # outside


async def test_remove_tree_deletes_nothing_while_a_worker_holds_a_job_of_it(
    jobs: JobQueue, ran: list[str]
) -> None:
    flow = Flow()
    three_levels(flow)
    ids = (await jobs.submit_flow(flow)).job_ids
    [leaf] = await jobs.claim(queues=["default"], kinds=["step"], limit=1)
    assert leaf.id == ids["leaf"]
    assert await jobs.remove_tree(ids["root"]) is None
    assert await count(jobs) == 5
    assert await jobs.remove_tree(ids["side"]) == 1  # a tree without the held job
    await leaf.complete({"label": "leaf"})
    assert await jobs.remove_tree(ids["root"]) == 3  # root, middle, leaf
    assert await count(jobs) == 1


async def test_a_sole_dependent_prerequisite_cannot_get_a_second_dependent(
    jobs: JobQueue, registry: Registry
) -> None:
    @registry.kind("plain", input=Any, queue="p")
    async def plain(ctx: JobContext, data: Any) -> None:
        return None

    first = await jobs.enqueue("plain", {}, delay=3600)
    second = await jobs.enqueue("plain", {}, delay=3600)
    child = await jobs.add_prerequisite(first.id, "plain", {}, job_key="kid", sole_dependent=True)
    again = await jobs.add_prerequisite(first.id, "plain", {}, job_key="kid", sole_dependent=True)
    assert again.id == child.id and again.duplicate  # the same dependent again: allowed
    with pytest.raises(PrerequisiteTaken) as refused:
        await jobs.add_prerequisite(second.id, "plain", {}, job_key="kid", sole_dependent=True)
    assert (refused.value.job_id, refused.value.dependent_id) == (child.id, first.id)
    row = await jobs.get(second.id)
    assert row is not None and row.pending_deps == 0  # nothing written
    # without sole_dependent the engine's DAG lets it have both
    await jobs.add_prerequisite(second.id, "plain", {}, job_key="kid")
    assert {d["id"] for d in await jobs.dependents_of(child.id)} == {first.id, second.id}


async def test_concurrent_sole_dependent_attaches_let_one_win(
    jobs: JobQueue, registry: Registry
) -> None:
    @registry.kind("plain", input=Any, queue="p")
    async def plain(ctx: JobContext, data: Any) -> None:
        return None

    child = await jobs.enqueue("plain", {}, delay=3600, job_key="kid")
    parents = [await jobs.enqueue("plain", {}, delay=3600) for _ in range(4)]
    results = await asyncio.gather(
        *(
            jobs.add_prerequisite(p.id, "plain", {}, job_key="kid", sole_dependent=True)
            for p in parents
        ),
        return_exceptions=True,
    )
    assert sum(not isinstance(r, BaseException) for r in results) == 1
    assert all(isinstance(r, PrerequisiteTaken) for r in results if isinstance(r, BaseException))
    assert len(await jobs.dependents_of(child.id)) == 1


async def test_a_job_returning_with_a_pending_prerequisite_fails_the_attempt(
    jobs: JobQueue, registry: Registry
) -> None:
    """A prerequisite added to a running job that then returns (without waiting for it): the
    completion is refused in the finishing statement, and the attempt fails with
    PendingPrerequisites, retried while attempts remain (BullMQ's "pending dependencies")."""

    @registry.kind("child", input=Any, queue="children")
    async def child(ctx: JobContext, data: Any) -> str:
        return "done"

    @registry.kind("spawner", input=Any, queue="p", max_attempts=2, backoff=0)
    async def spawner(ctx: JobContext, data: Any) -> str:
        if ctx.attempts == 1:
            await jobs.add_prerequisite(ctx.id, "child", {})
        return "finished"

    job = await jobs.enqueue("spawner", {})
    worker = jobs.worker(queues=["p"])
    await worker.run(until_drained=True)
    row = await jobs.get(job.id)
    assert row is not None and row.status is Status.PENDING and row.pending_deps == 1
    assert row.attempts == 1 and row.last_error["type"] == "PendingPrerequisites"
    assert worker.stats.completed == 0 and worker.stats.retried == 1
    await jobs.worker(queues=["children"]).run(until_drained=True)
    await jobs.worker(queues=["p"]).run(until_drained=True)
    row = await jobs.get(job.id)
    assert row is not None and row.status is Status.COMPLETED and row.output == "finished"


async def test_a_completion_by_hand_is_refused_while_a_prerequisite_is_pending(
    jobs: JobQueue, registry: Registry
) -> None:
    @registry.kind("plain", input=Any, queue="p")
    async def plain(ctx: JobContext, data: Any) -> None:
        return None

    @registry.kind("child", input=Any, queue="children")
    async def child(ctx: JobContext, data: Any) -> str:
        return "done"

    job = await jobs.enqueue("plain", {})
    [ctx] = await jobs.claim(["p"])
    await jobs.add_prerequisite(ctx.id, "child", {})
    with pytest.raises(PendingPrerequisites):
        await ctx.complete("early")
    with pytest.raises(PendingPrerequisites):
        async with ctx.completing("early") as conn:
            await conn.execute(f"CREATE TABLE {jobs.schema}.side_effect (x int)")
    row = await jobs.get(job.id)
    assert row is not None and row.status is Status.RUNNING and not ctx.lost
    assert not await jobs.db.pool.fetchval(
        "SELECT EXISTS (SELECT FROM pg_tables WHERE schemaname = $1 AND tablename = $2)",
        jobs.schema,
        "side_effect",
    )
    await jobs.worker(queues=["children"]).run(until_drained=True)
    assert await ctx.complete("late")
    row = await jobs.get(job.id)
    assert row is not None and row.status is Status.COMPLETED and row.output == "late"


async def test_a_dead_prerequisite_kept_for_none_goes_and_releases_its_blocked_dependent(
    jobs: JobQueue, ran: list[str]
) -> None:
    """Keep(count=0) for dead (BullMQ's removeOnFail: true) removes a failed prerequisite at
    once: a dependent it blocked is released, as by its removal, and runs without it."""
    flow = Flow()
    node(flow, "doomed", fail=True, keep_dead=Keep(count=0))
    node(flow, "fine")
    node(flow, "dependent")
    flow.edge("doomed", "dependent")
    flow.edge("fine", "dependent")
    submitted = await jobs.submit_flow(flow)
    await drain(jobs)
    ids = submitted.job_ids
    assert await jobs.get(ids["doomed"]) is None
    assert await status(jobs, ids["dependent"]) is Status.COMPLETED
    assert sorted(ran) == ["dependent", "fine"]


async def test_a_dead_prerequisite_whose_failure_a_dependent_reads_stays_while_it_waits(
    jobs: JobQueue, ran: list[str]
) -> None:
    flow = Flow()
    node(flow, "flaky", fail=True, keep_dead=Keep(count=0))
    flow.add("slow", "other_queue_step", {"label": "slow"})  # queue "second": not run here
    node(flow, "dependent")
    flow.edge("flaky", "dependent", EdgePolicy.IGNORE)
    flow.edge("slow", "dependent")
    submitted = await jobs.submit_flow(flow)
    await drain(jobs, ["default"])
    ids = submitted.job_ids
    assert await status(jobs, ids["flaky"]) is Status.DEAD  # the dependent reads its failure
    prerequisites = await jobs.prerequisite_results(ids["dependent"])
    [edge] = [p for p in prerequisites if p["state"] == "ignored"]
    assert edge["failure"]["message"] == "flaky failed"
    await drain(jobs)
    assert await status(jobs, ids["dependent"]) is Status.COMPLETED
    assert await jobs.get(ids["flaky"]) is not None  # the GC's, once no dependent waits


async def test_a_dependent_cascaded_dead_under_keep_none_goes_at_once(
    jobs: JobQueue, ran: list[str]
) -> None:
    """A job a cascade fails under Keep(count=0) for dead goes too, once its own dependents
    were resolved: they fail naming it."""
    flow = Flow()
    node(flow, "root", fail=True)
    node(flow, "child", keep_dead=Keep(count=0), job_key="the-child")
    node(flow, "grandchild")
    flow.edge("root", "child", EdgePolicy.CASCADE)
    flow.edge("child", "grandchild", EdgePolicy.CASCADE)
    submitted = await jobs.submit_flow(flow)
    await drain(jobs)
    ids = submitted.job_ids
    assert await status(jobs, ids["root"]) is Status.DEAD
    assert await jobs.get(ids["child"]) is None
    grandchild = await jobs.get(ids["grandchild"])
    assert grandchild is not None and grandchild.status is Status.DEAD
    assert grandchild.last_error["prerequisite"] == ids["child"]
    assert grandchild.last_error["prerequisite_key"] == "the-child"
    assert ran == []


async def test_a_flow_reusing_a_finished_keyed_job_runs_its_dependent_at_once(
    jobs: JobQueue, ran: list[str]
) -> None:
    """With reuse, a node whose job key is taken is the existing job: only the missing jobs
    are written, and a dependent of a reused job that has completed is claimable at once."""
    first = Flow()
    node(first, "mon", job_key="mon")
    await jobs.submit_flow(first)
    await drain(jobs)
    second = Flow()
    node(second, "mon", job_key="mon")
    node(second, "tue", job_key="tue")
    second.edge("mon", "tue")
    submitted = await jobs.submit_flow(second, reuse=True)
    assert submitted.reused == {"mon"}
    tue = await jobs.get(submitted.job_ids["tue"])
    assert tue is not None and tue.pending_deps == 0
    await drain(jobs)
    assert ran == ["mon", "tue"]  # mon ran once
    tue = await jobs.get(submitted.job_ids["tue"])
    assert tue is not None and tue.output["inputs"] == {"mon": {"label": "mon", "inputs": {}}}


async def test_a_flow_reusing_a_pending_keyed_job_waits_for_it(
    jobs: JobQueue, ran: list[str]
) -> None:
    existing = await jobs.enqueue("step", {"label": "mon"}, job_key="mon", name="mon", delay=3600)
    flow = Flow()
    node(flow, "mon", job_key="mon")
    node(flow, "tue")
    flow.edge("mon", "tue", EdgePolicy.CASCADE)
    submitted = await jobs.submit_flow(flow, reuse=True)
    assert submitted.job_ids["mon"] == existing.id
    tue = await jobs.get(submitted.job_ids["tue"])
    assert tue is not None and tue.pending_deps == 1 and tue.sub_state.value == "waiting_children"
    assert await jobs.cancel(existing.id)  # the attached edge resolves by its policy
    assert await status(jobs, submitted.job_ids["tue"]) is Status.CANCELLED


async def test_a_reused_node_with_prerequisites_in_the_flow_conflicts(
    jobs: JobQueue, ran: list[str]
) -> None:
    await jobs.enqueue("step", {"label": "tue"}, job_key="tue", delay=3600)
    before = await count(jobs)
    flow = Flow()
    node(flow, "mon")
    node(flow, "tue", job_key="tue")
    flow.edge("mon", "tue")
    with pytest.raises(FlowConflict):
        await jobs.submit_flow(flow, reuse=True)
    assert await count(jobs) == before


async def test_a_flow_root_whose_dedup_key_is_held_reuses_the_holder(
    jobs: JobQueue, ran: list[str]
) -> None:
    held = await jobs.enqueue("step", {"label": "a"}, dedup_key="d", delay=3600)
    flow = Flow()
    node(flow, "root", dedup_key="d")
    with pytest.raises(FlowConflict):
        await jobs.submit_flow(flow)
    submitted = await jobs.submit_flow(flow, reuse=True)
    assert submitted.job_ids == {"root": held.id} and submitted.reused == {"root"}
