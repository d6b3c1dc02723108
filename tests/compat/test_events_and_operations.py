"""BullMQ behaviours, stated from its documentation: QueueEvents and waitUntilFinished, ordering
(max priority, lifo, delay), retention variants, getJobs order, clean, retryJobs, promoteJobs,
changePriority, manual rate limiting, worker pause, global concurrency across two workers."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from bullmq_compat import (
    DelayedError,
    FlowProducer,
    Queue,
    QueueEvents,
    QueueEventsProducer,
    RateLimitError,
    Worker,
)
from bullmq_compat.worker import TRIM_EVENTS_EVERY
from pgjobs import InvalidOption, JobQueue
from tests.helpers import eventually


async def drain_with(name: str, opts: dict, process: Any, count: int, **wopts: Any) -> Worker:
    """Run a worker until ``count`` jobs have completed or failed for good, then close it."""
    done = asyncio.Event()
    finished = 0

    def one(*_args: Any) -> None:
        nonlocal finished
        finished += 1
        if finished >= count:
            done.set()

    worker = Worker(name, process, {**opts, **wopts})
    worker.on("completed", one)
    worker.on("failed", lambda job, err: one() if job.attemptsMade >= job.attempts else None)
    await asyncio.wait_for(done.wait(), 30)
    await worker.close()
    return worker


class Recorder:
    """Collects QueueEvents emissions in order; ``wait_for`` waits on the event, not a sleep."""

    def __init__(self, events: QueueEvents, names: list[str]) -> None:
        self.seen: list[tuple[str, dict[str, Any]]] = []
        self._changed = asyncio.Event()
        for name in names:
            events.on(name, lambda args, _id, name=name: self._add(name, args))

    def _add(self, name: str, args: dict[str, Any]) -> None:
        self.seen.append((name, args))
        self._changed.set()

    async def wait_for(self, name: str, count: int = 1) -> None:
        async def enough() -> None:
            while sum(n == name for n, _ in self.seen) < count:
                self._changed.clear()
                await self._changed.wait()

        await asyncio.wait_for(enough(), 30)


async def test_queue_events_in_order_with_bullmq_payloads(opts: dict) -> None:
    events = QueueEvents("ev", opts)
    await events.waitUntilReady()
    names = ["added", "waiting", "active", "progress", "completed", "failed", "delayed",
             "retries-exhausted", "drained"]  # fmt: skip
    recorder = Recorder(events, names[:-1])
    drained = asyncio.Event()
    events.on("drained", lambda _id: drained.set())
    queue = Queue("ev", opts)
    ok = await queue.add("ok", {"x": 2})
    bad = await queue.add("bad", {"x": 0}, {"attempts": 2, "backoff": 1})

    async def process(job, token):
        await job.updateProgress({"pct": 50 + job.attemptsMade})
        if job.data["x"] == 0:
            raise ValueError("zero")
        return job.data["x"] * 10

    await drain_with("ev", opts, process, 2)
    await recorder.wait_for("retries-exhausted")
    await asyncio.wait_for(drained.wait(), 30)
    of_ok = [(n, a) for n, a in recorder.seen if a.get("jobId") == ok.id]
    assert [n for n, _ in of_ok] == ["added", "waiting", "active", "progress", "completed"]
    assert of_ok[0][1] == {"jobId": ok.id, "name": "ok"}
    assert of_ok[3][1] == {"jobId": ok.id, "data": {"pct": 50}}
    assert of_ok[4][1] == {"jobId": ok.id, "returnvalue": 20, "prev": "active"}
    of_bad = [n for n, a in recorder.seen if a.get("jobId") == bad.id]
    # the stream's failed fires on the final failure only, then retries-exhausted; the retry
    # waits out its backoff (delayed) and is promoted (waiting) before it runs, as in BullMQ
    assert of_bad == ["added", "waiting", "active", "progress", "delayed", "waiting", "active",
                      "progress", "failed", "retries-exhausted"]  # fmt: skip
    failed = next(a for n, a in recorder.seen if n == "failed")
    assert failed == {"jobId": bad.id, "failedReason": "zero", "prev": "active"}
    await events.close()
    await queue.close()


async def test_wait_until_finished_returns_the_value_or_raises(opts: dict) -> None:
    events = QueueEvents("wuf", opts)
    queue = Queue("wuf", opts)
    good = await queue.add("good", {"v": 21})
    bad = await queue.add("bad", {"v": -1})

    async def process(job, token):
        if job.data["v"] < 0:
            raise ValueError("negative")
        return job.data["v"] * 2

    worker = Worker("wuf", process, opts)
    assert await good.waitUntilFinished(events) == 42
    with pytest.raises(Exception, match="negative"):
        await bad.waitUntilFinished(events)
    # already finished before the call: answered from the job itself
    assert await good.waitUntilFinished(events) == 42
    await worker.close()
    late = await queue.add("never", {"v": 1})
    with pytest.raises(TimeoutError, match="timed out"):
        await late.waitUntilFinished(events, ttl=50)
    await events.close()
    await queue.close()


async def test_last_event_id_zero_replays_and_custom_events_arrive(opts: dict) -> None:
    queue = Queue("replay", opts)
    first = await queue.add("a", {})
    await queue.pause()
    await queue.resume()
    producer = QueueEventsProducer("replay", opts)
    await producer.publishEvent({"eventName": "example", "foo": "bar"})
    events = QueueEvents("replay", {**opts, "lastEventId": "0"})
    recorder = Recorder(events, ["added", "paused", "resumed", "example"])
    await recorder.wait_for("example")
    assert recorder.seen == [
        ("added", {"jobId": first.id, "name": "a"}), ("paused", {}), ("resumed", {}),
        ("example", {"foo": "bar"}),
    ]  # fmt: skip
    with pytest.raises(ValueError, match="eventName"):
        await producer.publishEvent({"foo": "bar"})
    await producer.close()
    await events.close()
    await queue.close()


async def test_duplicated_deduplicated_removed_and_cleaned_events(opts: dict) -> None:
    events = QueueEvents("dups", opts)
    await events.waitUntilReady()
    recorder = Recorder(events, ["duplicated", "deduplicated", "removed", "cleaned"])
    queue = Queue("dups", opts)
    keyed = await queue.add("k", {}, {"jobId": "fixed"})
    await queue.add("k", {}, {"jobId": "fixed"})
    held = await queue.add("d", {}, {"deduplication": {"id": "dd"}})
    await queue.add("d", {}, {"deduplication": {"id": "dd"}})
    await queue.remove(keyed.id)
    assert await queue.clean(0, 0, "waiting") == [held.id]
    await recorder.wait_for("cleaned")
    assert recorder.seen == [
        ("duplicated", {"jobId": "fixed"}),
        ("deduplicated", {"jobId": held.id, "deduplicationId": "dd", "deduplicatedJobId": None}),
        ("removed", {"jobId": "fixed", "prev": "waiting"}),
        ("cleaned", {"count": "1"}),  # clean's jobs go without a 'removed' each, as in BullMQ
    ]
    await events.close()
    await queue.close()


async def test_only_removals_asked_for_emit_removed(opts: dict) -> None:
    """BullMQ emits 'removed' for Job.remove and Queue.remove only: jobs removed by
    removeOnComplete, removeOnFail or a kept count, by drain or by obliterate go without
    one. A job removed last by queue.remove marks the end of what is read."""
    events = QueueEvents("rm", opts)
    await events.waitUntilReady()
    recorder = Recorder(events, ["removed", "completed", "failed"])
    queue = Queue("rm", opts)
    await queue.add("done", {}, {"removeOnComplete": True})
    await queue.add("done", {}, {"removeOnComplete": 1})
    await queue.add("done", {}, {"removeOnComplete": 1})  # trims the one before
    await queue.add("fail", {}, {"removeOnFail": True})

    async def process(job: Any, _token: Any) -> None:
        if job.name == "fail":
            raise ValueError("no")

    await drain_with("rm", opts, process, 4)
    await recorder.wait_for("completed", 3)
    await recorder.wait_for("failed")
    assert await queue.getJobCounts("completed", "failed") == {"completed": 1, "failed": 0}
    await queue.add("waiting", {})
    await queue.drain()
    await queue.add("doomed", {})
    await queue.obliterate()
    marker = await queue.add("marker", {})
    assert await queue.remove(marker.id) == 1
    await recorder.wait_for("removed")
    assert await queue.getJobCounts("wait") == {"wait": 0}
    assert [args for name, args in recorder.seen if name == "removed"] == [
        {"jobId": marker.id, "prev": "waiting"}
    ]
    await events.close()
    await queue.close()


async def test_events_can_be_switched_off_with_max_len_zero(opts: dict, jobs: JobQueue) -> None:
    queue = Queue("quiet", {**opts, "streams": {"events": {"maxLen": 0}}})
    await queue.add("a", {})
    assert await jobs.db.pool.fetchval(f"SELECT count(*) FROM {jobs.schema}.job_events") == 0
    await queue.close()


async def test_trim_events_keeps_the_newest_and_names_a_bad_length(
    opts: dict, jobs: JobQueue
) -> None:
    queue = Queue("trimmed", opts)
    added = [await queue.add("a", {"n": n}) for n in range(12)]
    other = Queue("untrimmed", opts)
    await other.add("b", {})
    assert await queue.trimEvents(5) == 7
    events = QueueEvents("trimmed", {**opts, "lastEventId": "0"})
    recorder = Recorder(events, ["added"])
    await recorder.wait_for("added", 5)
    assert [args["jobId"] for _, args in recorder.seen] == [job.id for job in added[-5:]]
    assert await jobs.db.pool.fetchval(f"SELECT count(*) FROM {jobs.schema}.job_events") == 6
    for bad in (-1, True, "5", None):
        with pytest.raises(InvalidOption, match="maxLength"):
            await queue.trimEvents(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidOption, match=r"streams\.events\.maxLen"):
        Queue("trimmed", {**opts, "streams": {"events": {"maxLen": -1}}})
    await events.close()
    await other.close()
    await queue.close()


async def test_a_worker_trims_its_queues_events_to_its_max_len(opts: dict, jobs: JobQueue) -> None:
    """As BullMQ trims its event stream while it writes, a worker trims its queue's log to its
    ``streams.events.maxLen`` every TRIM_EVENTS_EVERY outcomes: 300 jobs write 601 events
    (the bulk's 300 'added', then 'active' and 'completed' for each), and after the trim at the
    256th outcome only the newest 20 and what the last 44 outcomes wrote are left."""
    streams = {"streams": {"events": {"maxLen": 20}}}
    queue = Queue("busy", {**opts, **streams})
    await queue.addBulk([{"name": "n", "data": {"i": i}} for i in range(300)])

    async def process(job: Any, token: str) -> int:
        return int(job.data["i"])

    await drain_with("busy", {**opts, **streams}, process, 300)
    assert TRIM_EVENTS_EVERY == 256
    size = await jobs.db.pool.fetchval(
        f"SELECT sum(coalesce(cardinality(added), 1)) FROM {jobs.schema}.job_events"
    )
    assert 20 <= size <= 20 + 2 * (300 - 256)
    newest = await jobs.db.pool.fetchval(
        f"SELECT data->>'output' FROM {jobs.schema}.job_events"
        " WHERE event = 'completed' ORDER BY txid DESC, id DESC LIMIT 1"
    )
    assert newest == "299"  # one job at a time, in order: the last one's event stays
    await queue.close()


async def test_ordering_max_priority_lifo_and_delay(opts: dict) -> None:
    queue = Queue("order", opts)
    await queue.add("low", {"n": "low"}, {"priority": 2_097_151})
    await queue.add("p1", {"n": "p1"}, {"priority": 1})
    await queue.add("fifo1", {"n": "fifo1"})
    await queue.add("fifo2", {"n": "fifo2"})
    await queue.add("lifo1", {"n": "lifo1"}, {"lifo": True})
    await queue.add("lifo2", {"n": "lifo2"}, {"lifo": True})
    await queue.add("later", {"n": "later"}, {"delay": 300})
    with pytest.raises(Exception, match="priority"):
        await queue.add("too-low", {}, {"priority": 2_097_153})
    seen: list[str] = []

    async def process(job, token):
        seen.append(job.data["n"])

    await drain_with("order", opts, process, 7)
    assert seen == ["lifo2", "lifo1", "fifo1", "fifo2", "p1", "low", "later"]
    await queue.close()


async def test_retention_variants(opts: dict) -> None:
    queue = Queue("keep", opts)
    for i in range(4):
        await queue.add("c", {"i": i}, {"removeOnComplete": 2})
    for i in range(3):
        await queue.add("f", {"i": i}, {"removeOnFail": {"count": 1}})
    await queue.add("f-gone", {"i": 9}, {"removeOnFail": True})

    async def process(job, token):
        if job.name.startswith("f"):
            raise ValueError("no")

    await drain_with("keep", opts, process, 8, concurrency=1)
    completed = await queue.getCompleted()
    assert [j.data["i"] for j in completed] == [3, 2]  # the newest two are kept
    failed = await queue.getFailed()
    assert [j.data["i"] for j in failed] == [2]
    await queue.close()


async def test_remove_on_complete_age_applies_when_a_job_completes(
    opts: dict, jobs: JobQueue
) -> None:
    """``removeOnComplete: {age}`` as BullMQ applies it: when a job with it completes, its
    queue's completed jobs older than that go, with no GC scheduled."""
    queue = Queue("aging", opts)
    hour = {"removeOnComplete": {"age": 3600}}
    old = [await queue.add("c", {"i": i}, hour) for i in range(3)]

    async def process(job: Any, token: str) -> None:
        return None

    await drain_with("aging", opts, process, 3)
    await jobs.db.pool.execute(
        f"UPDATE {jobs.schema}.jobs SET finished_at = now() - interval '2 hours'"
    )
    assert len(await queue.getCompleted()) == 3
    new = await queue.add("c", {"i": 9}, hour)
    await drain_with("aging", opts, process, 1)
    assert [j.id for j in await queue.getCompleted()] == [new.id]
    assert [await queue.getJob(j.id) for j in old] == [None, None, None]
    await queue.close()


async def test_get_jobs_orders_and_ranges(opts: dict) -> None:
    queue = Queue("pages", opts)
    added = [await queue.add("j", {"i": i}) for i in range(5)]
    newest_first = await queue.getJobs(["wait"])
    assert [j.id for j in newest_first] == [j.id for j in reversed(added)]
    oldest_first = await queue.getJobs(["waiting"], 1, 2, asc=True)
    assert [j.id for j in oldest_first] == [added[1].id, added[2].id]
    await queue.close()


async def test_clean_retry_jobs_and_promote_jobs(opts: dict) -> None:
    queue = Queue("ops", opts)
    for i in range(3):
        await queue.add("f", {"i": i})
    runs: list[int] = []

    async def fail(job, token):
        runs.append(job.data["i"])
        raise ValueError("no")

    await drain_with("ops", opts, fail, 3)
    assert await queue.getFailedCount() == 3
    await queue.retryJobs({"state": "failed"})
    assert await queue.getJobCounts("failed", "waiting") == {"failed": 0, "waiting": 3}

    async def succeed(job, token):
        return "ok"

    await drain_with("ops", opts, succeed, 3)
    # BullMQ's retryJobs keeps attemptsMade: the failed run and the successful one count.
    assert [j.attemptsMade for j in await queue.getCompleted()] == [2, 2, 2]
    removed = await queue.clean(0, 2, "completed")
    assert len(removed) == 2 and await queue.getCompletedCount() == 1

    d1 = await queue.add("d", {}, {"delay": 60_000})
    d2 = await queue.add("d", {}, {"delay": 60_000})
    await queue.promoteJobs()
    assert {await d1.getState(), await d2.getState()} == {"waiting"}
    with pytest.raises(ValueError, match="clean type"):
        await queue.clean(0, 0, "nonsense")
    await queue.close()


async def test_change_priority_and_counts_per_priority(opts: dict) -> None:
    queue = Queue("cp", opts)
    plain = await queue.add("a", {})
    urgent = await queue.add("b", {}, {"priority": 5})
    await queue.add("c", {}, {"priority": 5})
    assert await queue.getCountsPerPriority([0, 5, 7]) == {"0": 1, "5": 2, "7": 0}
    await urgent.changePriority({"priority": 7})
    assert await queue.getCountsPerPriority([5, 7]) == {"5": 1, "7": 1}
    await plain.changePriority({"priority": 3})
    assert await plain.getState() == "prioritized"
    assert (await queue.getJob(plain.id)).priority == 3  # type: ignore[union-attr]
    await queue.close()


async def test_manual_rate_limit_puts_the_job_back_without_an_attempt(opts: dict) -> None:
    queue = Queue("manual", opts)
    job = await queue.add("call-api", {}, {"attempts": 1})
    tries = 0

    async def process(job, token):
        nonlocal tries
        tries += 1
        if tries == 1:
            await worker.rateLimit(200)
            raise RateLimitError()
        return job.attemptsMade

    worker = Worker("manual", process, opts)
    done = asyncio.Event()
    worker.on("completed", lambda job, result: done.set())
    await asyncio.wait_for(done.wait(), 30)
    await worker.close()
    finished = await queue.getJob(job.id)
    assert finished is not None and await finished.getState() == "completed"
    assert finished.returnvalue == 0  # the rate-limited run did not use the only attempt
    assert Worker.RateLimitError is RateLimitError
    await queue.close()


async def test_worker_pause_stops_taking_jobs_until_resumed(opts: dict) -> None:
    queue = Queue("wp", opts)
    seen: list[int] = []
    first_done = asyncio.Event()

    async def process(job, token):
        seen.append(job.data["i"])
        first_done.set()

    worker = Worker("wp", process, opts)
    await queue.add("j", {"i": 1})
    await asyncio.wait_for(first_done.wait(), 30)
    await worker.pause()
    assert worker.isPaused()
    await queue.add("j", {"i": 2})
    # the job stays waiting while the (only) worker is paused; its claim loop is parked
    assert await queue.getWaitingCount() == 1 and seen == [1]
    worker.resume()
    await eventually(lambda: asyncio.sleep(0, seen == [1, 2]))
    await worker.close()
    await queue.close()


async def test_global_concurrency_holds_across_two_workers(opts: dict) -> None:
    queue = Queue("gc", opts)
    await queue.setGlobalConcurrency(1)
    await queue.addBulk([{"name": "j", "data": {"i": i}} for i in range(6)])
    running = 0
    peak = 0
    finished = 0
    done = asyncio.Event()

    async def process(job, token):
        nonlocal running, peak, finished
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.01)  # hold the slot so an overlap would be seen
        running -= 1
        finished += 1
        if finished == 6:
            done.set()

    workers = [Worker("gc", process, {**opts, "concurrency": 3}) for _ in range(2)]
    await asyncio.wait_for(done.wait(), 30)
    for worker in workers:
        await worker.close()
    assert peak == 1
    assert await queue.getGlobalConcurrency() == 1
    await queue.close()


