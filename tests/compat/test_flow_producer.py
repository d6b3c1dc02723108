"""FlowProducer through the facade: trees across queues and each child failure option."""

from __future__ import annotations

import asyncio

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import pgjobs
from bullmq_compat import FlowProducer, Queue, UnrecoverableError, WaitingChildrenError, Worker
from pgjobs.telemetry import Telemetry
from tests.helpers import eventually


def processor(log: list[str], done: asyncio.Event, expected: int):
    async def process(job, token):
        if job.data.get("fail"):
            log.append(f"fail:{job.name}")
            if len(log) >= expected:
                done.set()
            raise UnrecoverableError(f"{job.name} broke")
        log.append(job.name)
        values = await job.getChildrenValues() if job.name.startswith("parent") else {}
        if len(log) >= expected:
            done.set()
        return {"name": job.name, "children": sorted(v["name"] for v in values.values())}

    return process


async def test_children_run_first_and_the_parent_reads_their_values(opts: dict) -> None:
    producer = FlowProducer(opts)
    tree = await producer.add(
        {
            "name": "parent",
            "queueName": "renders",
            "data": {},
            "children": [
                {"name": "child-a", "queueName": "steps", "data": {}},
                {"name": "child-b", "queueName": "steps", "data": {}},
            ],
        }
    )
    assert isinstance(tree["job"].id, str) and len(tree["children"]) == 2
    parent_queue = Queue("renders", opts)
    assert await tree["job"].getState() == "waiting-children"
    log: list[str] = []
    done = asyncio.Event()
    steps = Worker("steps", processor(log, done, 3), opts)
    renders = Worker("renders", processor(log, done, 3), opts)
    await asyncio.wait_for(done.wait(), 30)
    await steps.close()
    await renders.close()
    assert sorted(log[:2]) == ["child-a", "child-b"] and log[2] == "parent"
    parent = await parent_queue.getJob(tree["job"].id)
    assert parent is not None and parent.returnvalue == {
        "name": "parent",
        "children": ["child-a", "child-b"],
    }
    await parent_queue.close()
    await producer.close()


@pytest.mark.parametrize(
    ("child_opts", "parent_state"),
    [
        ({}, "waiting-children"),  # BullMQ's default: the parent waits for the child's retry
        ({"failParentOnFailure": True}, "failed"),
        ({"ignoreDependencyOnFailure": True}, "completed"),
        ({"removeDependencyOnFailure": True}, "completed"),
        ({"continueParentOnFailure": True}, "completed"),
    ],
)
async def test_child_failure_options(opts: dict, child_opts: dict, parent_state: str) -> None:
    producer = FlowProducer(opts)
    tree = await producer.add(
        {
            "name": "parent",
            "queueName": "fq",
            "data": {},
            "children": [
                {"name": "child", "queueName": "fq", "data": {"fail": True}, "opts": child_opts}
            ],
        }
    )
    log: list[str] = []
    done = asyncio.Event()
    worker = Worker("fq", processor(log, done, 2 if parent_state == "completed" else 1), opts)
    await asyncio.wait_for(done.wait(), 30)

    async def settled() -> bool:
        child_failed = await tree["children"][0]["job"].getState() == "failed"
        return child_failed and await tree["job"].getState() == parent_state

    await eventually(settled)
    await worker.close()
    assert log[0] == "fail:child"
    if child_opts.get("ignoreDependencyOnFailure"):
        failures = await tree["job"].getIgnoredChildrenFailures()
        assert list(failures.values()) == ["child broke"]
    await producer.close()


async def test_continue_parent_runs_while_another_child_is_pending(opts: dict) -> None:
    producer = FlowProducer(opts)
    tree = await producer.add(
        {
            "name": "parent",
            "queueName": "cq",
            "data": {},
            "children": [
                {
                    "name": "fails",
                    "queueName": "cq",
                    "data": {"fail": True},
                    "opts": {"continueParentOnFailure": True},
                },
                {"name": "later", "queueName": "cq", "data": {}, "opts": {"delay": 3_600_000}},
            ],
        }
    )
    log: list[str] = []
    done = asyncio.Event()
    worker = Worker("cq", processor(log, done, 2), opts)
    await asyncio.wait_for(done.wait(), 30)
    await worker.close()
    assert log == ["fail:fails", "parent"]
    assert await tree["children"][1]["job"].getState() == "delayed"
    await producer.close()


async def test_conflicting_failure_options_are_refused(opts: dict) -> None:
    producer = FlowProducer(opts)
    with pytest.raises(ValueError, match="cannot be used together"):
        await producer.add(
            {
                "name": "p",
                "queueName": "x",
                "data": {},
                "children": [
                    {
                        "name": "c",
                        "queueName": "x",
                        "data": {},
                        "opts": {"failParentOnFailure": True, "ignoreDependencyOnFailure": True},
                    }
                ],
            }
        )
    assert await Queue("x", opts).count() == 0
    await producer.close()


