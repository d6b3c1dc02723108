"""Job ids as BullMQ has them: a custom jobId is unique within its queue, getJob looks in its
own queue only, and the id a job is added under is the id every reader shows (getJob,
getJobs, the tree of a flow, events, the worker). Not a Node case: the rules issue 45 names.

One rule is kept different on purpose, tested in tests/compat/test_data_and_names.py: an
automatic id comes from one counter for all queues (the engine's), not one per queue."""

from __future__ import annotations

from typing import Any

from tests.conformance.conftest import Bull, future_of, wait_for


async def test_a_custom_job_id_is_unique_within_its_queue_only(bq: Bull) -> None:
    first, second = bq.queue(bq.name("a")), bq.queue(bq.name("b"))
    one = await first.add("x", {"q": "a"}, {"jobId": "same"})
    other = await second.add("x", {"q": "b"}, {"jobId": "same"})
    again = await first.add("x", {"q": "a2"}, {"jobId": "same"})
    assert one.id == other.id == again.id == "same"
    assert (await first.getJob("same")).data == {"q": "a"}  # the existing job stays
    assert (await second.getJob("same")).data == {"q": "b"}
    assert await first.getJobCounts("waiting") == {"waiting": 1}


async def test_get_job_looks_in_its_own_queue_only(bq: Bull) -> None:
    first, second = bq.queue(bq.name("a")), bq.queue(bq.name("b"))
    job = await first.add("x", {"n": 1})
    assert (await first.getJob(job.id)).data == {"n": 1}
    assert await second.getJob(job.id) is None
    assert await second.getJobState(job.id) == "unknown"
    assert await first.getJob("no-such-id") is None


async def test_the_added_id_is_the_id_every_reader_shows(bq: Bull) -> None:
    name = bq.name()
    events = bq.queue_events(name, lastEventId="0")
    added = future_of(events, "added", 2)
    queue = bq.queue(name)
    auto = await queue.add("auto", {"n": 1})
    custom = await queue.add("custom", {"n": 2}, {"jobId": "custom-1"})
    ids = {auto.id, custom.id}
    assert {args["jobId"] for args, _ in await wait_for(added)} == ids
    assert {j.id for j in await queue.getJobs(["waiting"])} == ids
    seen: list[str] = []

    async def process(job: Any, token: str) -> str:
        seen.append(job.id)
        return job.id

    worker = bq.worker(name, process)
    completed = await wait_for(future_of(worker, "completed", 2))
    assert sorted(seen) == sorted(ids) and sorted(r for (_, r) in completed) == sorted(ids)
    for job_id in ids:
        assert (await queue.getJob(job_id)).returnvalue == job_id


async def test_ids_in_a_flow_are_the_ids_of_its_queues(bq: Bull) -> None:
    parent_queue, child_queue = bq.name("parent"), bq.name("child")
    tree = await bq.flow_producer().add(
        {
            "name": "parent",
            "queueName": parent_queue,
            "data": {"p": 1},
            "children": [
                {"name": "kid", "queueName": child_queue, "data": {"c": 1}},
                {"name": "named", "queueName": child_queue, "data": {"c": 2},
                 "opts": {"jobId": "kid-2"}},
            ],
        }
    )  # fmt: skip
    parent = await bq.queue(parent_queue).getJob(tree["job"].id)
    assert parent is not None and parent.data == {"p": 1}
    kids = bq.queue(child_queue)
    for child in tree["children"]:
        found = await kids.getJob(child["job"].id)
        assert found is not None and found.data == child["job"].data
    assert tree["children"][1]["job"].id == "kid-2"
    assert await bq.queue(parent_queue).getJob("kid-2") is None


FACADE_PENDING: dict[str, str] = {}
