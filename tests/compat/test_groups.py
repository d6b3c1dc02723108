"""BullMQ Pro's groups through the facade (docs.bullmq.io, "BullMQ Pro", "Groups"): round-robin
between groups, the worker's ``group`` options, and the queue's group methods. BullMQ Pro is
not open source, so these cases state its documentation; no oracle runs them."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from bullmq_compat import GroupMaxSizeExceededError, Queue, Worker
from pgjobs import InvalidOption, JobQueue
from tests.helpers import eventually
from tests.interleave import overlap


async def run_until(worker: Worker, done: asyncio.Event) -> None:
    await asyncio.wait_for(done.wait(), 30)
    await worker.close()


async def _status_is(queue: Queue, group: str, status: str) -> bool:
    return await queue.getGroupStatus(group) == status


async def _count_is(queue: Queue, group: str, count: int) -> bool:
    return await queue.getGroupJobsCount(group) == count


async def _has(items: list[Any], n: int) -> bool:
    return len(items) >= n


async def test_groups_are_served_in_turn_so_a_big_one_starves_none(opts: dict) -> None:
    queue = Queue("rr", opts)
    await queue.addBulk([{"name": "big", "data": {"g": "big"},
                          "opts": {"group": {"id": "big"}}} for _ in range(30)])  # fmt: skip
    for group in ("small", "tiny"):
        await queue.add(group, {"g": group}, {"group": {"id": group}})
    seen: list[str] = []
    done = asyncio.Event()

    async def process(job: Any, token: Any) -> None:
        seen.append(job.data["g"])
        if len(seen) == 32:
            done.set()

    await run_until(Worker("rr", process, opts), done)
    assert {"small", "tiny"} <= set(seen[:6])  # not after the 30 of big
    assert Counter(seen) == {"big": 30, "small": 1, "tiny": 1}
    await queue.close()


async def test_a_workers_group_concurrency_holds_each_group_fleet_wide(opts: dict) -> None:
    queue = Queue("capped", opts)
    for group in ("a", "b", "c"):
        await queue.addBulk([{"name": "j", "data": {"g": group},
                              "opts": {"group": {"id": group}}} for _ in range(6)])  # fmt: skip
    running: Counter[str] = Counter()
    peaks: Counter[str] = Counter()
    finished: list[str] = []
    done = asyncio.Event()

    async def process(job: Any, token: Any) -> None:
        group = job.data["g"]
        running[group] += 1
        peaks[group] = max(peaks[group], running[group])
        await asyncio.sleep(0.01)
        running[group] -= 1
        finished.append(group)
        if len(finished) == 18:
            done.set()

    options = {**opts, "concurrency": 6, "group": {"concurrency": 1}}
    workers = [Worker("capped", process, options) for _ in range(2)]
    await asyncio.wait_for(done.wait(), 30)
    for worker in workers:
        await worker.close()
    assert peaks == {"a": 1, "b": 1, "c": 1}
    await queue.close()


async def test_pause_and_resume_a_group(opts: dict) -> None:
    queue = Queue("pg", opts)
    assert await queue.pauseGroup("later")  # a group with no job yet can be paused
    assert not await queue.pauseGroup("later")
    await queue.add("l", {"g": "later"}, {"group": {"id": "later"}})
    await queue.add("n", {"g": "now"}, {"group": {"id": "now"}})
    assert await queue.getGroupStatus("later") == "paused"
    assert await queue.getGroupStatus("now") == "waiting"
    assert await queue.getGroupStatus("never") is None
    assert await queue.getGroupsCountByStatus() == {
        "waiting": 1, "limited": 0, "maxed": 0, "paused": 1,
    }  # fmt: skip
    assert await queue.getGroups() == [
        {"id": "now", "status": "waiting"}, {"id": "later", "status": "paused"},
    ]  # fmt: skip
    seen: list[str] = []
    first = asyncio.Event()

    async def process(job: Any, token: Any) -> None:
        seen.append(job.data["g"])
        first.set()

    worker = Worker("pg", process, opts)
    await asyncio.wait_for(first.wait(), 30)
    assert seen == ["now"] and await queue.getGroupJobsCount("later") == 1
    assert await queue.resumeGroup("later")
    assert not await queue.resumeGroup("later")
    assert not await queue.resumeGroup("never")
    await eventually(lambda: _has(seen, 2))
    assert seen == ["now", "later"]
    await worker.close()
    await queue.close()


async def test_group_getters_count_and_list_the_groups_jobs(opts: dict) -> None:
    queue = Queue("getters", opts)
    for n in range(3):
        await queue.add("a", {"n": n}, {"group": {"id": "a"}})
    await queue.add("b", {"n": 9}, {"group": {"id": "b", "priority": 1}})
    await queue.add("b", {"n": 8}, {"group": {"id": "b"}})
    assert await queue.getGroupJobsCount("a") == 3 and await queue.getGroupsJobsCount() == 5
    assert await queue.getGroupsCount() == 2
    in_b = await queue.getGroupJobs("b")
    assert [job.data["n"] for job in in_b] == [8, 9]  # no priority first, as BullMQ Pro
    assert [job.data["n"] for job in await queue.getGroupJobs("a", 1, 1)] == [1]
    assert await queue.getGroupsByStatus("waiting") == [
        {"id": "a", "count": 3}, {"id": "b", "count": 2},
    ]  # fmt: skip
    assert await queue.getGroupActiveCount("a") == 0
    assert await queue.getCountsPerPriorityForGroup("b", [1, 0, 7]) == {"1": 1, "0": 1, "7": 0}
    assert [job.gid for job in in_b] == ["b", "b"]
    with pytest.raises(ValueError, match="end must be greater than -1"):
        await queue.getGroups(0, -2)
    await queue.deleteGroup("a")
    assert await queue.getGroupJobsCount("a") == 0 and await queue.getGroupJobsCount("b") == 2
    await queue.close()


async def test_group_concurrency_and_rate_limit_of_one_group(opts: dict) -> None:
    queue = Queue("local", opts)
    await queue.setGroupConcurrency("vip", 3)
    assert await queue.getGroupConcurrency("vip") == 3
    await queue.deleteGroupConcurrency("vip")
    assert await queue.getGroupConcurrency("vip") is None
    await queue.setGroupRateLimit("vip", 1, 60_000)
    for n in range(3):
        await queue.add("v", {"n": n}, {"group": {"id": "vip"}})
    seen: list[int] = []
    first = asyncio.Event()

    async def process(job: Any, token: Any) -> None:
        seen.append(job.data["n"])
        first.set()

    worker = Worker("local", process, opts)
    await asyncio.wait_for(first.wait(), 30)
    await eventually(lambda: _status_is(queue, "vip", "limited"))
    assert 0 < await queue.getGroupRateLimitTtl("vip") <= 60_000
    assert seen == [0]
    await worker.close()
    await queue.close()


async def test_rate_limit_group_by_hand_puts_the_job_back(opts: dict) -> None:
    queue = Queue("manual", opts)
    await queue.add("m", {"n": 1}, {"group": {"id": "api"}})
    await queue.add("m", {"n": 2})
    tried = asyncio.Event()
    worker: Worker

    async def process(job: Any, token: Any) -> None:
        if job.data["n"] == 1:
            with pytest.raises(ValueError, match="expireTimeMs must be greater than 0"):
                await worker.rateLimitGroup(job, 0)
            await worker.rateLimitGroup(job, 60_000)
            tried.set()
            raise Worker.RateLimitError()

    worker = Worker("manual", process, opts)
    await asyncio.wait_for(tried.wait(), 30)
    await eventually(lambda: _status_is(queue, "api", "limited"))
    await eventually(lambda: _count_is(queue, "api", 1))  # put back, held by the limit
    ungrouped = await eventually(lambda: queue.getJobs(["completed"]))
    assert [job.data["n"] for job in ungrouped] == [2]
    with pytest.raises(ValueError, match="Job must have a group id"):
        await worker.rateLimitGroup(ungrouped[0], 1000)
    await worker.close()
    await queue.close()


async def test_bad_group_options_are_refused_naming_the_option(opts: dict) -> None:
    queue = Queue("bad", opts)
    with pytest.raises(InvalidOption, match=r"group\.id"):
        await queue.add("x", {}, {"group": {"id": 7}})
    with pytest.raises(InvalidOption, match=r"group\.maxSize"):
        await queue.add("x", {}, {"group": {"id": "a", "maxSize": 0}})
    with pytest.raises(InvalidOption, match=r"group\.maxSize"):
        await queue.addBulk([{"name": "x", "data": {}, "opts": {"group": {"id": "a",
                                                                       "maxSize": 5}}}])  # fmt: skip
    with pytest.raises(InvalidOption, match=r"group\.priority"):
        await queue.add("x", {}, {"group": {"id": "a", "priority": 2}, "priority": 3})
    with pytest.raises(InvalidOption, match=r"group\.concurrency"):
        Worker("bad", lambda job, token: None, {**opts, "group": {"concurrency": 0},
                                                "autorun": False})  # fmt: skip
    with pytest.raises(InvalidOption, match=r"group\.limit\.duration"):
        Worker("bad", lambda job, token: None, {**opts, "autorun": False,
                                                "group": {"limit": {"max": 1}}})  # fmt: skip
    assert await queue.getJobCounts("waiting") == {"waiting": 0}
    await queue.close()


async def test_max_size_refuses_an_add_to_a_full_group(opts: dict) -> None:
    queue = Queue("sized", opts)
    bounded = {"group": {"id": "g", "maxSize": 2}}
    await queue.add("a", {"n": 1}, bounded)
    await queue.add("a", {"n": 2}, bounded)
    with pytest.raises(GroupMaxSizeExceededError, match="max size of 2"):
        await queue.add("a", {"n": 3}, bounded)
    assert await queue.getGroupJobsCount("g") == 2  # the refused job was not added
    await queue.add("a", {"n": 4}, {"group": {"id": "g"}})  # no bound given: added
    assert await queue.getGroupJobsCount("g") == 3
    await queue.close()


async def test_two_adds_racing_for_a_groups_last_place_admit_one(
    opts: dict, jobs: JobQueue
) -> None:
    queue = Queue("race", opts)
    bounded = {"group": {"id": "g", "maxSize": 2}}
    await queue.add("a", {"n": 1}, bounded)

    async def add(conn: Any) -> Any:
        try:
            return await queue.add("a", {}, bounded, connection=conn)
        except GroupMaxSizeExceededError as exc:
            return exc

    first, second, waited = await overlap(jobs.pool, add, add)
    assert waited and not isinstance(first, Exception)
    assert isinstance(second, GroupMaxSizeExceededError)
    assert await queue.getGroupJobsCount("g") == 2
    await queue.close()


async def test_concurrent_adds_never_overfill_a_group(opts: dict) -> None:
    queue = Queue("crowd", opts)
    bounded = {"group": {"id": "g", "maxSize": 7}}

    async def add(n: int) -> bool:
        try:
            await queue.add("a", {"n": n}, bounded)
            return True
        except GroupMaxSizeExceededError:
            return False

    added = await asyncio.gather(*(add(n) for n in range(40)))
    assert sum(added) == 7 and await queue.getGroupJobsCount("g") == 7
    await queue.close()
