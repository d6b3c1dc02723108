"""Job schedulers through the facade: engine schedules emitted by the facade's workers."""

from __future__ import annotations

import asyncio
import itertools
import time
from zoneinfo import ZoneInfoNotFoundError

import pytest
from croniter import CroniterBadCronError

from bullmq_compat import Queue, Worker, default_repeat_strategy
from pgjobs import JobQueue
from tests.helpers import eventually


async def test_every_with_limit_emits_each_job_once(opts: dict) -> None:
    queue = Queue("ticks", opts)
    await queue.upsertJobScheduler(
        "heartbeat",
        {"every": 200, "limit": 3, "immediately": True},
        "beat",
        {"host": "a"},
        {"priority": 2},
    )
    seen: list[tuple[str, dict, int]] = []
    ids: list[str] = []

    async def process(job, token):
        seen.append((job.name, job.data, job.priority))
        ids.append(job.id)

    worker = Worker("ticks", process, opts)

    async def three_runs() -> bool:
        return len(seen) == 3

    await eventually(three_runs)
    scheduler = await queue.getJobScheduler("heartbeat")
    assert scheduler is not None and scheduler["iterationCount"] == 3 and scheduler["next"] is None
    assert scheduler["every"] == 200 and scheduler["template"] == {
        "data": {"host": "a"},
        "opts": {"priority": 2},
    }
    await worker.close()
    assert seen == [("beat", {"host": "a"}, 2)] * 3
    # BullMQ's scheduler job ids: repeat:<scheduler id>:<tick in ms>, ticks at least 200 ms apart
    ticks = [int(i.split(":")[2]) for i in ids if i.startswith("repeat:heartbeat:")]
    assert len(ticks) == 3 and all(b - a >= 200 for a, b in itertools.pairwise(ticks))
    assert (await queue.getJob(ids[0])) is not None
    await queue.close()


async def test_node_template_cron_listing_and_removal(opts: dict) -> None:
    queue = Queue("crons", opts)
    await queue.upsertJobScheduler(
        "nightly",
        {"pattern": "0 3 * * *", "tz": "Europe/Paris"},
        {"name": "report", "data": {"k": 1}, "opts": {}},
    )
    await queue.upsertJobScheduler("hourly", {"pattern": "0 * * * *"}, "tick")
    listed = await queue.getJobSchedulers(asc=True)
    assert [s["key"] for s in listed] == ["hourly", "nightly"]
    assert listed[1]["pattern"] == "0 3 * * *" and listed[1]["tz"] == "Europe/Paris"
    assert listed[1]["name"] == "report" and await queue.getJobSchedulersCount() == 2
    assert await Queue("other-crons", opts).getJobSchedulers() == []
    # The Python package's values: 0 when it removed one, 1 when there was none.
    assert await queue.removeJobScheduler("nightly") == 0
    assert await queue.removeJobScheduler("nightly") == 1
    with pytest.raises(CroniterBadCronError):  # as the package raises it, at upsert
        await queue.upsertJobScheduler("bad", {"pattern": "every tuesday"})
    with pytest.raises(ZoneInfoNotFoundError):
        await queue.upsertJobScheduler("bad", {"pattern": "* * * * *", "tz": "Not/AZone"})
    with pytest.raises(ValueError, match=r"Both \.pattern and \.every"):
        await queue.upsertJobScheduler("bad", {"every": 10, "pattern": "* * * * *"})
    with pytest.raises(ValueError, match=r"Either \.pattern or \.every"):
        await queue.upsertJobScheduler("bad", {})
    with pytest.raises(ValueError, match="jobId"):
        await queue.upsertJobScheduler("bad", {"every": 1000}, "x", {}, {"jobId": "fixed"})
    await queue.close()


async def test_override_false_keeps_the_existing_scheduler(opts: dict) -> None:
    queue = Queue("keep", opts)
    await queue.upsertJobScheduler("s", {"every": 60_000}, "first")
    await queue.upsertJobScheduler("s", {"every": 1_000}, "second", override=False)
    scheduler = await queue.getJobScheduler("s")
    assert scheduler is not None and scheduler["every"] == 60_000 and scheduler["name"] == "first"
    await queue.close()


async def test_two_workers_emit_each_tick_once(opts: dict, jobs: JobQueue) -> None:
    queue = Queue("shared-ticks", opts)
    await queue.upsertJobScheduler("t", {"every": 100, "limit": 5, "immediately": True}, "tick")
    count = 0

    async def process(job, token):
        nonlocal count
        count += 1

    workers = [Worker("shared-ticks", process, opts) for _ in range(2)]

    async def five() -> bool:
        scheduler = await queue.getJobScheduler("t")
        return scheduler is not None and scheduler["next"] is None and count == 5

    await eventually(five)
    await asyncio.gather(*(w.close() for w in workers))
    assert count == 5
    await queue.close()