async def test_process_step_jobs_with_waiting_children(opts: dict) -> None:
    """BullMQ's "process step jobs" pattern: a parent adds children with ``parent`` while it
    runs, waits with moveToWaitingChildren + WaitingChildrenError, then finishes."""
    parents = Queue("steps", opts)
    children = Queue("step-children", opts)
    parent = await parents.add("parent", {"step": "initial"}, {"attempts": 1})
    done = asyncio.Event()
    waiting = asyncio.Event()
    seen: list[tuple[str, int]] = []

    async def parent_process(job, token):
        step = job.data["step"]
        seen.append((step, job.attemptsMade))
        if step == "initial":
            for n in (1, 2):
                await children.add(
                    "child", {"n": n}, {"parent": {"id": job.id, "queue": job.queueQualifiedName}}
                )
            await job.updateData({"step": "second"})
            step = "second"
        if step == "second":
            if await job.moveToWaitingChildren(token):
                waiting.set()
                raise WaitingChildrenError()
            await job.updateData({"step": "finish"})
        return sum((await job.getChildrenValues()).values())

    async def child_process(job, token):
        return job.data["n"] * 100

    parent_worker = Worker("steps", parent_process, opts)
    parent_worker.on("completed", lambda job, result: done.set())
    # The children run only once the parent waits for them: had they finished first,
    # moveToWaitingChildren would rightly return False and the parent finish in one run.
    await asyncio.wait_for(waiting.wait(), 30)
    child_worker = Worker("step-children", child_process, opts)
    await asyncio.wait_for(done.wait(), 30)
    await parent_worker.close()
    await child_worker.close()
    finished = await parents.getJob(parent.id)
    assert finished is not None and finished.returnvalue == 300
    assert finished.attemptsMade == 1  # waiting for children used no attempt
    assert seen == [("initial", 0), ("second", 0)]
    with pytest.raises(TypeError, match=r"Missing key for parent job bull:steps:nope\. addJob"):
        await children.add("orphan", {}, {"parent": {"id": "nope", "queue": "bull:steps"}})
    await parents.close()
    await children.close()


async def test_a_flow_producers_add_is_one_span_and_every_job_carries_its_trace(
    dsn_opts: dict, jobs: pgjobs.JobQueue
) -> None:
    """With BullMQ's ``telemetry`` option, FlowProducer.add is one producer span over the
    tree, and every job of the tree carries its trace context (its attempts nest under it)."""
    exported = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    producer = FlowProducer({**dsn_opts, "telemetry": Telemetry(tracer_provider=provider)})
    tree = await producer.add(
        {
            "name": "report",
            "queueName": "traced",
            "data": {},
            "children": [
                {"name": "part", "queueName": "traced", "data": {"n": n}} for n in range(2)
            ],
        }
    )
    await producer.close()
    [span] = [s for s in exported.get_finished_spans() if s.name == "pgjobs submit flow report"]
    assert span.attributes is not None and span.attributes["messaging.batch.message_count"] == 3
    trace_id = f"{span.get_span_context().trace_id:032x}"
    for job in (tree["job"], *(child["job"] for child in tree["children"])):
        row = await jobs.get(job.engine_id)
        assert row is not None and row.metadata["otel"]["traceparent"].split("-")[1] == trace_id


async def test_a_flows_jobs_read_as_the_adds_of_their_queues_with_their_own_opts(
    opts: dict,
) -> None:
    """The jobs FlowProducer.add returns read field for field as ``Queue.add`` of the same
    node would return them (but the id, the name, the data and the timestamp, and a child's
    parent: ``opts.parent``, ``parent`` and ``parentKey``, as BullMQ sets them), across
    queues and with or without options; each has its own ``opts`` and ``stacktrace``."""
    producer = FlowProducer(opts)
    tree = await producer.add(
        {
            "name": "root",
            "queueName": "flow-built-a",
            "data": {"r": 1},
            "children": [
                {"name": "c0", "queueName": "flow-built-a", "data": {"i": 0}},
                {"name": "c1", "queueName": "flow-built-b", "data": {"i": 1}},
                {
                    "name": "c2",
                    "queueName": "flow-built-a",
                    "data": {"i": 2},
                    "opts": {"attempts": 3},
                },
                {"name": "c3", "queueName": "flow-built-a", "data": {"i": 3}},
            ],
        }
    )
    await producer.close()
    queues = {name: Queue(name, opts) for name in ("flow-built-a", "flow-built-b")}
    own = ("id", "engine_id", "name", "data", "timestamp", "queue")
    child_queues = ["flow-built-a", "flow-built-b", "flow-built-a", "flow-built-a"]
    nodes = [(tree, "flow-built-a", "root", {"r": 1}, None)] + [
        (child, queue, f"c{i}", {"i": i}, {"attempts": 3} if i == 2 else None)
        for i, (child, queue) in enumerate(zip(tree["children"], child_queues, strict=True))
    ]
    root = tree["job"]
    parent = {"id": root.id, "queue": "bull:flow-built-a"}
    for node, queue_name, name, data, job_opts in nodes:
        job = node["job"]
        single = await queues[queue_name].add(name, data, job_opts)
        assert (job.name, job.data, job.id) == (name, data, str(job.engine_id))
        assert (job.queue.name, job.queueQualifiedName) == (queue_name, f"bull:{queue_name}")
        if job is not root:
            assert job.opts == {**single.opts, "parent": parent}
            assert job.parent == {"id": root.id, "queueKey": "bull:flow-built-a"}
            assert job.parentKey == f"bull:flow-built-a:{root.id}"
        fields = [k for k in vars(single) if k not in own]
        if job is not root:
            fields = [k for k in fields if k not in ("opts", "parent", "parentKey")]
        assert {k: getattr(job, k) for k in fields} == {k: getattr(single, k) for k in fields}
    first, last = tree["children"][0]["job"], tree["children"][3]["job"]
    first.opts["attempts"] = 9
    first.stacktrace.append("trace")
    assert (last.opts, last.stacktrace) == ({**single.opts, "parent": parent}, [])
    for queue in queues.values():
        await queue.close()