async def test_rate_limiter_across_two_workers(opts: dict, jobs: JobQueue) -> None:
    queue = Queue("rl2", opts)
    await queue.addBulk([{"name": "j", "data": {"i": i}} for i in range(6)])
    finished = 0
    done = asyncio.Event()

    async def process(job, token):
        nonlocal finished
        finished += 1
        if finished == 6:
            done.set()

    limiter = {"limiter": {"max": 2, "duration": 300}, "concurrency": 5}
    workers = [Worker("rl2", process, {**opts, **limiter}) for _ in range(2)]
    await asyncio.wait_for(done.wait(), 30)
    for worker in workers:
        await worker.close()
    starts = sorted(r.started_at for r in await jobs.list_jobs())
    # at most two starts in any 300 ms window, fleet-wide: jobs 0,2,4 are a window apart
    assert (starts[2] - starts[0]).total_seconds() >= 0.3
    assert (starts[4] - starts[2]).total_seconds() >= 0.3
    await queue.close()


async def test_deferral_keeps_data_updates(opts: dict) -> None:
    queue = Queue("defer", opts)
    await queue.add("cache", {"ready": False}, {"attempts": 1})
    done = asyncio.Event()
    result: list[Any] = []

    async def process(job, token):
        if not job.data["ready"]:
            await job.updateData({"ready": True})
            await job.moveToDelayed(0, token)
            raise DelayedError()
        result.append((job.data, job.attemptsMade))
        done.set()

    worker = Worker("defer", process, opts)
    await asyncio.wait_for(done.wait(), 30)
    await worker.close()
    assert result == [({"ready": True}, 0)]
    await queue.close()