async def test_upsert_creates_the_next_iteration_as_a_job_and_returns_it(opts: dict) -> None:
    """BullMQ's job schedulers: the next iteration exists as a job at once (an `every`
    scheduler's first is due now), named repeat:<id>:<ms>; upserting again replaces it."""
    queue = Queue("iterations", opts)
    job = await queue.upsertJobScheduler(
        "every-id", {"every": 60_000}, job_name="repeat-every", job_data={"foo": "bar"}
    )
    assert job is not None and job.id.startswith("repeat:every-id:")
    assert job.data == {"foo": "bar"} and job.name == "repeat-every"
    assert await job.getState() == "waiting" and await queue.isJobScheduler("every-id")
    cron = await queue.upsertJobScheduler("cron-id", {"pattern": "* * * * *"}, "repeat-cron")
    assert cron is not None and await cron.getState() == "delayed"
    scheduler = await queue.getJobScheduler("cron-id")
    assert scheduler["name"] == "repeat-cron" and scheduler["pattern"] == "* * * * *"
    assert scheduler["next"] == int(cron.id.rsplit(":", 1)[1])

    replaced = await queue.upsertJobScheduler(
        "cron-id", {"pattern": "*/5 * * * *"}, "repeat-cron", {"v": 2}
    )
    assert replaced is not None and replaced.data == {"v": 2}
    assert replaced.id == cron.id or await queue.getJob(cron.id) is None  # one pending iteration
    assert await queue.getDelayedCount() == 1 and await queue.getJobSchedulersCount() == 2
    await queue.close()


async def test_upsert_returns_none_and_creates_nothing_when_no_iteration_is_left(
    opts: dict,
) -> None:
    queue = Queue("spent", opts)
    assert (
        await queue.upsertJobScheduler(
            "limited", {"every": 1000, "limit": 1, "count": 5}, "limited"
        )
        is None
    )
    past = int(time.time() * 1000) - 10_000
    assert await queue.upsertJobScheduler("ended", {"every": 1000, "endDate": past}, "x") is None
    assert await queue.getJobSchedulersCount() == 0 and await queue.count() == 0
    with pytest.raises(ValueError, match=r"Both \.immediately and \.startDate"):
        await queue.upsertJobScheduler(
            "bad", {"pattern": "* * * * *", "immediately": True, "startDate": past}, "x"
        )
    await queue.close()


async def test_a_worker_advances_the_scheduler_iteration_by_iteration(opts: dict) -> None:
    """Each iteration a worker starts makes the next one; a delayed next iteration is always
    waiting, and the iteration count grows."""
    queue = Queue("advancing", opts)
    await queue.upsertJobScheduler("tick", {"every": 200}, job_name="tick")
    processed: list[str] = []
    enough = asyncio.Event()

    async def process(job, token):
        processed.append(job.id)
        if len(processed) >= 3:
            enough.set()

    worker = Worker("advancing", process, opts)
    await asyncio.wait_for(enough.wait(), 20)
    await worker.close()
    assert len(set(processed)) == len(processed) >= 3
    assert all(i.startswith("repeat:tick:") for i in processed)
    scheduler = await queue.getJobScheduler("tick")
    assert scheduler["iterationCount"] > 1 and await queue.getDelayedCount() == 1
    assert await queue.removeJobScheduler("tick") == 0
    assert await queue.getDelayedCount() == 0  # its next iteration went with it
    await queue.close()


def test_default_repeat_strategy_is_the_package_one() -> None:
    now = int(time.time() * 1000)
    following = default_repeat_strategy(now, {"pattern": "0 * * * *"})
    assert following is not None and 0 < following - now <= 3_600_000
    assert (
        abs(default_repeat_strategy(0, {"pattern": "* * * * *", "immediately": True}) - now) < 5000
    )
    assert default_repeat_strategy(now, {"every": 1000}) is None
    with pytest.raises(CroniterBadCronError):
        default_repeat_strategy(now, {"pattern": "not-a-cron"})
    with pytest.raises(ZoneInfoNotFoundError):
        default_repeat_strategy(now, {"pattern": "* * * * *", "tz": "Not/AZone"})


async def test_an_iteration_runs_with_the_next_one_already_delayed(opts: dict) -> None:
    """BullMQ makes the next iteration when it moves the current one to active: a processor
    always finds it in the delayed set."""
    queue = Queue("always-next", opts)
    await queue.upsertJobScheduler("tick", {"every": 60_000}, "tick")
    found: list[list[str]] = []
    ran = asyncio.Event()

    async def process(job, token):
        found.append([j.id for j in await queue.getDelayed()])
        ran.set()

    current = (await queue.getWaiting())[0]
    worker = Worker("always-next", process, opts)
    await ran.wait()
    await worker.close()
    (following,) = found[0]
    assert following.startswith("repeat:tick:") and following != current.id
    await queue.close()
