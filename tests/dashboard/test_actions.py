"""The dashboard's actions as bull-board has them, each read back through the facade's API
(BullMQ's words) or the engine's: promote all, clean by state and age, the queue's limits for
every worker, a job's priority and data, and a removal that returns to the job's queue."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest

import bullmq_compat
from bullmq_compat import job_scheduler
from pgjobs import JobFilter, JobQueue
from tests.dashboard.clients import client_for, csrf_of
from tests.factories import insert_job
from tests.interleave import wait_until_blocking


@pytest.fixture
async def client(jobs: JobQueue) -> AsyncIterator[httpx.AsyncClient]:
    async with client_for(jobs) as c:
        yield c


@pytest.fixture
async def queue(jobs: JobQueue) -> AsyncIterator[bullmq_compat.Queue]:
    q = bullmq_compat.Queue("acts", {"connection": jobs})
    yield q
    await q.close()


async def test_promote_all_confirms_the_count_then_makes_every_delayed_job_wait(
    client: httpx.AsyncClient, queue: bullmq_compat.Queue
) -> None:
    delayed = [await queue.add("later", {"n": n}, {"delay": 600_000}) for n in range(3)]
    waiting = await queue.add("now", {"n": 9})
    page = await client.get("/queues/acts?state=delayed")
    assert "Promote all… (3)" in page.text
    form = {"csrf": csrf_of(page), "matching": "1", "state": "delayed", "do": "promote"}
    confirm = await client.post("/queues/acts/bulk", data=form)
    assert "<strong>3</strong> job(s)" in confirm.text and "makes due now" in confirm.text
    done = await client.post("/queues/acts/bulk", data={**form, "confirmed": "1"})
    assert done.status_code == 303 and "promote%3A+3+job" in done.headers["location"]
    assert [await queue.getJobState(j.id) for j in delayed] == ["waiting"] * 3
    assert await queue.getJobState(waiting.id) == "waiting"
    assert (await queue.getJobCounts("delayed"))["delayed"] == 0


async def test_clean_by_state_and_age_deletes_only_the_older_finished_jobs(
    client: httpx.AsyncClient, jobs: JobQueue
) -> None:
    now = datetime.now(UTC)
    old = [await insert_job(jobs.pool, jobs.db.schema, queue="cl", status="completed",
                            finished_at=now - timedelta(days=2)) for _ in range(3)]  # fmt: skip
    recent = await insert_job(jobs.pool, jobs.db.schema, queue="cl", status="completed")
    failed = await insert_job(jobs.pool, jobs.db.schema, queue="cl", status="dead",
                              finished_at=now - timedelta(days=2))  # fmt: skip
    confirm = await client.get("/queues/cl/purge?sub_state=completed&older_than=86400")
    assert re.search(
        r"<strong>3</strong> job\(s\)\s+in sub-state completed finished before", confirm.text
    )
    before = re.search(r'name="finished_before" value="([^"]+)"', confirm.text)
    assert before is not None
    done = await client.post("/queues/cl/purge", data={
        "csrf": csrf_of(confirm), "sub_state": "completed", "expected": "3",
        "finished_before": before.group(1),
    })  # fmt: skip
    assert done.status_code == 303 and "purged+3+job" in done.headers["location"]
    left = {r.id for r in await jobs.list_jobs(JobFilter(queue="cl"))}
    assert left == {recent, failed} and not left & set(old)
    bad = await client.get("/queues/cl/purge?sub_state=ready&older_than=60")
    assert bad.status_code == 400 and "an age applies to finished jobs" in bad.text


async def test_the_queue_limits_for_every_worker_are_set_and_cleared(
    client: httpx.AsyncClient, queue: bullmq_compat.Queue
) -> None:
    await queue.add("x", {})
    page = await client.get("/queues/acts")
    token = csrf_of(page)
    done = await client.post("/queues/acts/limits", data={
        "csrf": token, "rate_max": "5", "rate_seconds": "2", "concurrency": "3",
    })  # fmt: skip
    assert done.status_code == 303
    assert await queue.getGlobalConcurrency() == 3
    assert await queue.getGlobalRateLimit() == {"max": 5, "duration": 2000}
    shown = (await client.get(done.headers["location"])).text
    assert "at most 5 starts per 2 s, at most 3 running" in shown
    assert "(5 per 2.0 s, 3 running)" in shown
    await client.post("/queues/acts/limits", data={"csrf": token, "clear": "rate"})
    await client.post("/queues/acts/limits", data={"csrf": token, "clear": "concurrency"})
    assert await queue.getGlobalConcurrency() is None
    assert await queue.getGlobalRateLimit() is None
    bad = await client.post("/queues/acts/limits", data={"csrf": token, "concurrency": "0"})
    assert bad.status_code == 400 and "concurrency" in bad.text


async def test_a_bullmq_jobs_priority_and_data_are_changed_in_bullmq_s_words(
    client: httpx.AsyncClient, queue: bullmq_compat.Queue
) -> None:
    job = await queue.add("order", {"sku": "a-1"})
    page = await client.get(f"/jobs/{job.engine_id}")
    token = csrf_of(page)
    assert 'name="priority"' in page.text and "BullMQ's: 0 none" in page.text
    moved = await client.post(f"/jobs/{job.engine_id}/priority",
                              data={"csrf": token, "priority": "5"})  # fmt: skip
    assert moved.status_code == 303, moved.text
    assert (await queue.getJob(job.id)).priority == 5
    assert await queue.getJobState(job.id) == "prioritized"
    edited = await client.post(f"/jobs/{job.engine_id}/data",
                               data={"csrf": token, "data": '{"sku": "b-2", "qty": 3}'})  # fmt: skip
    assert edited.status_code == 303, edited.text[-600:]
    assert (await queue.getJob(job.id)).data == {"sku": "b-2", "qty": 3}
    bad = await client.post(f"/jobs/{job.engine_id}/data", data={"csrf": token, "data": "{"})
    assert bad.status_code == 400 and "data must be JSON" in bad.text
    worse = await client.post(f"/jobs/{job.engine_id}/priority",
                              data={"csrf": token, "priority": "-1"})  # fmt: skip
    assert worse.status_code == 400 and "priority must be 0 to 2097152" in worse.text


async def test_removing_a_job_returns_to_its_queue(
    client: httpx.AsyncClient, queue: bullmq_compat.Queue
) -> None:
    job = await queue.add("gone", {})
    confirm = await client.get(f"/jobs/{job.engine_id}/remove")
    done = await client.post(f"/jobs/{job.engine_id}/remove",
                             data={"csrf": csrf_of(confirm), "confirmed": "1"})  # fmt: skip
    assert done.status_code == 303 and done.headers["location"].startswith("/queues/acts?")
    assert await queue.getJob(job.id) is None


async def test_duplicate_adds_a_waiting_copy_that_bullmq_reads_with_a_new_id(
    client: httpx.AsyncClient, queue: bullmq_compat.Queue, jobs: JobQueue
) -> None:
    job = await queue.add("invoice", {"n": 7}, {"jobId": "inv-7", "delay": 600_000})
    page = await client.get(f"/jobs/{job.engine_id}")
    assert "Duplicate" in page.text
    done = await client.post(f"/jobs/{job.engine_id}/duplicate", data={"csrf": csrf_of(page)})
    assert done.status_code == 303 and "a+copy+of+job" in done.headers["location"]
    copy_id = done.headers["location"].split("?")[0].rsplit("/", 1)[1]
    copy = await queue.getJob(copy_id)  # no custom id: its engine id is its BullMQ id
    assert copy is not None and (copy.name, copy.data) == ("invoice", {"n": 7})
    assert await queue.getJobState(copy_id) == "waiting"
    assert await queue.getJobState("inv-7") == "delayed"  # the original is untouched
    missing = await client.post("/jobs/999999999/duplicate", data={"csrf": csrf_of(page)})
    assert missing.status_code == 404


async def test_obliterate_needs_the_queues_name_and_removes_jobs_and_schedulers(
    client: httpx.AsyncClient, queue: bullmq_compat.Queue, jobs: JobQueue
) -> None:
    for n in range(3):
        await queue.add("a", {"n": n})
    await queue.add("b", {}, {"delay": 600_000})
    await queue.upsertJobScheduler("digest", {"every": 3_600_000}, {"name": "d"})
    other = bullmq_compat.Queue("kept", {"connection": jobs})
    kept = await other.add("k", {})
    [running] = await jobs.claim(["bull:acts"], kinds=["bullmq"])
    page = await client.get("/queues/acts/obliterate")
    assert re.search(r'id="obliterate-count">.*<strong>5</strong> in all.*1 schedule', page.text)
    assert "<th>Waiting</th><td>3</td>" in page.text and 'name="force"' in page.text
    assert "<th>scheduler</th><td>digest</td>" in page.text
    token = csrf_of(page)
    wrong = await client.post("/queues/acts/obliterate", data={"csrf": token,
                                                               "confirm_name": "act"})  # fmt: skip
    assert wrong.status_code == 303 and "type+the+queue" in wrong.headers["location"]
    busy = await client.post("/queues/acts/obliterate", data={"csrf": token,
                                                              "confirm_name": "acts"})  # fmt: skip
    assert "1+job%28s%29+are+running" in busy.headers["location"]
    assert (await queue.getJobCounts("waiting"))["waiting"] == 3  # nothing removed
    done = await client.post("/queues/acts/obliterate",
                             data={"csrf": token, "confirm_name": "acts", "force": "1"})  # fmt: skip
    assert done.status_code == 303 and "obliterated%3A+5+job" in done.headers["location"]
    counts = await queue.getJobCounts()
    assert sum(counts.values()) == 0, counts
    assert await queue.getJobSchedulers() == []
    assert await other.getJobState(kept.id) == "waiting"
    assert not await running.complete(None)
    await other.close()


async def test_a_bullmq_scheduler_reads_in_bullmq_words_and_runs_now(
    client: httpx.AsyncClient, queue: bullmq_compat.Queue
) -> None:
    await queue.upsertJobScheduler(
        "digest", {"pattern": "0 3 * * *"}, {"name": "send-digest", "data": {"to": "all"}}
    )
    [before] = await queue.getDelayed()
    page = await client.get("/schedules")
    [row] = re.findall(r'<tr class="schedule">.*?</tr>', page.text, re.S)
    assert "data-scheduler>digest</span>" in row and "send-digest" in row
    assert '{"to": "all"}' in row and "<code>0 3 * * *</code>" in row
    [run_now] = re.findall(r'action="([^"]*/run-now)"', row)
    done = await client.post(run_now, data={"csrf": csrf_of(page)})
    assert done.status_code == 303 and "added+from+its+template" in done.headers["location"]
    # as bull-board's Run now: one job from the template, the scheduler's next run untouched
    assert await queue.getJobState(before.id) == "delayed"
    [added] = await queue.getWaiting()
    assert (added.name, added.data) == ("send-digest", {"to": "all"}) and added.id != before.id
    [scheduler] = await queue.getJobSchedulers()
    assert scheduler["next"] == before.opts["prevMillis"]


async def test_empty_removes_the_jobs_waiting_to_run_and_keeps_the_rest(
    client: httpx.AsyncClient, queue: bullmq_compat.Queue, jobs: JobQueue
) -> None:
    for n in range(3):
        await queue.add("w", {"n": n})
    await queue.add("p", {}, {"priority": 3})
    delayed = await queue.add("d", {}, {"delay": 600_000})
    [ctx] = await jobs.claim(["bull:acts"], kinds=["bullmq"])  # the prioritized one
    await ctx.complete("ok")
    page = await client.get("/queues/acts")
    assert 'href="/queues/acts/purge?sub_state=empty"' in page.text
    confirm = await client.get("/queues/acts/purge?sub_state=empty")
    assert "<h1>Empty acts</h1>" in confirm.text
    assert "<strong>4</strong> job(s)\nwaiting to run" in confirm.text
    emptied = await client.post("/queues/acts/purge", data={
        "csrf": csrf_of(confirm), "sub_state": "empty", "expected": "4"})  # fmt: skip
    assert emptied.status_code == 303 and "purged+4+job" in emptied.headers["location"]
    counts = await queue.getJobCounts()
    assert counts["completed"] == 1 and sum(counts.values()) == 1, counts
    assert await queue.getJob(delayed.id) is None
    assert [j.id for j in await queue.getCompleted()] == [str(ctx.id)]


TEMPLATE = {"name": "send-digest", "data": {"to": "all"}, "opts": {"attempts": 3}}


async def test_a_bullmq_schedulers_timing_is_edited_as_upsert_job_scheduler_would(
    client: httpx.AsyncClient, queue: bullmq_compat.Queue
) -> None:
    await queue.upsertJobScheduler("digest", {"every": 3_600_000, "limit": 50}, TEMPLATE)
    [before] = await queue.getWaiting()  # an every's first iteration is due at once
    page = await client.get("/schedules")
    [row] = re.findall(r'<tr class="schedule">.*?</tr>', page.text, re.S)
    assert 'value="3600000"> ms' in row and "pattern <input" in row and "tz <input" in row
    [edit] = re.findall(r'action="([^"]*/edit)"', row)
    done = await client.post(edit, data={"csrf": csrf_of(page), "every": "",
                                         "cron": "0 9 * * *", "timezone": "Europe/Paris"})  # fmt: skip
    assert done.status_code == 303 and "job+scheduler+digest+re-timed" in done.headers["location"]
    # the same as an upsert of these repeat options with the same template
    await queue.upsertJobScheduler(
        "twin", {"pattern": "0 9 * * *", "tz": "Europe/Paris", "limit": 50}, TEMPLATE
    )
    edited, twin = await queue.getJobScheduler("digest"), await queue.getJobScheduler("twin")
    assert edited is not None and twin is not None
    assert {**edited, "key": "twin"} == twin
    assert await queue.getJob(before.id) is None  # the old next iteration is replaced
    runs = {job.id: job for job in await queue.getDelayed()}
    run = runs[f"repeat:digest:{edited['next']}"]
    twin_run = runs[f"repeat:twin:{twin['next']}"]
    assert (run.name, run.data, run.opts["attempts"]) == ("send-digest", {"to": "all"}, 3)
    assert run.opts["repeat"] == twin_run.opts["repeat"]
    assert run.opts["repeat"]["pattern"] == "0 9 * * *"

    again = await client.post(edit, data={"csrf": csrf_of(page), "every": "120000"})
    assert again.status_code == 303
    every = await queue.getJobScheduler("digest")
    assert every is not None and every["every"] == 120_000 and "pattern" not in every
    assert every["iterationCount"] == edited["iterationCount"] and every["limit"] == 50


async def test_a_bad_bullmq_timing_is_refused_naming_the_repeat_option_and_changes_nothing(
    client: httpx.AsyncClient, queue: bullmq_compat.Queue
) -> None:
    await queue.upsertJobScheduler("digest", {"every": 3_600_000}, TEMPLATE)
    kept = await queue.getJobScheduler("digest")
    page = await client.get("/schedules")
    [edit] = re.findall(r'action="([^"]*/edit)"', page.text)
    token = csrf_of(page)
    pattern = await client.post(edit, data={"csrf": token, "cron": "61 * * * *"})
    assert pattern.status_code == 400 and "invalid option &#39;pattern&#39;" in pattern.text
    zone = await client.post(edit, data={"csrf": token, "cron": "0 9 * * *",
                                         "timezone": "Mars/Olympus"})  # fmt: skip
    assert zone.status_code == 400 and "&#39;tz&#39;" in zone.text
    words = await client.post(edit, data={"csrf": token, "every": "often"})
    assert words.status_code == 400 and "every: milliseconds" in words.text
    both = await client.post(edit, data={"csrf": token, "every": "1000", "cron": "0 9 * * *"})
    assert both.status_code == 400 and "&#39;repeat&#39;" in both.text
    assert await queue.getJobScheduler("digest") == kept


async def test_editing_a_paused_bullmq_scheduler_keeps_it_paused(
    client: httpx.AsyncClient, queue: bullmq_compat.Queue, jobs: JobQueue
) -> None:
    await queue.upsertJobScheduler("digest", {"every": 3_600_000}, TEMPLATE)
    name = "bull:acts:digest"
    assert await jobs.pause_schedule(name)
    page = await client.get("/schedules")
    [edit] = re.findall(r'action="([^"]*/edit)"', page.text)
    done = await client.post(edit, data={"csrf": csrf_of(page), "cron": "0 9 * * *"})
    assert done.status_code == 303
    schedule = await jobs.get_schedule(name)
    assert schedule is not None and schedule.paused and schedule.cron == "0 9 * * *"


async def test_an_edit_waits_for_an_upsert_in_flight_and_keeps_its_template(
    queue: bullmq_compat.Queue, jobs: JobQueue
) -> None:
    """The application upserts a new template while the dashboard re-times: the re-time reads
    the scheduler under its lock, so it keeps the template that committed first."""
    await queue.upsertJobScheduler("digest", {"every": 3_600_000}, TEMPLATE)
    name = "bull:acts:digest"
    repeat = {"every": 3_600_000}
    arguments = job_scheduler.upsert_arguments(
        "bull", "acts", "digest", repeat, "send-digest", {"to": "some"}, {"attempts": 3},
        previous=await jobs.get_schedule(name),
    )  # fmt: skip
    facade = await JobQueue.connect(
        pool=jobs.pool, schema=jobs.schema, registry=bullmq_compat.facade_registry()
    )
    async with jobs.pool.acquire() as conn, conn.transaction():
        await job_scheduler.store(facade, arguments, repeat, conn)
        editing = asyncio.create_task(
            job_scheduler.retime(jobs, name, cron="0 9 * * *", every=None, timezone="UTC")
        )
        pid = conn.get_server_pid()

        await wait_until_blocking(jobs.pool, pid)
        assert not editing.done()
    await editing
    scheduler = await queue.getJobScheduler("digest")
    assert scheduler is not None and scheduler["pattern"] == "0 9 * * *"
    assert scheduler["template"]["data"] == {"to": "some"}
    [run] = await queue.getDelayed()
    assert run.data == {"to": "some"} and run.id == f"repeat:digest:{scheduler['next']}"


async def test_concurrent_edits_and_upserts_leave_one_scheduler_with_one_next_run(
    queue: bullmq_compat.Queue, jobs: JobQueue
) -> None:
    await queue.upsertJobScheduler("digest", {"every": 3_600_000}, TEMPLATE)
    name = "bull:acts:digest"

    async def edit(n: int) -> None:
        await job_scheduler.retime(
            jobs, name, cron=f"{n} 9 * * *" if n % 2 else None,
            every=None if n % 2 else 60.0 * (n + 1), timezone="UTC",
        )  # fmt: skip

    async def upsert(n: int) -> None:
        await queue.upsertJobScheduler("digest", {"every": 1000 * (n + 1)}, TEMPLATE)

    await asyncio.gather(*(edit(n) for n in range(20)), *(upsert(n) for n in range(20)))
    [scheduler] = await queue.getJobSchedulers()
    runs = await queue.getDelayed() + await queue.getWaiting()
    assert [run.id for run in runs] == [f"repeat:digest:{scheduler['next']}"]


async def test_a_grouped_queue_lists_its_groups_and_pauses_one(
    client: httpx.AsyncClient, queue: bullmq_compat.Queue
) -> None:
    for n in range(3):
        await queue.add("a", {"n": n}, {"group": {"id": "tenant-a"}})
    await queue.add("b", {}, {"group": {"id": "tenant-b"}})
    await queue.setGroupRateLimit("tenant-b", 5, 60_000)
    page = await client.get("/queues/acts")
    rows = dict(re.findall(r'<tr data-group="([^"]+)">(.*?)</tr>', page.text, re.S))
    assert set(rows) == {"tenant-a", "tenant-b"}
    assert ">waiting</span>" in rows["tenant-a"] and "<td>3</td>" in rows["tenant-a"]
    assert "<td>5 / 1 min</td>" in rows["tenant-b"]
    done = await client.post("/queues/acts/group", data={"csrf": csrf_of(page),
                                                         "group": "tenant-a", "op": "pause"})  # fmt: skip
    assert done.status_code == 303 and "group+tenant-a+paused" in done.headers["location"]
    assert await queue.getGroupStatus("tenant-a") == "paused"
    again = await client.post("/queues/acts/group", data={"csrf": csrf_of(page),
                                                          "group": "tenant-a", "op": "pause"})  # fmt: skip
    assert "was+paused+already" in again.headers["location"]
    after = await client.get("/queues/acts")
    [row] = re.findall(r'<tr data-group="tenant-a">(.*?)</tr>', after.text, re.S)
    assert ">paused</span>" in row and ">Resume</button>" in row
    bad = await client.post("/queues/acts/group", data={"csrf": csrf_of(page), "group": "x",
                                                        "op": "drop"})  # fmt: skip
    assert bad.status_code == 400


async def test_a_queue_without_groups_shows_no_groups_panel(
    client: httpx.AsyncClient, queue: bullmq_compat.Queue
) -> None:
    await queue.add("plain", {})
    page = await client.get("/queues/acts")
    assert 'id="groups"' not in page.text
