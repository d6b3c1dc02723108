"""Job schedulers through the facade: engine schedules emitted by the facade's workers."""

from __future__ import annotations

import asyncio
import itertools
from zoneinfo import ZoneInfoNotFoundError

import pytest
from croniter import CroniterBadCronError

from bullmq_compat import Queue, Worker
from pgjobs import JobQueue
from tests.helpers import eventually


@pytest.fixture
def opts(jobs: JobQueue) -> dict:
    return {"connection": jobs}


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
