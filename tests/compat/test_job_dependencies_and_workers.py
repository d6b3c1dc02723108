"""A parent's children by outcome (getDependencies, with BullMQ's cursor pages), a child taken
out of its parent's wait (removeChildDependency), a delayed job moved (changeDelay), and the
workers a queue has (getWorkers), as BullMQ's Python package gives them."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from bullmq_compat import FlowProducer, Job, Queue, Worker
from pgjobs import InvalidOption
from tests.helpers import eventually


async def _run_until(worker_queue: str, opts: dict, handler: Any, settled: int) -> None:
    """Run a worker on ``worker_queue`` until ``settled`` jobs have completed or failed."""
    done = asyncio.Event()
    count = 0

    def one_more(*_: Any) -> None:
        nonlocal count
        count += 1
        if count == settled:
            done.set()

    worker = Worker(worker_queue, handler, opts)
    worker.on("completed", one_more)
    worker.on("failed", one_more)
    await done.wait()
    await worker.close()


async def test_get_dependencies_sorts_children_by_outcome(opts: dict) -> None:
    flows = FlowProducer(opts)
    tree = await flows.add(
        {
            "name": "report",
            "queueName": "reports",
            "children": [
                {"name": "ok", "queueName": "parts", "data": {"v": 7}},
                {
                    "name": "bad",
                    "queueName": "parts",
                    "opts": {"ignoreDependencyOnFailure": True},
                },
                {"name": "later", "queueName": "parts", "opts": {"delay": 3_600_000}},
            ],
        }
    )
    parent: Job = tree["job"]
    by_name = {child["job"].name: child["job"] for child in tree["children"]}

    async def part(job: Job, token: str) -> Any:
        if job.name == "bad":
            raise ValueError("no such part")
        return job.data["v"] * 2

    await _run_until("parts", opts, part, settled=2)
    key = {name: f"bull:parts:{job.id}" for name, job in by_name.items()}
    deps = await parent.getDependencies()
    assert deps == {
        "processed": {key["ok"]: 14},
        "unprocessed": [key["later"]],
        "failed": [],
        "ignored": {key["bad"]: "no such part"},
    }
    assert await parent.getDependenciesCount() == {
        "processed": 1,
        "unprocessed": 1,
        "failed": 0,
        "ignored": 1,
    }
    page = await parent.getDependencies({"unprocessed": {"cursor": 0, "count": 5}})
    assert page == {"unprocessed": [key["later"]], "nextUnprocessedCursor": 0}
    await flows.close()


async def test_get_dependencies_pages_with_cursors(opts: dict) -> None:
    flows = FlowProducer(opts)
    children = [{"name": f"c{i}", "queueName": "pages"} for i in range(5)]
    tree = await flows.add({"name": "p", "queueName": "pages-parent", "children": children})
    parent: Job = tree["job"]
    first = await parent.getDependencies({"unprocessed": {"cursor": 0, "count": 2}})
    assert len(first["unprocessed"]) == 2 and first["nextUnprocessedCursor"] == 2
    second = await parent.getDependencies({"unprocessed": {"cursor": 2, "count": 2}})
    last = await parent.getDependencies({"unprocessed": {"cursor": 4, "count": 2}})
    assert last["nextUnprocessedCursor"] == 0
    seen = first["unprocessed"] + second["unprocessed"] + last["unprocessed"]
    assert sorted(seen) == sorted(f"bull:pages:{c['job'].id}" for c in tree["children"])
    with pytest.raises(ValueError, match="unknown kind 'pending'"):
        await parent.getDependencies({"pending": {}})
    await flows.close()


async def test_remove_child_dependency_lets_the_parent_run(opts: dict) -> None:
    flows = FlowProducer(opts)
    tree = await flows.add(
        {
            "name": "parent",
            "queueName": "detach-parent",
            "children": [{"name": "never", "queueName": "detach-kids"}],
        }
    )
    parent: Job = tree["job"]
    child: Job = tree["children"][0]["job"]
    assert await parent.getState() == "waiting-children"
    assert await child.removeChildDependency()
    assert not await child.removeChildDependency()  # no parent any more
    assert await parent.getState() == "waiting"
    assert await parent.getDependenciesCount() == {
        "processed": 0,
        "unprocessed": 0,
        "failed": 0,
        "ignored": 0,
    }
    assert await child.getState() == "waiting"  # still a job of its own
    await flows.close()


async def test_change_delay_moves_a_delayed_job(opts: dict) -> None:
    queue = Queue("change-delay", opts)
    job = await queue.add("tick", {}, {"delay": 3_600_000})
    await job.changeDelay(0)
    assert job.delay == 0
    assert await job.getState() == "waiting"
    with pytest.raises(RuntimeError, match="not in the delayed state"):
        await job.changeDelay(10_000)
    with pytest.raises(Exception, match="delay"):
        await (await queue.add("tock", {}, {"delay": 1000})).changeDelay(-5)
    await queue.close()


async def test_get_workers_lists_the_running_workers_by_name(opts: dict) -> None:
    queue = Queue("staffed", opts)
    assert await queue.getWorkers() == [] and await queue.getWorkersCount() == 0

    async def noop(job: Job, token: str) -> None:
        return None

    worker = Worker("staffed", noop, {**opts, "name": "mailer", "concurrency": 2})
    await worker.waitUntilReady()
    (seen,) = await eventually(queue.getWorkers)
    assert seen["name"] == "mailer" and seen["concurrency"] == 2 and seen["running"] == 0
    assert await queue.getWorkersCount() == 1
    assert await Queue("unstaffed", opts).getWorkers() == []
    await worker.close()
    assert await queue.getWorkers() == []
    with pytest.raises(InvalidOption, match="name"):
        Worker("staffed", noop, {**opts, "name": 42, "autorun": False})
    await queue.close()