async def test_get_state_in_every_state(opts: dict) -> None:
    queue = Queue("every-state", opts)
    waiting = await queue.add("w", {})
    prioritized = await queue.add("p", {}, {"priority": 4})
    delayed = await queue.add("d", {}, {"delay": 60_000})
    tree = await FlowProducer(opts).add(
        {"name": "parent", "queueName": "every-state-parents", "data": {},
         "children": [{"name": "child", "queueName": "every-state-kids", "data": {}}]}
    )  # fmt: skip
    assert await waiting.getState() == "waiting"
    assert await prioritized.getState() == "prioritized"
    assert await delayed.getState() == "delayed"
    assert await tree["job"].getState() == "waiting-children"

    started, release = asyncio.Event(), asyncio.Event()
    states: dict[str, str] = {}

    async def process(job, token):
        if job.name == "w":
            states["inside"] = await job.getState()
            started.set()
            await release.wait()
            return "done"
        raise ValueError("no")

    worker = Worker("every-state", process, {**opts, "concurrency": 2})
    await asyncio.wait_for(started.wait(), 30)
    assert states["inside"] == "active" and await waiting.getState() == "active"
    release.set()
    await eventually(lambda: _state_is(prioritized, "failed"))
    await eventually(lambda: _state_is(waiting, "completed"))
    await worker.close()
    await waiting.remove()
    assert await waiting.getState() == "unknown"
    assert await queue.getJobState("no-such-id") == "unknown"
    await queue.close()


async def _state_is(job: Any, state: str) -> bool:
    return await job.getState() == state
