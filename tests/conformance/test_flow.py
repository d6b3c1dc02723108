"""Flows (FlowProducer, parents and children), after BullMQ's tests/flow.test.ts.

Each case runs on the real package (Redis) and on the facade (PostgreSQL). Where the Node case
reads ``getDependencies``/``getDependenciesCount``/``getFlow`` (not in the Python package), the
same fact is read through what the package has: ``getChildrenValues``, states and counts.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.conformance.conftest import Bull, eventually, future_of, wait_for

INITIAL, SECOND, THIRD, FINISH = range(4)


def first(
    emitter: Any, event: str, predicate: Callable[..., bool] = lambda *a: True
) -> asyncio.Future[tuple[Any, ...]]:
    """The arguments of the first ``event`` of ``emitter`` for which ``predicate`` holds."""
    future: asyncio.Future[tuple[Any, ...]] = asyncio.get_running_loop().create_future()

    def listener(*args: Any) -> None:
        if not future.done() and predicate(*args):
            future.set_result(args)

    emitter.on(event, listener)
    return future


def named(name: str) -> Callable[..., bool]:
    """A predicate on a worker event: the job is called ``name``."""
    return lambda job, *rest: job.name == name


def with_id(job_id: str) -> Callable[..., bool]:
    """A predicate on a worker event: the job has id ``job_id``."""
    return lambda job, *rest: job.id == job_id


def event_for(job_id: str) -> Callable[..., bool]:
    """A predicate on a QueueEvents event: it concerns job ``job_id``."""
    return lambda args, *rest: args.get("jobId") == job_id


_running: set[asyncio.Future[Any]] = set()


class _Closer:
    """Closes a worker after the case: ``close()``, and ``close(force=True)`` if that has not
    returned within a few seconds (the real package's ``Worker.close`` can wait forever on a
    blocking read that never returns, and it shields itself from cancellation)."""

    def __init__(self, worker: Any) -> None:
        self.worker = worker

    async def close(self) -> None:
        await stop(self.worker)


async def stop(worker: Any, grace: float = 5.0) -> None:
    """``await stop(worker)``, forced after ``grace`` seconds (see ``_Closer``)."""
    closing = asyncio.ensure_future(worker.close())
    done, _ = await asyncio.wait({closing}, timeout=grace)
    if not done:
        await worker.close(force=True)
        await asyncio.wait({closing}, timeout=grace)


def make_worker(bq: Bull, name: str, processor: Any, **extra: Any) -> Any:
    """``bq.worker``, closed after the case by ``stop``."""
    worker = bq.Worker(name, processor, bq.options(**extra))
    bq.closing(_Closer(worker))
    return worker


def start(worker: Any) -> asyncio.Future[Any]:
    """Run a worker built with ``autorun=False`` (Node's ``worker.run()``); the task is held
    until it ends (an unreferenced task may be collected while it runs)."""
    task = asyncio.ensure_future(worker.run())
    _running.add(task)
    task.add_done_callback(_running.discard)
    return task


async def settle(*aws: Any) -> list[Any]:
    """``asyncio.gather``, but every awaitable ends before the first error is raised (none is
    left running into the case's teardown)."""
    results = await asyncio.gather(*aws, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results


def key_of(job: Any) -> str:
    """The key a child has in its parent's dependencies (``queue.toKey(child.id)``)."""
    return f"{job.queueQualifiedName}:{job.id}"


async def noop(job: Any, token: str) -> None:
    return None


# Node: tests/flow.test.ts › when removeOnFail is true in last pending child › moves parent to wait without getting stuck
async def test_failed_child_removed_on_fail_does_not_block_parent(bq: Bull) -> None:
    name = bq.name()

    async def process(job: Any, token: str) -> None:
        if job.name == "child0":
            raise Exception("fail")

    worker = make_worker(bq, name, process)
    parent_done = first(worker, "completed", named("parent"))
    flow = bq.flow_producer()
    await flow.add(
        {
            "name": "parent",
            "data": {},
            "queueName": name,
            "children": [
                {"queueName": name, "name": "child0", "data": {}, "opts": {"removeOnFail": True}},
                {"queueName": name, "name": "child1", "data": {}},
            ],
        }
    )
    job, _ = await wait_for(parent_done)
    values = await job.getChildrenValues()
    assert len(values) == 1


# Node: tests/flow.test.ts › when removeOnComplete is true in children › keeps children results in parent
async def test_children_removed_on_complete_keep_their_results_in_parent(bq: Bull) -> None:
    name = bq.name()

    async def process(job: Any, token: str) -> str:
        return job.name

    worker = make_worker(bq, name, process)
    parent_done = first(worker, "completed", named("parent"))
    flow = bq.flow_producer()
    tree = await flow.add(
        {
            "name": "parent",
            "data": {},
            "queueName": name,
            "children": [
                {
                    "queueName": name,
                    "name": f"child{i}",
                    "data": {},
                    "opts": {"removeOnComplete": True},
                }
                for i in range(2)
            ],
        }
    )
    job, _ = await wait_for(parent_done)
    values = await job.getChildrenValues()
    assert len(values) == 2
    for child in tree["children"]:
        assert values[key_of(child["job"])] == child["job"].name


# Node: tests/flow.test.ts › when removeOnComplete contains age in children and time is reached › keeps children results in parent
async def test_children_removed_by_age_keep_their_results_in_parent(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)

    async def process(job: Any, token: str) -> str:
        await asyncio.sleep(1)
        return job.name

    worker = make_worker(bq, name, process, removeOnComplete={"age": 1})
    parent_done = first(worker, "completed", named("parent"))
    flow = bq.flow_producer()
    age = {"removeOnComplete": {"age": 1}}
    tree = await flow.add(
        {
            "name": "parent",
            "data": {},
            "queueName": name,
            "children": [
                {"queueName": name, "name": f"child{i}", "data": {}, "opts": age} for i in range(2)
            ],
            "opts": age,
        },
        {"queuesOptions": {name: {"defaultJobOptions": age}}},
    )
    job, _ = await wait_for(parent_done)
    values = await job.getChildrenValues()
    assert len(values) == 2
    for child in tree["children"]:
        assert values[key_of(child["job"])] == child["job"].name
    assert await queue.getCompletedCount() == 1


# Node: tests/flow.test.ts › should process children before the parent
async def test_children_are_processed_before_the_parent(bq: Bull) -> None:
    name, parent_name = bq.name(), bq.name("parent")
    parent_queue = bq.queue(parent_name)
    values = [{"bar": "something"}, {"baz": "something"}, {"qux": "something"}]
    seen: list[int] = []

    async def child(job: Any, token: str) -> Any:
        seen.append(job.data["idx"])
        return values[job.data["idx"]]

    async def parent(job: Any, token: str) -> Any:
        return {"children_done": len(seen), "values": await job.getChildrenValues()}

    parent_worker = make_worker(bq, parent_name, parent)
    children_worker = make_worker(bq, name, child)
    parent_done = future_of(parent_worker, "completed")
    flow = bq.flow_producer()
    tree = await flow.add(
        {
            "name": "parent-job",
            "queueName": parent_name,
            "data": {},
            "children": [
                {"name": "child-job", "data": {"idx": i, "foo": foo}, "queueName": name}
                for i, foo in enumerate(["bar", "baz", "qux"])
            ],
        }
    )
    assert set(tree) == {"job", "children"}
    job, children = tree["job"], tree["children"]
    assert await job.getState() == "waiting-children"
    assert len(children) == 3
    assert [c["job"].data["foo"] for c in children] == ["bar", "baz", "qux"]
    assert all(c["job"].id for c in children)
    assert children[0]["job"].parent == {"id": job.id, "queueKey": parent_queue.qualifiedName}

    [(_, result)] = await wait_for(parent_done)
    await stop(children_worker)
    assert result["children_done"] == 3
    for i, c in enumerate(children):
        assert result["values"][key_of(c["job"])] == values[i]


# Node: tests/flow.test.ts › should allow parent opts on the root job
async def test_flow_root_can_have_a_parent_of_its_own(bq: Bull) -> None:
    name, parent_name, grand_name = bq.name(), bq.name("parent"), bq.name("grandparent")
    grand_queue = bq.queue(grand_name)
    grand_job = await grand_queue.add("grandparent", {"foo": "bar"})
    values = [{"bar": "something"}, {"baz": "something"}]

    async def child(job: Any, token: str) -> Any:
        return values[job.data["idx"]]

    async def parent(job: Any, token: str) -> Any:
        return await job.getChildrenValues()

    parent_worker = make_worker(bq, parent_name, parent)
    make_worker(bq, name, child)
    parent_done = future_of(parent_worker, "completed")
    flow = bq.flow_producer()
    tree = await flow.add(
        {
            "name": "parent-job",
            "queueName": parent_name,
            "data": {},
            "children": [
                {"name": "child-job", "data": {"idx": 0, "foo": "bar"}, "queueName": name},
                {"name": "child-job", "data": {"idx": 1, "foo": "baz"}, "queueName": name},
            ],
            "opts": {"parent": {"id": grand_job.id, "queue": grand_queue.qualifiedName}},
        }
    )
    job = tree["job"]
    assert job.parentKey == f"{grand_queue.qualifiedName}:{grand_job.id}"
    assert await job.getState() == "waiting-children"
    assert len(tree["children"]) == 2
    [(_, children_values)] = await wait_for(parent_done)
    for i, c in enumerate(tree["children"]):
        assert children_values[key_of(c["job"])] == values[i]


# Node: tests/flow.test.ts › when ignoreDependencyOnFailure is provided › moves parent to wait after children fail
async def test_ignore_dependency_on_failure_lets_parent_run_after_children_fail(bq: Bull) -> None:
    name, parent_name = bq.name(), bq.name("parent")
    parent_queue = bq.queue(parent_name)

    async def parent(job: Any, token: str) -> Any:
        return await job.getChildrenValues()

    async def child(job: Any, token: str) -> None:
        raise Exception("error")

    parent_worker = make_worker(bq, parent_name, parent)
    make_worker(bq, name, child)
    parent_done = future_of(parent_worker, "completed")
    flow = bq.flow_producer()
    tree = await flow.add(
        {
            "name": "parent-job",
            "queueName": parent_name,
            "data": {},
            "children": [
                {
                    "name": "child-job",
                    "data": {"idx": i, "foo": foo},
                    "queueName": name,
                    "opts": {"ignoreDependencyOnFailure": True},
                }
                for i, foo in enumerate(["bar", "baz", "qux"])
            ],
        }
    )
    job, children = tree["job"], tree["children"]
    assert await job.getState() == "waiting-children"
    assert [c["job"].data["foo"] for c in children] == ["bar", "baz", "qux"]
    [(done, processed)] = await wait_for(parent_done)
    assert isinstance(done.finishedOn, int)
    assert processed == {}
    assert (await parent_queue.getJobCounts("completed"))["completed"] == 1
    for c in children:
        assert await c["job"].getState() == "failed"


# Node: tests/flow.test.ts › when removeDependencyOnFailure is provided › moves parent to wait after children fail
async def test_remove_dependency_on_failure_lets_parent_run_after_children_fail(bq: Bull) -> None:
    name, parent_name = bq.name(), bq.name("parent")
    parent_queue = bq.queue(parent_name)

    async def parent(job: Any, token: str) -> Any:
        return await job.getChildrenValues()

    async def child(job: Any, token: str) -> None:
        raise Exception("error")

    parent_worker = make_worker(bq, parent_name, parent)
    make_worker(bq, name, child)
    parent_done = future_of(parent_worker, "completed")
    flow = bq.flow_producer()
    tree = await flow.add(
        {
            "name": "parent-job",
            "queueName": parent_name,
            "data": {},
            "children": [
                {
                    "name": "child-job",
                    "data": {"idx": i, "foo": foo},
                    "queueName": name,
                    "opts": {"removeDependencyOnFailure": True},
                }
                for i, foo in enumerate(["bar", "baz", "qux"])
            ],
        }
    )
    assert await tree["job"].getState() == "waiting-children"
    assert len(tree["children"]) == 3
    [(done, processed)] = await wait_for(parent_done)
    assert isinstance(done.finishedOn, int)
    assert processed == {}
    assert (await parent_queue.getJobCounts("completed"))["completed"] == 1


def step_processor(bq: Bull, flow: Any, child_flow: Callable[[Any], dict[str, Any]]) -> Any:
    """A processor that adds a child flow to its job, then waits for the children as a step
    (BullMQ's "process step jobs" pattern)."""

    async def process(job: Any, token: str) -> Any:
        step = job.data["step"]
        while step != FINISH:
            if step == INITIAL:
                await flow.add(child_flow(job))
                await job.updateData({"step": SECOND})
                step = SECOND
            elif step == SECOND:
                await job.updateData({"step": THIRD})
                step = THIRD
            elif step == THIRD:
                if not await job.moveToWaitingChildren(token, {}):
                    await job.updateData({"step": FINISH})
                    return FINISH
                raise bq.WaitingChildrenError()
            else:
                raise Exception("invalid step")

    return process


def as_child_of(job: Any, **extra: Any) -> dict[str, Any]:
    return {"parent": {"id": job.id, "queue": job.queueQualifiedName}, **extra}


# Node: tests/flow.test.ts › when chaining flows at runtime using step jobs › should wait children as one step of the parent job
async def test_a_job_waits_for_children_it_added_as_one_step(bq: Bull) -> None:
    name, children_name, grand_name = bq.name(), bq.name("children"), bq.name("grandchildren")
    queue = bq.queue(name)
    flow = bq.flow_producer()

    async def short(job: Any, token: str) -> None:
        await asyncio.sleep(0.01)

    make_worker(bq, children_name, short)
    make_worker(bq, grand_name, short)

    def child_flow(job: Any) -> dict[str, Any]:
        return {
            "name": "child-job",
            "queueName": children_name,
            "data": {},
            "children": [
                {
                    "name": "grandchild-job",
                    "data": {"idx": 0, "foo": "bar"},
                    "queueName": grand_name,
                },
                {
                    "name": "grandchild-job",
                    "data": {"idx": 1, "foo": "baz"},
                    "queueName": grand_name,
                },
            ],
            "opts": as_child_of(job),
        }

    worker = make_worker(bq, name, step_processor(bq, flow, child_flow))
    completed = future_of(worker, "completed")
    await queue.add("test", {"step": INITIAL}, {"attempts": 3, "backoff": 1000})
    [(job, value)] = await wait_for(completed)
    assert value == FINISH
    assert job.returnvalue == FINISH


def finishing_processor(
    flow: Any, child_flow: Callable[[Any], dict[str, Any]], pause: float
) -> Any:
    """A processor that adds a child to its job and then returns without waiting for it."""

    async def process(job: Any, token: str) -> None:
        step = job.data["step"]
        while step != FINISH:
            if step == INITIAL:
                await flow.add(child_flow(job))
                await job.updateData({"step": SECOND})
                step = SECOND
            elif step == SECOND:
                await asyncio.sleep(pause)
                await job.updateData({"step": FINISH})
                step = FINISH
            else:
                raise Exception("invalid step")

    return process


@pytest.mark.parametrize("fail_parent", [False, True], ids=["plain", "failParentOnFailure"])
# Node: tests/flow.test.ts › when chaining flows at runtime using step jobs › when parent has pending children to be processed when trying to move it to completed › should fail parent with pending dependencies error
# Node: tests/flow.test.ts › when chaining flows at runtime using step jobs › when parent has pending children to be processed when trying to move it to completed › when parent has pending children to be processed when trying to move it to completed › should fail parent with pending dependencies error
async def test_completing_a_job_with_pending_children_fails_it(bq: Bull, fail_parent: bool) -> None:
    name, children_name = bq.name(), bq.name("children")
    queue = bq.queue(name)
    flow = bq.flow_producer()
    extra = {"failParentOnFailure": True} if fail_parent else {}

    def child_flow(job: Any) -> dict[str, Any]:
        return {
            "name": "child-job",
            "queueName": children_name,
            "data": {},
            "opts": as_child_of(job, **extra),
        }

    worker = make_worker(
        bq, name, finishing_processor(flow, child_flow, 0.1 if fail_parent else 0), autorun=False
    )
    events = bq.queue_events(name, lastEventId="0")
    job = await queue.add("test", {"step": INITIAL})
    failed = first(events, "failed", event_for(job.id))
    start(worker)
    (args, _) = await wait_for(failed)
    assert args["prev"] == "active"
    assert args["failedReason"] == f"Job {job.id} has pending dependencies. moveToFinished"


async def state_is(job: Any, state: str) -> bool:
    return await job.getState() == state


# Node: tests/flow.test.ts › when chaining flows at runtime using step jobs › when parent is not in waiting-children state when one child with failParentOnFailure failed › should fail parent when trying to move it to waiting children
async def test_moving_to_waiting_children_fails_a_job_whose_child_already_failed(bq: Bull) -> None:
    name, children_name, grand_name = bq.name(), bq.name("children"), bq.name("grandchildren")
    queue = bq.queue(name)
    flow = bq.flow_producer()

    async def fail(job: Any, token: str) -> None:
        raise Exception("fail")

    make_worker(bq, grand_name, fail)
    make_worker(bq, children_name, noop)
    added: list[Any] = []

    async def process(job: Any, token: str) -> Any:
        step = job.data["step"]
        while step != FINISH:
            if step == INITIAL:
                tree = await flow.add(
                    {
                        "name": "child-job",
                        "queueName": children_name,
                        "data": {},
                        "children": [
                            {
                                "name": "grandchild-job",
                                "data": {"idx": 0, "foo": "bar"},
                                "queueName": grand_name,
                                "opts": {"failParentOnFailure": True},
                            }
                        ],
                        "opts": as_child_of(job, failParentOnFailure=True),
                    }
                )
                added.append(tree["job"])
                await job.updateData({"step": SECOND})
                step = SECOND
            elif step == SECOND:
                await job.updateData({"step": THIRD})
                step = THIRD
            elif step == THIRD:
                # the child fails (its own child failed) before this job asks to wait for it
                await eventually(lambda: state_is(added[0], "failed"))
                if not await job.moveToWaitingChildren(token, {}):
                    await job.updateData({"step": FINISH})
                    return FINISH
                raise bq.WaitingChildrenError()

    worker = make_worker(bq, name, process)
    events = bq.queue_events(name, lastEventId="0")
    job = await queue.add("test", {"step": INITIAL}, {"attempts": 3, "backoff": 1000})
    worker_failed = future_of(worker, "failed")
    failed = first(events, "failed", event_for(job.id))
    reason = (
        f"Cannot complete job {job.id} because it has at least one failed child. "
        "moveToWaitingChildren"
    )
    [(failed_job, _)] = await wait_for(worker_failed)
    assert failed_job.failedReason == reason
    (args, _) = await wait_for(failed)
    assert args["prev"] == "active"
    assert args["failedReason"] == reason
    assert (await queue.getJobCounts("active"))["active"] == 0
    assert await job.getState() == "failed"


# Node: tests/flow.test.ts › when chaining flows at runtime using step jobs › when parent is not in waiting-children state when one child with failParentOnFailure failed › when parent has another parent › should fail parent and grandparent when trying to move it to waiting children
async def test_moving_to_waiting_children_fails_parent_and_grandparent(bq: Bull) -> None:
    name, children_name, grand_name = bq.name(), bq.name("children"), bq.name("grandchildren")
    queue = bq.queue(name)
    flow = bq.flow_producer()

    async def fail(job: Any, token: str) -> None:
        raise Exception("fail")

    def stepping(child_queue: str, child_name: str) -> Any:
        added: list[Any] = []

        async def process(job: Any, token: str) -> Any:
            step = job.data.get("step", INITIAL) if job.data else INITIAL
            while step != FINISH:
                if step == INITIAL:
                    tree = await flow.add(
                        {
                            "name": child_name,
                            "queueName": child_queue,
                            "data": {"step": INITIAL},
                            "opts": as_child_of(job, failParentOnFailure=True),
                        }
                    )
                    added.append(tree["job"])
                    await job.updateData({"step": SECOND})
                    step = SECOND
                elif step == SECOND:
                    await eventually(lambda: state_is(added[0], "failed"))
                    if not await job.moveToWaitingChildren(token, {}):
                        await job.updateData({"step": FINISH})
                        return FINISH
                    raise bq.WaitingChildrenError()

        return process

    make_worker(bq, grand_name, fail)
    make_worker(bq, children_name, stepping(grand_name, "grandchild-job"))
    worker = make_worker(bq, name, stepping(children_name, "child-job"))
    events = bq.queue_events(name, lastEventId="0")
    job = await queue.add("test", {"step": INITIAL}, {"attempts": 3, "backoff": 1000})
    worker_failed = future_of(worker, "failed")
    failed = first(events, "failed", event_for(job.id))
    reason = (
        f"Cannot complete job {job.id} because it has at least one failed child. "
        "moveToWaitingChildren"
    )
    [(failed_job, _)] = await wait_for(worker_failed)
    assert failed_job.failedReason == reason
    (args, _) = await wait_for(failed)
    assert args["prev"] == "active"
    assert args["failedReason"] == reason


# Node: tests/flow.test.ts › when chaining flows at runtime using step jobs › when parent failed before moving to waiting-children › should fail parent with last error
async def test_a_step_job_that_fails_before_waiting_keeps_its_own_error(bq: Bull) -> None:
    name, children_name, grand_name = bq.name(), bq.name("children"), bq.name("grandchildren")
    queue = bq.queue(name)
    flow = bq.flow_producer()

    async def fail(job: Any, token: str) -> None:
        raise Exception("fail")

    make_worker(bq, grand_name, fail)

    async def process(job: Any, token: str) -> Any:
        step = job.data["step"]
        while step != FINISH:
            if step == INITIAL:
                await flow.add(
                    {
                        "name": "child-job",
                        "queueName": children_name,
                        "data": {},
                        "children": [
                            {
                                "name": "grandchild-job",
                                "data": {"idx": 0, "foo": "bar"},
                                "queueName": grand_name,
                                "opts": {"failParentOnFailure": True},
                            }
                        ],
                        "opts": as_child_of(job, failParentOnFailure=True),
                    }
                )
                await job.updateData({"step": SECOND})
                step = SECOND
            elif step == SECOND:
                await job.updateData({"step": THIRD})
                raise Exception("fail")
            elif step == THIRD:
                if not await job.moveToWaitingChildren(token, {}):
                    return FINISH
                raise bq.WaitingChildrenError()

    make_worker(bq, name, process)
    events = bq.queue_events(name, lastEventId="0")
    job = await queue.add("test", {"step": INITIAL})
    (args, _) = await wait_for(first(events, "failed", event_for(job.id)))
    assert args["prev"] == "active"
    assert args["failedReason"] == "fail"


# Node: tests/flow.test.ts › when moving jobs from wait to active continuing › begins with attemptsMade as 1
async def test_flow_jobs_start_with_no_attempts_made(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    seen: list[tuple[str, int, int]] = []

    async def process(job: Any, token: str) -> None:
        seen.append((job.name, job.attemptsMade, job.opts["attempts"]))
        if job.attemptsMade + 1 != job.opts["attempts"]:
            raise Exception("unexpected attempt")

    worker = make_worker(bq, name, process)
    completed = future_of(worker, "completed", 3)
    opts = {"attempts": 1, "backoff": {"type": "fixed", "delay": 1000}}
    flow = bq.flow_producer()
    tree = await flow.add(
        {
            "name": "task3",
            "data": {"status": "plan"},
            "opts": opts,
            "queueName": name,
            "children": [
                {
                    "name": "task2",
                    "data": {},
                    "queueName": name,
                    "opts": opts,
                    "children": [
                        {
                            "name": "task3",
                            "data": {"status": "proposal"},
                            "opts": opts,
                            "queueName": name,
                        }
                    ],
                }
            ],
        }
    )
    assert await tree["job"].getState() == "waiting-children"
    assert len(tree["children"]) == 1
    await wait_for(completed)
    await stop(worker)
    assert seen == [("task3", 0, 1), ("task2", 0, 1), ("task3", 0, 1)]
    assert await queue.getJobCountByTypes("completed") == 3


# Node: tests/flow.test.ts › when defaultJobOptions is provided › processes children before the parent
async def test_queues_options_give_default_job_options_per_queue(bq: Bull) -> None:
    name, parent_name = bq.name(), bq.name("parent")
    parent_queue = bq.queue(parent_name)
    parent_key = bq.queue(parent_name).qualifiedName
    values = [{"bar": "something"}, {"baz": "something"}, {"qux": "something"}]

    async def child(job: Any, token: str) -> Any:
        return values[job.data["idx"]]

    async def parent(job: Any, token: str) -> Any:
        return await job.getChildrenValues()

    parent_worker = make_worker(bq, parent_name, parent)
    make_worker(bq, name, child)
    parent_done = future_of(parent_worker, "completed")
    flow = bq.flow_producer()
    tree = await flow.add(
        {
            "name": "parent-job",
            "queueName": parent_name,
            "data": {},
            "children": [
                {"name": "child-job", "data": {"idx": i, "foo": foo}, "queueName": name}
                for i, foo in enumerate(["bar", "baz", "qux"])
            ],
        },
        {"queuesOptions": {parent_name: {"defaultJobOptions": {"removeOnComplete": True}}}},
    )
    job, children = tree["job"], tree["children"]
    assert await job.getState() == "waiting-children"
    assert [c["job"].data["foo"] for c in children] == ["bar", "baz", "qux"]
    assert children[0]["job"].parent == {"id": job.id, "queueKey": parent_key}
    [(done, children_values)] = await wait_for(parent_done)
    for i, c in enumerate(children):
        assert children_values[key_of(c["job"])] == values[i]
    assert isinstance(done.finishedOn, int)
    assert await parent_queue.getJob(done.id) is None
    assert (await parent_queue.getJobCounts("completed"))["completed"] == 0


# Node: tests/flow.test.ts › when priority is provided › processes children before the parent respecting priority option
async def test_children_that_become_ready_run_in_priority_order(bq: Bull) -> None:
    name, parent_name, grand_name = bq.name(), bq.name("parent"), bq.name("grandchildren")
    queue = bq.queue(name)
    parent_queue = bq.queue(parent_name)
    values = [{"bar": "something"}, {"baz": "something"}, {"qux": "something"}]
    order: list[int] = []

    async def child(job: Any, token: str) -> Any:
        if "idx" in job.data:
            order.append(job.data["idx"])
            return values[job.data["idx"]]
        await asyncio.sleep(0.5)

    async def parent(job: Any, token: str) -> Any:
        return await job.getChildrenValues()

    parent_worker = make_worker(bq, parent_name, parent)
    children_worker = make_worker(bq, name, child, autorun=False)
    grand_worker = make_worker(bq, grand_name, noop)
    grand_done = future_of(grand_worker, "completed", 3)
    parent_done = future_of(parent_worker, "completed")
    await queue.add("test", {})
    flow = bq.flow_producer()
    tree = await flow.add(
        {
            "name": "parent-job",
            "queueName": parent_name,
            "data": {},
            "children": [
                {
                    "name": "child-job",
                    "data": {"idx": idx, "foo": foo},
                    "queueName": name,
                    "children": [
                        {"name": "grandchildren-job", "data": {}, "queueName": grand_name}
                    ],
                    "opts": {"priority": priority},
                }
                for idx, foo, priority in [(1, "baz", 2), (2, "qux", 3), (0, "bar", 1)]
            ],
        },
        {"queuesOptions": {parent_name: {"defaultJobOptions": {"removeOnComplete": True}}}},
    )
    job, children = tree["job"], tree["children"]
    assert await job.getState() == "waiting-children"
    assert [c["job"].data["foo"] for c in children] == ["baz", "qux", "bar"]
    assert children[0]["job"].parent == {"id": job.id, "queueKey": parent_queue.qualifiedName}
    await wait_for(grand_done)
    start(children_worker)
    [(done, children_values)] = await wait_for(parent_done)
    assert order == [0, 1, 2]
    assert len(children_values) == 3
    assert await parent_queue.getJob(done.id) is None
    assert (await parent_queue.getJobCounts("completed"))["completed"] == 0


# Node: tests/flow.test.ts › when backoff strategy is provided › retries a job after a delay if a fixed backoff is given
async def test_a_child_retried_with_a_custom_backoff_then_lets_parent_run(bq: Bull) -> None:
    name, parent_name = bq.name(), bq.name("parent")
    attempts: list[int] = []

    async def child(job: Any, token: str) -> Any:
        attempts.append(job.attemptsMade)
        if job.attemptsMade < 1:
            raise Exception("Not yet!")
        return {"bar": "something"}

    parent_worker = make_worker(bq, parent_name, noop)
    make_worker(
        bq,
        name,
        child,
        settings={"backoffStrategy": lambda attempts_made, *rest: attempts_made * 500},
    )
    parent_done = future_of(parent_worker, "completed")
    flow = bq.flow_producer()
    tree = await flow.add(
        {
            "name": "parent-job",
            "queueName": parent_name,
            "data": {},
            "children": [
                {
                    "name": "child-job",
                    "data": {"idx": 0, "foo": "bar"},
                    "queueName": name,
                    "opts": {"attempts": 3, "backoff": {"type": "custom"}},
                }
            ],
        }
    )
    assert await tree["job"].getState() == "waiting-children"
    assert tree["children"][0]["job"].data["foo"] == "bar"
    await wait_for(parent_done)
    assert attempts == [0, 1]


# Node: tests/flow.test.ts › when continually adding jobs › adds jobs that do not exists
async def test_flows_reusing_job_ids_only_add_the_missing_jobs(bq: Bull) -> None:
    name = bq.name()
    worker = make_worker(bq, name, noop, autorun=False)
    wed_done = first(worker, "completed", with_id("wed"))
    flow = bq.flow_producer()

    def day(parent: str, child: str) -> dict[str, Any]:
        return {
            "queueName": name,
            "name": parent,
            "opts": {"jobId": parent},
            "children": [{"name": child, "queueName": name, "opts": {"jobId": child}}],
        }

    await flow.add(day("tue", "mon"))
    await flow.add(day("wed", "tue"))
    start(worker)
    await wait_for(wed_done)
    thu_done = first(worker, "completed", with_id("thu"))
    tree = await flow.add(day("thu", "wed"))
    await wait_for(thu_done)
    assert await tree["job"].getState() == "completed"


# Node: tests/flow.test.ts › when continually adding jobs › processes parent jobs added while a child job is active
async def test_a_parent_added_while_its_child_is_active_runs_after_it(bq: Bull) -> None:
    name = bq.name()
    release = asyncio.Event()

    async def process(job: Any, token: str) -> None:
        if job.id == "mon":
            await release.wait()

    worker = make_worker(bq, name, process)
    mon_active = first(worker, "active", with_id("mon"))
    tue_done = first(worker, "completed", with_id("tue"))
    flow = bq.flow_producer()
    await flow.add({"queueName": name, "name": "mon", "opts": {"jobId": "mon"}, "children": []})
    await wait_for(mon_active)
    tree = await flow.add(
        {
            "queueName": name,
            "name": "tue",
            "opts": {"jobId": "tue"},
            "children": [{"name": "mon", "queueName": name, "opts": {"jobId": "mon"}}],
        }
    )
    release.set()
    await wait_for(tue_done)
    assert await tree["job"].getState() == "completed"


# Node: tests/flow.test.ts › when continually adding jobs › when job already have a parent › throws an error
async def test_a_child_cannot_be_given_a_second_parent(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    flow = bq.flow_producer()
    await flow.add(
        {
            "queueName": name,
            "name": "tue",
            "opts": {"jobId": "tue"},
            "children": [{"name": "mon", "queueName": name, "opts": {"jobId": "mon"}}],
        }
    )
    await queue.add("wed", {}, {"jobId": "wed"})
    # Node's message names the parent key; the Python package 3.4.4 words it the same way
    # but puts the (absent) jobId of the options in it, so only its shape is compared.
    with pytest.raises(Exception, match=r"The parent job .* cannot be replaced\. addJob"):
        await queue.add(
            "mon", {}, {"jobId": "mon", "parent": {"id": "wed", "queue": queue.qualifiedName}}
        )


# Node: tests/flow.test.ts › when continually adding jobs › when child already existed and it is re-added with same parentId › moves parent to wait if child is already completed
async def test_a_parent_re_added_over_a_completed_child_runs(bq: Bull) -> None:
    name = bq.name()
    worker = make_worker(bq, name, noop)
    tue_done = first(worker, "completed", with_id("tue"))
    flow = bq.flow_producer()

    def tue(**opts: Any) -> dict[str, Any]:
        return {
            "queueName": name,
            "name": "tue",
            "opts": {"jobId": "tue", **opts},
            "children": [{"name": "mon", "queueName": name, "opts": {"jobId": "mon"}}],
        }

    await flow.add(tue(removeOnComplete=True))
    await wait_for(tue_done)
    tree = await flow.add(tue())
    await eventually(lambda: state_is(tree["job"], "completed"))


# Node: tests/flow.test.ts › when custom prefix is set in flow producer › uses default prefix to add jobs
async def test_flow_producer_prefix_is_used_for_its_jobs(bq: Bull) -> None:
    prefix = f"{bq.opts['prefix']}:custom"
    name, parent_name = bq.name(), bq.name("parent")
    children_queue = bq.queue(name, prefix=prefix)

    async def child(job: Any, token: str) -> Any:
        return {"bar": "something"}

    async def parent(job: Any, token: str) -> Any:
        return await job.getChildrenValues()

    parent_worker = make_worker(bq, parent_name, parent, prefix=prefix)
    make_worker(bq, name, child, prefix=prefix)
    parent_done = future_of(parent_worker, "completed")
    flow = bq.flow_producer(prefix=prefix)
    tree = await flow.add(
        {
            "name": "parent-job",
            "queueName": parent_name,
            "data": {},
            "children": [
                {"name": "child-job", "data": {"idx": 0, "foo": "bar"}, "queueName": name}
            ],
        }
    )
    assert await tree["job"].getState() == "waiting-children"
    child_job = tree["children"][0]["job"]
    assert child_job.data["foo"] == "bar"
    [(_, children_values)] = await wait_for(parent_done)
    assert children_values == {
        f"{children_queue.qualifiedName}:{child_job.id}": {"bar": "something"}
    }


# Node: tests/flow.test.ts › when priority option is provided › should process children before the parent prioritizing jobs per queueName
async def test_children_are_prioritised_within_each_queue(bq: Bull) -> None:
    name, parent_name, grand_name = bq.name(), bq.name("parent"), bq.name("grandchildren")
    values = [{"bar": "something"}, {"baz": "something"}, {"qux": "something"}]
    children_order: list[int] = []
    grand_order: list[int] = []

    def recording(order: list[int]) -> Any:
        async def process(job: Any, token: str) -> Any:
            order.append(job.data["order"])
            return values[job.data["order"] - 1]

        return process

    async def parent(job: Any, token: str) -> Any:
        return await job.getChildrenValues()

    parent_worker = make_worker(bq, parent_name, parent)
    children_worker = make_worker(bq, name, recording(children_order), autorun=False)
    grand_worker = make_worker(bq, grand_name, recording(grand_order), autorun=False)
    grand_done = future_of(grand_worker, "completed", 3)
    parent_done = future_of(parent_worker, "completed")

    def node(queue_name: str, order: int, foo: str, **extra: Any) -> dict[str, Any]:
        return {
            "name": "child-job",
            "data": {"order": order, "foo": foo},
            "queueName": queue_name,
            "opts": {"priority": order},
            **extra,
        }

    flow = bq.flow_producer()
    tree = await flow.add(
        {
            "name": "parent-job",
            "queueName": parent_name,
            "data": {},
            "children": [
                node(name, 1, "bar"),
                node(name, 2, "baz"),
                node(
                    name,
                    3,
                    "qux",
                    children=[
                        node(grand_name, 1, "bar"),
                        node(grand_name, 2, "baz"),
                        node(grand_name, 3, "qux"),
                    ],
                ),
            ],
        }
    )
    assert await tree["job"].getState() == "waiting-children"
    assert len(tree["children"]) == 3
    start(grand_worker)
    await wait_for(grand_done)
    start(children_worker)
    [(_, children_values)] = await wait_for(parent_done)
    assert grand_order == [1, 2, 3]
    assert children_order == [1, 2, 3]
    for i, c in enumerate(tree["children"]):
        assert children_values[key_of(c["job"])] == values[i]


def fail_parent_tree(
    name: str, parent_name: str, grand_name: str, **child_opts: Any
) -> dict[str, Any]:
    """A parent with two children; the second has two children of its own, the first of which
    fails its parent on failure."""
    return {
        "name": "parent-job",
        "queueName": parent_name,
        "data": {},
        "children": [
            {"name": "child-job", "data": {"foo": "bar"}, "queueName": name},
            {
                "name": "child-job",
                "data": {"foo": "qux"},
                "queueName": name,
                "opts": child_opts,
                "children": [
                    {
                        "name": "child-job",
                        "data": {"foo": "bar"},
                        "queueName": grand_name,
                        "opts": {"failParentOnFailure": True},
                    },
                    {"name": "child-job", "data": {"foo": "baz"}, "queueName": grand_name},
                ],
            },
        ],
    }


async def fail_bar(job: Any, token: str) -> None:
    if job.data["foo"] == "bar":
        raise Exception("failed")


# Node: tests/flow.test.ts › when failParentOnFailure option is provided › when parent is in waiting-children state › should move parent to failed when child is moved to failed
async def test_fail_parent_on_failure_fails_parent_and_grandparent(bq: Bull) -> None:
    name, parent_name, grand_name = bq.name(), bq.name("parent"), bq.name("grandchildren")
    queue = bq.queue(name)
    parent_queue = bq.queue(parent_name)
    grand_queue = bq.queue(grand_name)
    events = bq.queue_events(parent_name, lastEventId="0")
    make_worker(bq, grand_name, fail_bar)
    make_worker(bq, name, noop)
    make_worker(bq, parent_name, noop)
    flow = bq.flow_producer()
    tree = await flow.add(fail_parent_tree(name, parent_name, grand_name, failParentOnFailure=True))
    failed = first(events, "failed", event_for(tree["job"].id))
    job, children = tree["job"], tree["children"]
    assert await job.getState() == "waiting-children"
    (args, _) = await wait_for(failed)
    assert args["prev"] == "active"
    assert args["failedReason"] == f"child {queue.qualifiedName}:{children[1]['job'].id} failed"

    grandchild = await grand_queue.getJob(children[1]["children"][0]["job"].id)
    assert await grandchild.getState() == "failed"
    assert grandchild.failedReason == "failed"
    child = await queue.getJob(children[1]["job"].id)
    assert await child.getState() == "failed"
    assert child.failedReason == f"child {grand_queue.qualifiedName}:{grandchild.id} failed"
    parent = await parent_queue.getJob(job.id)
    assert await parent.getState() == "failed"
    assert parent.failedReason == f"child {queue.qualifiedName}:{child.id} failed"


# Node: tests/flow.test.ts › when failParentOnFailure option is provided › when parent is in delayed state › should move parent to failed when child is moved to failed
async def test_fail_parent_on_failure_fails_a_delayed_parent(bq: Bull) -> None:
    name, children_name, grand_name = bq.name(), bq.name("children"), bq.name("grandchildren")
    queue = bq.queue(name)
    children_queue = bq.queue(children_name)
    flow = bq.flow_producer()
    main: list[Any] = []
    added: list[Any] = []

    async def grandchild(job: Any, token: str) -> None:
        # fails only once the parent of its parent has moved itself to delayed
        await eventually(lambda: state_is(main[0], "delayed"))
        raise Exception("failed")

    make_worker(bq, grand_name, grandchild)
    make_worker(bq, children_name, noop)
    events = bq.queue_events(name, lastEventId="0")

    async def process(job: Any, token: str) -> Any:
        step = job.data["step"]
        while step != FINISH:
            if step == INITIAL:
                tree = await flow.add(
                    {
                        "name": "child-job",
                        "queueName": children_name,
                        "data": {},
                        "children": [
                            {
                                "name": "grandchild-job",
                                "data": {"idx": 0, "foo": "bar"},
                                "queueName": grand_name,
                                "opts": {"failParentOnFailure": True},
                            }
                        ],
                        "opts": as_child_of(job, failParentOnFailure=True),
                    }
                )
                added.append(tree["job"])
                await job.updateData({"step": SECOND})
                step = SECOND
            elif step == SECOND:
                await job.moveToDelayed(int(time.time() * 1000) + 5000, job.token)
                await job.updateData({"step": THIRD})
                raise bq.DelayedError()
            elif step == THIRD:
                if not await job.moveToWaitingChildren(token, {}):
                    return FINISH
                raise bq.WaitingChildrenError()

    failed = future_of(events, "failed")
    make_worker(bq, name, process)
    main.append(await queue.add("test", {"step": INITIAL}, {"attempts": 3, "backoff": 1000}))
    [(args, _)] = await wait_for(failed)
    assert args["jobId"] == main[0].id
    assert args["prev"] == "active"
    assert args["failedReason"] == f"child {children_queue.qualifiedName}:{added[0].id} failed"


# Node: tests/flow.test.ts › when failParentOnFailure option is provided › when removeOnFail option is provided › should remove parent when child is moved to failed
async def test_fail_parent_on_failure_with_remove_on_fail_removes_the_failed_child(
    bq: Bull,
) -> None:
    name, parent_name, grand_name = bq.name(), bq.name("parent"), bq.name("grandchildren")
    queue = bq.queue(name)
    parent_queue = bq.queue(parent_name)
    grand_queue = bq.queue(grand_name)
    events = bq.queue_events(parent_name, lastEventId="0")
    make_worker(bq, grand_name, fail_bar)
    make_worker(bq, name, noop)
    make_worker(bq, parent_name, noop)
    flow = bq.flow_producer()
    tree = await flow.add(
        fail_parent_tree(name, parent_name, grand_name, failParentOnFailure=True, removeOnFail=True)
    )
    failed = first(events, "failed", event_for(tree["job"].id))
    job, children = tree["job"], tree["children"]
    assert await job.getState() == "waiting-children"
    (args, _) = await wait_for(failed)
    assert args["prev"] == "active"
    assert args["failedReason"] == f"child {queue.qualifiedName}:{children[1]['job'].id} failed"

    grandchild = await grand_queue.getJob(children[1]["children"][0]["job"].id)
    assert await grandchild.getState() == "failed"
    assert grandchild.failedReason == "failed"
    assert await queue.getJob(children[1]["job"].id) is None
    parent = await parent_queue.getJob(job.id)
    assert await parent.getState() == "failed"
    assert parent.failedReason == f"child {queue.qualifiedName}:{children[1]['job'].id} failed"


@pytest.mark.parametrize("option", ["removeDependencyOnFailure", "ignoreDependencyOnFailure"])
# Node: tests/flow.test.ts › when failParentOnFailure option is provided › when removeDependencyOnFailure is provided › moves parent to wait after children fail
# Node: tests/flow.test.ts › when failParentOnFailure option is provided › when ignoreDependencyOnFailure is provided › moves parent to wait after children fail
async def test_a_failed_child_that_does_not_fail_its_parent_releases_it(
    bq: Bull, option: str
) -> None:
    name, parent_name, grand_name = bq.name(), bq.name("parent"), bq.name("grandchildren")
    queue = bq.queue(name)
    parent_queue = bq.queue(parent_name)
    grand_queue = bq.queue(grand_name)
    events = bq.queue_events(name, lastEventId="0")
    make_worker(bq, grand_name, fail_bar)
    make_worker(bq, name, noop)
    flow = bq.flow_producer()
    tree = await flow.add(
        {
            "name": "parent-job",
            "queueName": parent_name,
            "data": {},
            "children": [
                {
                    "name": "child-job",
                    "data": {"foo": "qux"},
                    "queueName": name,
                    "opts": {option: True},
                    "children": [
                        {
                            "name": "child-job",
                            "data": {"foo": "bar"},
                            "queueName": grand_name,
                            "opts": {"failParentOnFailure": True},
                        },
                        {"name": "child-job", "data": {"foo": "baz"}, "queueName": grand_name},
                    ],
                }
            ],
        }
    )
    failures = future_of(events, "failed")
    job, children = tree["job"], tree["children"]
    assert await job.getState() == "waiting-children"
    [(args, _)] = await wait_for(failures)
    grandchild_id = children[0]["children"][0]["job"].id
    reason = f"child {grand_queue.qualifiedName}:{grandchild_id} failed"
    assert args["jobId"] == children[0]["job"].id
    assert args["prev"] == "active"
    assert args["failedReason"] == reason

    grandchild = await grand_queue.getJob(grandchild_id)
    assert await grandchild.getState() == "failed"
    assert grandchild.failedReason == "failed"
    child = await queue.getJob(children[0]["job"].id)
    assert await child.getState() == "failed"
    assert child.failedReason == reason
    parent = await parent_queue.getJob(job.id)
    assert await parent.getState() == "waiting"


def continue_tree(
    name: str, parent_name: str, foos: list[str], **parent_opts: Any
) -> dict[str, Any]:
    """A parent whose children named ``bar`` continue their parent on failure."""
    return {
        "name": "parent-job",
        "queueName": parent_name,
        "data": {},
        "opts": parent_opts,
        "children": [
            {
                "name": "child-job",
                "data": {"foo": foo},
                "queueName": name,
                **({"opts": {"continueParentOnFailure": True}} if foo == "bar" else {}),
            }
            for foo in foos
        ],
    }


# Node: tests/flow.test.ts › when continueParentOnFailure option is provided › should start processing parent after a child fails
async def test_continue_parent_on_failure_starts_the_parent_when_its_child_fails(bq: Bull) -> None:
    name, parent_name = bq.name(), bq.name("parent")
    flow = bq.flow_producer()
    tree = await flow.add(continue_tree(name, parent_name, ["bar"]))
    child = tree["children"][0]["job"]
    seen: list[str] = []

    async def parent(job: Any, token: str) -> Any:
        seen.append(await child.getState())
        return await job.getChildrenValues()

    parent_worker = make_worker(bq, parent_name, parent)
    parent_done = future_of(parent_worker, "completed")

    async def fail(job: Any, token: str) -> None:
        raise Exception("failed")

    make_worker(bq, name, fail)
    [(_, processed)] = await wait_for(parent_done)
    assert seen == ["failed"]
    assert processed == {}


# Node: tests/flow.test.ts › when continueParentOnFailure option is provided › should start processing parent after child fails even with more unprocessed children
async def test_continue_parent_on_failure_does_not_wait_for_the_other_children(bq: Bull) -> None:
    name, parent_name = bq.name(), bq.name("parent")
    flow = bq.flow_producer()
    tree = await flow.add(continue_tree(name, parent_name, ["baz", "baz", "bar", "baz", "baz"]))
    to_fail = tree["children"][2]["job"]
    parent_started: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def parent(job: Any, token: str) -> None:
        if not parent_started.done():
            parent_started.set_result(await to_fail.getState())

    parent_worker = make_worker(bq, parent_name, parent)

    async def child(job: Any, token: str) -> None:
        if job.id == to_fail.id:
            raise Exception("failed")

    children_worker = make_worker(bq, name, child)
    children_done = future_of(children_worker, "completed", 4)
    assert await wait_for(parent_started) == "failed"
    await stop(parent_worker)
    await wait_for(children_done)


# Node: tests/flow.test.ts › when continueParentOnFailure option is provided › should ignore parent if a child has already failed and another one fails afterwards
async def test_continue_parent_on_failure_starts_the_parent_once(bq: Bull) -> None:
    name, parent_name = bq.name(), bq.name("parent")
    flow = bq.flow_producer()
    tree = await flow.add(continue_tree(name, parent_name, ["baz", "bar", "bar", "baz", "baz"]))
    to_fail = tree["children"][1]["job"]
    parent_runs: list[str] = []

    async def parent(job: Any, token: str) -> None:
        parent_runs.append(await to_fail.getState())

    parent_worker = make_worker(bq, parent_name, parent)
    parent_finished = first(parent_worker, "completed")
    parent_failed = first(parent_worker, "failed")

    async def child(job: Any, token: str) -> None:
        if job.data["foo"] == "bar":
            raise Exception("failed")

    children_worker = make_worker(bq, name, child)
    children_finished = future_of(children_worker, "completed", 3)
    children_failed = future_of(children_worker, "failed", 2)
    await wait_for(asyncio.wait({parent_finished, parent_failed}, return_when="FIRST_COMPLETED"))
    await wait_for(children_finished)
    await wait_for(children_failed)
    await stop(parent_worker)
    # the second failure does not queue the parent again
    assert parent_runs == ["failed"]
    assert await tree["job"].getState() in ("completed", "failed")


# Node: tests/flow.test.ts › when continueParentOnFailure option is provided › should move the parent to delayed after a child fails
async def test_continue_parent_on_failure_moves_a_delayed_parent_to_delayed(bq: Bull) -> None:
    name, parent_name = bq.name(), bq.name("parent")
    parent_queue = bq.queue(parent_name)
    flow = bq.flow_producer()
    tree = await flow.add(continue_tree(name, parent_name, ["bar"], delay=1000))

    async def fail(job: Any, token: str) -> None:
        raise Exception("failed")

    children_worker = make_worker(bq, name, fail)
    child_failed = future_of(children_worker, "failed")
    await wait_for(child_failed)
    counts = await parent_queue.getJobCounts("delayed", "waiting")
    assert counts == {"delayed": 1, "waiting": 0}
    child = tree["children"][0]["job"]
    seen: list[str] = []

    async def parent(job: Any, token: str) -> None:
        seen.append(await child.getState())

    parent_worker = make_worker(bq, parent_name, parent)
    await wait_for(future_of(parent_worker, "completed"))
    assert seen == ["failed"]


# Node: tests/flow.test.ts › when continueParentOnFailure option is provided › should move the parent to prioritized after a child fails
async def test_continue_parent_on_failure_moves_a_prioritized_parent_to_prioritized(
    bq: Bull,
) -> None:
    name, parent_name = bq.name(), bq.name("parent")
    parent_queue = bq.queue(parent_name)
    flow = bq.flow_producer()
    tree = await flow.add(continue_tree(name, parent_name, ["bar"], priority=42))

    async def fail(job: Any, token: str) -> None:
        raise Exception("failed")

    children_worker = make_worker(bq, name, fail)
    await wait_for(future_of(children_worker, "failed"))
    counts = await parent_queue.getJobCounts("prioritized", "delayed", "waiting")
    assert counts == {"prioritized": 1, "delayed": 0, "waiting": 0}
    child = tree["children"][0]["job"]
    seen: list[str] = []

    async def parent(job: Any, token: str) -> None:
        seen.append(await child.getState())

    parent_worker = make_worker(bq, parent_name, parent)
    await wait_for(future_of(parent_worker, "completed"))
    assert seen == ["failed"]


# Node: tests/flow.test.ts › when parent has removeOnComplete as true › removes processed data
async def test_a_parent_removed_on_complete_takes_its_children_values_with_it(bq: Bull) -> None:
    name, parent_name = bq.name(), bq.name("parent")
    parent_queue = bq.queue(parent_name)
    values = [{"bar": "something"}, {"baz": "something"}, {"qux": "something"}]

    async def child(job: Any, token: str) -> Any:
        return values[job.data["idx"]]

    async def parent(job: Any, token: str) -> Any:
        return await job.getChildrenValues()

    parent_worker = make_worker(bq, parent_name, parent)
    make_worker(bq, name, child)
    parent_done = future_of(parent_worker, "completed")
    flow = bq.flow_producer()
    tree = await flow.add(
        {
            "name": "parent-job",
            "queueName": parent_name,
            "data": {},
            "opts": {"removeOnComplete": True},
            "children": [
                {"name": "child-job", "data": {"idx": i, "foo": foo}, "queueName": name}
                for i, foo in enumerate(["bar", "baz", "qux"])
            ],
        }
    )
    assert await tree["job"].getState() == "waiting-children"
    assert len(tree["children"]) == 3
    [(done, children_values)] = await wait_for(parent_done)
    for i, c in enumerate(tree["children"]):
        assert children_values[key_of(c["job"])] == values[i]
    assert await parent_queue.getJob(done.id) is None
    assert await done.getChildrenValues() == {}


# Node: tests/flow.test.ts › should process parent when children is an empty array
async def test_a_flow_node_with_no_children_is_a_plain_job(bq: Bull) -> None:
    parent_name = bq.name("parent")
    parent_worker = make_worker(bq, parent_name, noop)
    parent_done = future_of(parent_worker, "completed")
    flow = bq.flow_producer()
    tree = await flow.add(
        {"name": "parent-job", "queueName": parent_name, "data": {}, "children": []}
    )
    assert "job" in tree
    assert "children" not in tree
    await wait_for(parent_done)


# Node: tests/flow.test.ts › should allow passing custom jobId in options
async def test_a_flow_parent_can_have_a_custom_job_id(bq: Bull) -> None:
    name, parent_name = bq.name(), bq.name("parent")
    values = [{"bar": "something"}, {"baz": "something"}, {"qux": "something"}]

    async def child(job: Any, token: str) -> Any:
        return values[job.data["idx"]]

    async def parent(job: Any, token: str) -> Any:
        return await job.getChildrenValues()

    parent_worker = make_worker(bq, parent_name, parent)
    parent_done = future_of(parent_worker, "completed")
    flow = bq.flow_producer()
    tree = await flow.add(
        {
            "name": "parent-job",
            "queueName": parent_name,
            "data": {},
            "opts": {"jobId": "my-parent-job-id"},
            "children": [
                {"name": "child-job", "data": {"idx": i, "foo": foo}, "queueName": name}
                for i, foo in enumerate(["bar", "baz", "qux"])
            ],
        }
    )
    job, children = tree["job"], tree["children"]
    assert job.id == "my-parent-job-id"
    assert await job.getState() == "waiting-children"
    assert [c["job"].data["foo"] for c in children] == ["bar", "baz", "qux"]
    make_worker(bq, name, child)
    [(done, children_values)] = await wait_for(parent_done)
    assert done.id == "my-parent-job-id"
    assert len(children_values) == 3
    for i, c in enumerate(children):
        assert children_values[key_of(c["job"])] == values[i]


# Node: tests/flow.test.ts › should process a chain of jobs
async def test_a_chain_of_jobs_runs_from_the_deepest_up(bq: Bull) -> None:
    name, top_name = bq.name(), bq.name("top")
    queue = bq.queue(name)
    values = [
        {"idx": 0, "bar": "something"},
        {"idx": 1, "baz": "something"},
        {"idx": 2, "qux": "something"},
    ]
    seen: list[tuple[int, dict[str, Any], int]] = []

    async def child(job: Any, token: str) -> Any:
        children_values = await job.getChildrenValues()
        waiting_children = (await queue.getJobCounts("waiting-children"))["waiting-children"]
        seen.append((job.data["idx"], children_values, waiting_children))
        return values[job.data["idx"]]

    async def top(job: Any, token: str) -> Any:
        return await job.getChildrenValues()

    top_worker = make_worker(bq, top_name, top)
    top_done = future_of(top_worker, "completed")
    make_worker(bq, name, child)
    flow = bq.flow_producer()
    tree = await flow.add(
        {
            "name": "root-job",
            "queueName": top_name,
            "data": {},
            "children": [
                {
                    "name": "child-job",
                    "data": {"idx": 0, "foo": "bar"},
                    "queueName": name,
                    "children": [
                        {
                            "name": "child-job",
                            "data": {"idx": 1, "foo": "baz"},
                            "queueName": name,
                            "children": [
                                {
                                    "name": "child-job",
                                    "data": {"idx": 2, "foo": "qux"},
                                    "queueName": name,
                                }
                            ],
                        }
                    ],
                }
            ],
        }
    )
    assert await tree["job"].isWaitingChildren()
    first_child = tree["children"][0]
    second = first_child["children"][0]
    third = second["children"][0]
    assert first_child["job"].data["foo"] == "bar"
    assert second["job"].data["foo"] == "baz"
    assert third["job"].data["foo"] == "qux"
    [(_, top_values)] = await wait_for(top_done)
    assert [s[0] for s in seen] == [2, 1, 0]
    assert seen[1][1] == {key_of(third["job"]): values[2]}
    assert seen[1][2] == 1
    assert seen[2][1] == {key_of(second["job"]): values[1]}
    assert seen[2][2] == 0
    assert top_values == {key_of(first_child["job"]): values[0]}


# Node: tests/flow.test.ts › when parent has delay › moves process to delayed after children are processed
async def test_a_delayed_parent_is_delayed_once_its_children_complete(bq: Bull) -> None:
    name, top_name = bq.name(), bq.name("top")

    async def child(job: Any, token: str) -> Any:
        return {"idx": 0, "bar": "something"}

    async def top(job: Any, token: str) -> Any:
        return await job.getChildrenValues()

    children_worker = make_worker(bq, name, child, autorun=False)
    top_worker = make_worker(bq, top_name, top, autorun=False)
    events = bq.queue_events(top_name, lastEventId="0")
    child_done = future_of(children_worker, "completed")
    top_done = future_of(top_worker, "completed")
    flow = bq.flow_producer()
    tree = await flow.add(
        {
            "name": "root-job",
            "queueName": top_name,
            "data": {},
            "children": [
                {"name": "child-job", "data": {"idx": 0, "foo": "bar"}, "queueName": name}
            ],
            "opts": {"delay": 2000},
        }
    )
    delayed = first(events, "delayed", event_for(tree["job"].id))
    assert await tree["job"].isWaitingChildren()
    assert tree["children"][0]["job"].data["foo"] == "bar"
    start(children_worker)
    start(top_worker)
    await wait_for(child_done)
    (args, _) = await wait_for(delayed)
    remaining = int(args["delay"]) - int(time.time() * 1000)
    assert 1000 < remaining <= 2000
    assert await tree["job"].isDelayed()
    [(_, children_values)] = await wait_for(top_done)
    assert children_values == {key_of(tree["children"][0]["job"]): {"idx": 0, "bar": "something"}}


# Node: tests/flow.test.ts › when children have delay › moves children to delayed
async def test_a_delayed_child_is_added_as_delayed(bq: Bull) -> None:
    name, top_name = bq.name(), bq.name("top")

    async def child(job: Any, token: str) -> Any:
        return {"idx": 0, "bar": "something"}

    async def top(job: Any, token: str) -> Any:
        return await job.getChildrenValues()

    make_worker(bq, name, child)
    top_worker = make_worker(bq, top_name, top)
    top_done = future_of(top_worker, "completed")
    flow = bq.flow_producer()
    tree = await flow.add(
        {
            "name": "root-job",
            "queueName": top_name,
            "data": {},
            "children": [
                {
                    "name": "child-job",
                    "data": {"idx": 0, "foo": "bar"},
                    "queueName": name,
                    "opts": {"delay": 1000},
                }
            ],
        }
    )
    assert await tree["job"].isWaitingChildren()
    assert await tree["children"][0]["job"].isDelayed()
    [(_, children_values)] = await wait_for(top_done)
    assert children_values == {key_of(tree["children"][0]["job"]): {"idx": 0, "bar": "something"}}


# Node: tests/flow.test.ts › should not process parent if child fails
async def test_a_parent_is_not_processed_when_its_child_fails(bq: Bull) -> None:
    name, parent_name = bq.name(), bq.name("parent")
    parent_queue = bq.queue(parent_name)

    async def fail(job: Any, token: str) -> None:
        raise Exception("failed job")

    children_worker = make_worker(bq, name, fail)
    child_failed = future_of(children_worker, "failed")
    flow = bq.flow_producer()
    tree = await flow.add(
        {
            "name": "parent-job",
            "queueName": parent_name,
            "data": {},
            "children": [
                {"name": "child-job", "data": {"idx": 0, "foo": "bar"}, "queueName": name}
            ],
        }
    )
    assert len(tree["children"]) == 1
    assert tree["children"][0]["job"].data["foo"] == "bar"
    await wait_for(child_failed)
    await stop(children_worker)
    assert await parent_queue.getWaitingCount() == 0
    assert await tree["job"].getState() == "waiting-children"


# Node: tests/flow.test.ts › should not process parent until queue is unpaused
async def test_a_released_parent_waits_for_its_paused_queue(bq: Bull) -> None:
    name, parent_name = bq.name(), bq.name("parent")
    parent_queue = bq.queue(parent_name)
    children_worker = make_worker(bq, name, noop)
    child_done = future_of(children_worker, "completed")
    parent_runs: list[str] = []

    async def parent(job: Any, token: str) -> None:
        parent_runs.append(job.id)

    parent_worker = make_worker(bq, parent_name, parent)
    parent_done = future_of(parent_worker, "completed")
    await parent_queue.pause()
    flow = bq.flow_producer()
    tree = await flow.add(
        {
            "name": "parent-job",
            "queueName": parent_name,
            "data": {},
            "children": [
                {"name": "child-job", "data": {"idx": 0, "foo": "bar"}, "queueName": name}
            ],
        }
    )
    assert len(tree["children"]) == 1
    await wait_for(child_done)
    await stop(children_worker)

    async def parent_waiting() -> bool:
        return await parent_queue.getWaitingCount() == 1

    await eventually(parent_waiting)
    assert parent_runs == []
    await parent_queue.resume()
    await wait_for(parent_done)
    assert await parent_queue.getWaitingCount() == 0


# Node: tests/flow.test.ts › .addBulk › should allow parent opts on the root job
async def test_add_bulk_root_can_have_a_parent_of_its_own(bq: Bull) -> None:
    name, parent_name, grand_name = bq.name(), bq.name("parent"), bq.name("grandparent")
    grand_queue = bq.queue(grand_name)
    grand_job = await grand_queue.add("grandparent", {"foo": "bar"})
    values = [{"bar": "something"}, {"baz": "something"}]

    async def child(job: Any, token: str) -> Any:
        return values[job.data["idx"]]

    async def parent(job: Any, token: str) -> Any:
        return await job.getChildrenValues()

    parent_worker = make_worker(bq, parent_name, parent)
    make_worker(bq, name, child)
    parent_done = future_of(parent_worker, "completed")
    flow = bq.flow_producer()
    [tree] = await flow.addBulk(
        [
            {
                "name": "parent-job",
                "queueName": parent_name,
                "data": {},
                "children": [
                    {"name": "child-job", "data": {"idx": 0, "foo": "bar"}, "queueName": name},
                    {"name": "child-job", "data": {"idx": 1, "foo": "baz"}, "queueName": name},
                ],
                "opts": {"parent": {"id": grand_job.id, "queue": grand_queue.qualifiedName}},
            }
        ]
    )
    job = tree["job"]
    assert job.parentKey == f"{grand_queue.qualifiedName}:{grand_job.id}"
    assert await job.getState() == "waiting-children"
    assert len(tree["children"]) == 2
    [(_, children_values)] = await wait_for(parent_done)
    for i, c in enumerate(tree["children"]):
        assert children_values[key_of(c["job"])] == values[i]


# Node: tests/flow.test.ts › .addBulk › should process jobs
async def test_add_bulk_adds_several_flows(bq: Bull) -> None:
    name, root_name = bq.name(), bq.name("root")
    values = [{"idx": 0, "bar": "something"}, {"idx": 1, "baz": "something"}]

    async def child(job: Any, token: str) -> Any:
        return values[job.data["idx"]]

    async def root(job: Any, token: str) -> Any:
        return await job.getChildrenValues()

    flow = bq.flow_producer()
    trees = await flow.addBulk(
        [
            {
                "name": f"root-job-{i + 1}",
                "queueName": root_name,
                "data": {},
                "children": [
                    {"name": "child-job", "data": {"idx": i, "foo": foo}, "queueName": name}
                ],
            }
            for i, foo in enumerate(["bar", "baz"])
        ]
    )
    assert len(trees) == 2
    for i, foo in enumerate(["bar", "baz"]):
        assert set(trees[i]) == {"job", "children"}
        assert await trees[i]["job"].isWaitingChildren()
        assert len(trees[i]["children"]) == 1
        assert trees[i]["children"][0]["job"].data["foo"] == foo
    root_worker = make_worker(bq, root_name, root)
    roots_done = future_of(root_worker, "completed", 2)
    make_worker(bq, name, child)
    done = await wait_for(roots_done)
    by_name = {job.name: value for job, value in done}
    for i in range(2):
        child_job = trees[i]["children"][0]["job"]
        assert by_name[f"root-job-{i + 1}"] == {key_of(child_job): values[i]}


def two_level_tree(name: str, parent_name: str, **opts: Any) -> dict[str, Any]:
    """A parent with a leaf child and a child that has a leaf child of its own; ``opts`` on
    the inner child and its child."""
    inner: dict[str, Any] = {"opts": opts} if opts else {}
    return {
        "name": "parent-job",
        "queueName": parent_name,
        "data": {},
        "children": [
            {"name": "child-job", "data": {"idx": 0, "foo": "bar"}, "queueName": name},
            {
                "name": "child-job",
                "data": {"idx": 0, "foo": "baz"},
                "queueName": name,
                "children": [
                    {
                        "name": "child-job",
                        "data": {"idx": 0, "foo": "qux"},
                        "queueName": name,
                        **inner,
                    }
                ],
                **inner,
            },
        ],
    }


async def check_fresh_tree(
    bq: Bull, queue: Any, tree: dict[str, Any], parent_key: str, exact: bool = True
) -> None:
    assert await tree["job"].getState() == "waiting-children"
    assert await tree["children"][0]["job"].getState() == "waiting"
    assert await tree["children"][1]["job"].getState() == "waiting-children"
    assert await tree["children"][1]["children"][0]["job"].getState() == "waiting"
    expected = {"id": tree["job"].id, "queueKey": parent_key}
    for child in tree["children"]:
        stored = await bq.Job.fromId(queue, child["job"].id)
        if exact:
            assert stored.parent == expected
        else:  # Node: toMatchObject
            assert {k: stored.parent.get(k) for k in expected} == expected


# Node: tests/flow.test.ts › .remove › should remove all children when removing a parent
async def test_removing_a_parent_removes_its_children(bq: Bull) -> None:
    name, parent_name = bq.name(), bq.name("parent")
    queue = bq.queue(name)
    parent_queue = bq.queue(parent_name)
    flow = bq.flow_producer()
    tree = await flow.add(two_level_tree(name, parent_name))
    await check_fresh_tree(bq, queue, tree, parent_queue.qualifiedName)
    await tree["job"].remove()
    assert await bq.Job.fromId(parent_queue, tree["job"].id) is None
    for child in tree["children"]:
        assert await bq.Job.fromId(queue, child["job"].id) is None
    assert await tree["children"][0]["job"].getState() == "unknown"
    assert await tree["children"][1]["job"].getState() == "unknown"
    assert await tree["job"].getState() == "unknown"
    assert await queue.getJobCountByTypes("waiting") == 0


# Node: tests/flow.test.ts › .remove › when removeChildren option is provided as false › does not remove any children when removing a parent
async def test_removing_a_parent_without_its_children_keeps_them(bq: Bull) -> None:
    name, parent_name = bq.name(), bq.name("parent")
    queue = bq.queue(name)
    parent_queue = bq.queue(parent_name)
    flow = bq.flow_producer()
    tree = await flow.add(two_level_tree(name, parent_name))
    await check_fresh_tree(bq, queue, tree, parent_queue.qualifiedName)
    await tree["job"].remove({"removeChildren": False})
    assert await bq.Job.fromId(parent_queue, tree["job"].id) is None
    for child in tree["children"]:
        assert await bq.Job.fromId(queue, child["job"].id) is not None
    assert await tree["children"][0]["job"].getState() == "waiting"
    assert await tree["children"][1]["job"].getState() == "waiting-children"
    assert await tree["job"].getState() == "unknown"
    assert await queue.getJobCountByTypes("waiting") == 2


# Node: tests/flow.test.ts › .remove › when there are processed children › removes all children when removing a parent
async def test_removing_a_completed_parent_removes_its_completed_children(bq: Bull) -> None:
    name, parent_name = bq.name(), bq.name("parent")
    queue = bq.queue(name)
    parent_queue = bq.queue(parent_name)
    flow = bq.flow_producer()
    tree = await flow.add(two_level_tree(name, parent_name))
    await check_fresh_tree(bq, queue, tree, parent_queue.qualifiedName)
    parent_worker = make_worker(bq, parent_name, noop)
    parent_done = future_of(parent_worker, "completed")
    make_worker(bq, name, noop)
    await wait_for(parent_done)
    await tree["job"].remove()
    assert await bq.Job.fromId(parent_queue, tree["job"].id) is None
    for child in tree["children"]:
        assert await bq.Job.fromId(queue, child["job"].id) is None
    assert await queue.getJobCountByTypes("completed") == 0
    assert await tree["children"][0]["job"].getState() == "unknown"
    assert await tree["children"][1]["job"].getState() == "unknown"
    assert await tree["job"].getState() == "unknown"


# Node: tests/flow.test.ts › .remove › when there are processed children › when there is a grand parent › removes all children when removing a parent, but not grandparent
async def test_removing_a_completed_middle_parent_releases_the_grandparent(bq: Bull) -> None:
    name, parent_name, grand_name = bq.name(), bq.name("parent"), bq.name("grandparent")
    queue = bq.queue(name)
    parent_queue = bq.queue(parent_name)
    flow = bq.flow_producer()
    inner = two_level_tree(name, parent_name)
    tree = await flow.add(
        {"name": "grandparent-job", "queueName": grand_name, "data": {}, "children": [inner]}
    )
    middle = tree["children"][0]
    assert await tree["job"].getState() == "waiting-children"
    await check_fresh_tree(bq, queue, middle, parent_queue.qualifiedName)
    parent_worker = make_worker(bq, parent_name, noop)
    parent_done = future_of(parent_worker, "completed")
    make_worker(bq, name, noop)
    await wait_for(parent_done)
    await middle["job"].remove()
    assert await bq.Job.fromId(parent_queue, middle["job"].id) is None
    for child in middle["children"]:
        assert await bq.Job.fromId(queue, child["job"].id) is None
    assert await queue.getJobCountByTypes("completed") == 0
    assert await middle["children"][0]["job"].getState() == "unknown"
    assert await middle["children"][1]["job"].getState() == "unknown"
    assert await middle["job"].getState() == "unknown"
    assert await tree["job"].getState() == "waiting"


# Node: tests/flow.test.ts › .remove › when there are unsuccessful children › removes all children when removing a parent
async def test_removing_a_failed_parent_removes_its_failed_children(bq: Bull) -> None:
    name, parent_name = bq.name(), bq.name("parent")
    queue = bq.queue(name)
    parent_queue = bq.queue(parent_name)
    flow = bq.flow_producer()
    tree = await flow.add(two_level_tree(name, parent_name, failParentOnFailure=True))
    await check_fresh_tree(bq, queue, tree, parent_queue.qualifiedName, exact=False)
    events = bq.queue_events(parent_name, lastEventId="0")
    failed = first(events, "failed", event_for(tree["job"].id))

    async def fail(job: Any, token: str) -> None:
        raise Exception("failure")

    children_worker = make_worker(bq, name, fail, autorun=False)
    make_worker(bq, parent_name, noop)
    start(children_worker)
    await wait_for(failed)
    await tree["job"].remove()
    assert await bq.Job.fromId(parent_queue, tree["job"].id) is None
    for child in tree["children"]:
        assert await bq.Job.fromId(queue, child["job"].id) is None
    assert await queue.getJobCountByTypes("failed") == 0
    assert await tree["children"][0]["job"].getState() == "unknown"
    assert await tree["children"][1]["job"].getState() == "unknown"
    assert await tree["job"].getState() == "unknown"


# Node: tests/flow.test.ts › .remove › should not remove anything if there is a locked job in the tree
async def test_a_flow_with_a_locked_job_cannot_be_removed(bq: Bull) -> None:
    name, parent_name = bq.name(), bq.name("parent")
    worker = make_worker(bq, name, None)
    flow = bq.flow_producer()
    tree = await flow.add(
        {
            "name": "parent-job",
            "queueName": parent_name,
            "data": {},
            "children": [
                {"name": "child-job", "data": {"idx": 0, "foo": "bar"}, "queueName": name},
                {"name": "child-job", "data": {"idx": 0, "foo": "baz"}, "queueName": name},
            ],
        }
    )
    next_job = await worker.getNextJob("1234")
    assert next_job is not None
    assert await next_job.getState() == "active"
    with pytest.raises(
        Exception,
        match=re.escape(
            f"Job {tree['job'].id} could not be removed because it is locked by another worker"
        ),
    ):
        await tree["job"].remove()
    assert await tree["job"].getState() == "waiting-children"
    assert await tree["children"][0]["job"].getState() == "active"
    assert await tree["children"][1]["job"].getState() == "waiting"


# Node: tests/flow.test.ts › .remove › should remove from parent dependencies and move parent to wait
async def test_removing_the_only_child_releases_its_parent(bq: Bull) -> None:
    name, parent_name = bq.name(), bq.name("parent")
    flow = bq.flow_producer()
    tree = await flow.add(
        {
            "name": "root-job",
            "queueName": parent_name,
            "data": {},
            "children": [
                {
                    "name": "child-job",
                    "data": {"idx": 0, "foo": "bar"},
                    "queueName": name,
                    "children": [
                        {
                            "name": "child-job",
                            "data": {"idx": 1, "foo": "baz"},
                            "queueName": name,
                            "children": [
                                {
                                    "name": "child-job",
                                    "data": {"idx": 2, "foo": "qux"},
                                    "queueName": name,
                                }
                            ],
                        }
                    ],
                }
            ],
        }
    )
    # from the deepest child upwards, each parent is released when its child goes
    for node in (tree["children"][0]["children"][0], tree["children"][0], tree):
        assert await node["job"].getState() == "waiting-children"
        await node["children"][0]["job"].remove()
        assert await node["job"].getState() == "waiting"


# Node: tests/flow.test.ts › .remove › should only move parent to wait when all children have been removed
async def test_a_parent_is_released_only_when_its_last_child_is_removed(bq: Bull) -> None:
    name, parent_name = bq.name(), bq.name("parent")
    flow = bq.flow_producer()
    tree = await flow.add(
        {
            "name": "parent-job",
            "queueName": parent_name,
            "data": {},
            "children": [
                {"name": "child-job", "data": {"idx": 0, "foo": "bar"}, "queueName": name},
                {"name": "child-job", "data": {"idx": 0, "foo": "baz"}, "queueName": name},
            ],
        }
    )
    first_child, second_child = (c["job"] for c in tree["children"])
    assert await tree["job"].getState() == "waiting-children"
    assert await first_child.getState() == "waiting"
    await first_child.remove()
    assert await first_child.getState() == "unknown"
    assert await tree["job"].getState() == "waiting-children"
    await second_child.remove()
    assert await second_child.getState() == "unknown"
    assert await tree["job"].getState() == "waiting"


# Node: tests/flow.test.ts › .retry › when retrying a failed child › should update parent dependencies reference
async def test_a_retried_failed_child_then_releases_its_parent(bq: Bull) -> None:
    name, parent_name = bq.name(), bq.name("parent")
    queue = bq.queue(name)
    flow = bq.flow_producer()
    await flow.add(
        {
            "name": "parent-job",
            "queueName": parent_name,
            "data": {},
            "children": [
                {"name": "child-job", "data": {"idx": 0, "foo": "bar"}, "queueName": name}
            ],
        }
    )

    async def child(job: Any, token: str) -> None:
        if job.data["idx"] == 0:
            await job.updateData({"idx": 1, "foo": "baz"})
            raise Exception("error")

    parent_worker = make_worker(bq, parent_name, noop)
    parent_done = future_of(parent_worker, "completed")
    children_worker = make_worker(bq, name, child)
    [(failed_job, _)] = await wait_for(future_of(children_worker, "failed"))
    await failed_job.retry("failed")
    await wait_for(parent_done)
    assert await queue.getJobCountByTypes("completed") == 1


@pytest.mark.parametrize("option", ["ignoreDependencyOnFailure", "continueParentOnFailure"])
# Node: tests/flow.test.ts › .retry › when retrying a failed child with ignoreDependencyOnFailure › should move the child back to the parent dependencies
# Node: tests/flow.test.ts › .retry › when retrying a failed child with continueParentOnFailure › should move the child back to the parent dependencies
async def test_a_failed_child_that_released_its_parent_can_be_retried(
    bq: Bull, option: str
) -> None:
    name, parent_name = bq.name(), bq.name("parent")
    queue = bq.queue(name)
    flow = bq.flow_producer()
    tree = await flow.add(
        {
            "name": "parent-job",
            "queueName": parent_name,
            "data": {},
            "children": [
                {
                    "name": "child-job",
                    "data": {"foo": "bar"},
                    "queueName": name,
                    "opts": {option: True, "attempts": 1},
                }
            ],
        }
    )

    async def fail(job: Any, token: str) -> None:
        raise Exception("error")

    children_worker = make_worker(bq, name, fail)
    await wait_for(future_of(children_worker, "failed"))
    await stop(children_worker)
    child = await queue.getJob(tree["children"][0]["job"].id)
    await child.retry("failed")
    assert await child.getState() == "waiting"


# Node: tests/flow.test.ts › .retry › when retrying a completed child › should update parent dependencies reference
async def test_a_retried_completed_child_runs_again_before_its_parent(bq: Bull) -> None:
    name, parent_name = bq.name(), bq.name("parent")
    queue = bq.queue(name)
    flow = bq.flow_producer()
    await flow.add(
        {
            "name": "parent-job",
            "queueName": parent_name,
            "data": {},
            "children": [
                {"name": "child-job", "data": {"idx": 0}, "queueName": name},
                {"name": "child-job", "data": {"idx": 1}, "queueName": name},
            ],
        }
    )
    release = asyncio.Event()

    async def child(job: Any, token: str) -> None:
        await job.updateData({"idx": job.data["idx"] + 2})
        if job.data["idx"] != 2:
            await release.wait()

    parent_worker = make_worker(bq, parent_name, noop)
    parent_done = future_of(parent_worker, "completed")
    children_worker = make_worker(bq, name, child)
    first_done = first(children_worker, "completed", lambda job, *rest: job.data["idx"] == 2)
    (done_job, _) = await wait_for(first_done)
    await done_job.retry("completed")
    release.set()
    await wait_for(parent_done)
    assert await queue.getJobCountByTypes("completed") == 2


# Node: tests/flow.test.ts › when root parent job has deduplication option › should return deduplicated root job id when flow has no children
async def test_a_deduplicated_flow_root_gets_the_id_of_the_kept_job(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    flow = bq.flow_producer()
    opts = {"deduplication": {"id": "dedup-root-without-children"}, "delay": 1000}
    first_tree = await flow.add(
        {"name": "root", "data": {"order": 1}, "queueName": name, "opts": opts}
    )
    second_tree = await flow.add(
        {"name": "root", "data": {"order": 2}, "queueName": name, "opts": opts}
    )
    assert second_tree["job"].id == first_tree["job"].id
    assert await queue.getDeduplicationJobId("dedup-root-without-children") == first_tree["job"].id


# Node: tests/flow.test.ts › when root parent job has deduplication option › should return deduplicated ids from addBulk when roots share deduplication id
async def test_add_bulk_roots_sharing_a_deduplication_id_get_one_id(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    flow = bq.flow_producer()
    opts = {"deduplication": {"id": "dedup-bulk-root"}, "delay": 1000}
    first_tree, second_tree = await flow.addBulk(
        [
            {"name": "root-1", "data": {"idx": 1}, "queueName": name, "opts": opts},
            {"name": "root-2", "data": {"idx": 2}, "queueName": name, "opts": opts},
        ]
    )
    assert second_tree["job"].id == first_tree["job"].id
    assert await queue.getDeduplicationJobId("dedup-bulk-root") == first_tree["job"].id


# Node: tests/flow.test.ts › when root parent job has deduplication option › should return same deduplicated id for concurrent add calls
async def test_concurrent_deduplicated_flow_adds_get_one_id(bq: Bull) -> None:
    name = bq.name()
    flow = bq.flow_producer()
    opts = {"deduplication": {"id": "dedup-concurrent-root"}, "delay": 1000}
    trees = await settle(
        *(
            flow.add({"name": f"root-{i}", "data": {"index": i}, "queueName": name, "opts": opts})
            for i in range(8)
        )
    )
    assert len({tree["job"].id for tree in trees}) == 1


# Node: tests/flow.test.ts › when root parent job has deduplication option › should not corrupt id mapping for successful jobs when some addBulk commands fail
async def test_add_bulk_keeps_the_ids_of_good_roots_when_another_root_fails(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    flow = bq.flow_producer()
    valid_tree, invalid_tree = await flow.addBulk(
        [
            {
                "name": "valid-root",
                "data": {},
                "queueName": name,
                "opts": {"deduplication": {"id": "dedup-valid-on-partial-failure"}, "delay": 1000},
            },
            {
                "name": "invalid-root",
                "data": {},
                "queueName": name,
                "opts": {"parent": {"id": "missing-parent", "queue": queue.qualifiedName}},
            },
        ]
    )
    assert await queue.getJob(valid_tree["job"].id) is not None
    assert await queue.getJob(str(invalid_tree["job"].id)) is None


# Node: tests/flow.test.ts › when add is called with a non-existing parent › throws an error instead of silently dropping the job
async def test_a_flow_under_a_missing_parent_is_refused(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    flow = bq.flow_producer()
    missing = f"missing-parent-{bq.name()}"
    with pytest.raises(
        Exception,
        match=re.escape(f"Missing key for parent job {queue.qualifiedName}:{missing}. addJob"),
    ):
        await flow.add(
            {
                "name": "orphan-child",
                "queueName": name,
                "data": {"foo": "bar"},
                "opts": {
                    "parent": {"id": missing, "queue": queue.qualifiedName},
                    "jobId": "orphan-child-id",
                },
            }
        )
    assert await queue.getJob("orphan-child-id") is None


FACADE_PENDING: dict[str, str] = {}
