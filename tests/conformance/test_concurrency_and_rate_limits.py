"""BullMQ's Node cases for global concurrency and rate limits (tests/concurrency.test.ts,
tests/rate_limiter.test.ts), in Python against the package's API: ``setGlobalConcurrency``,
``setGlobalRateLimit``, the Worker's ``limiter`` option and ``Queue.rateLimit``. Node's
durations of seconds are scaled down where the case only compares elapsed time with them, and
its job counts are smaller: the Python worker on Redis waits whole seconds whenever it is
rate-limited (its blocking waits are rounded up to seconds) or the global concurrency is
reached (it waits out its ``drainDelay``), where Node's takes the next job at once."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from tests.conformance.conftest import Bull, future_of, wait_for


def make_worker(bq: Bull, name: str, processor: Any, **opts: Any) -> Any:
    """``bq.worker`` with a ``drainDelay`` of 1 s unless given (BullMQ's default is 5 s). On
    the real package (redis-py's 5 s default socket timeout), ``close()`` can miss the cancel
    of a blocking wait for jobs that has just begun: the wait then runs its course, and one as
    long as the socket timeout is retried again and again, so that the close never ends."""
    return bq.worker(name, processor, **{"drainDelay": 1, **opts})


async def noop(job: Any, token: str) -> None:
    return None


def start(worker: Any) -> asyncio.Future[None]:
    return asyncio.ensure_future(worker.run())


async def stop(worker: Any, running: asyncio.Future[None], force: bool = False) -> None:
    await worker.close(force)
    await asyncio.wait_for(asyncio.gather(running, return_exceptions=True), 10)


class Parallel:
    """Counts the jobs of a processor running at once."""

    def __init__(self) -> None:
        self.now = 0
        self.peak = 0

    def __enter__(self) -> Parallel:
        self.now += 1
        self.peak = max(self.peak, self.now)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.now -= 1


def bulk(count: int, name: str = "test") -> list[dict[str, Any]]:
    return [{"name": name, "data": {"foo": f"bar{i}"}} for i in range(count)]


# --- global concurrency ---------------------------------------------------------------------


# Node: tests/concurrency.test.ts › Concurrency › should run max concurrency for jobs added
#   (the first of the two cases of this title: global concurrency 1)
async def test_global_concurrency_one_runs_jobs_one_at_a_time(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    assert await queue.getGlobalConcurrency() is None
    jobs = await queue.addBulk(bulk(4))
    await queue.setGlobalConcurrency(1)
    parallel = Parallel()
    order: list[str] = []

    async def process(job: Any, token: str) -> None:
        with parallel:
            order.append(job.id)
            await asyncio.sleep(0.05)

    worker = make_worker(bq, name, process, autorun=False, concurrency=10)
    done = future_of(worker, "completed", 4)
    running = start(worker)
    await wait_for(done)
    assert order == [job.id for job in jobs]
    assert parallel.peak == 1
    assert await queue.getGlobalConcurrency() == 1
    await stop(worker, running)


# Node: tests/concurrency.test.ts › Concurrency › should run max concurrency for jobs added
#   (the second of the two cases of this title: global concurrency removed)
async def test_removed_global_concurrency_lets_worker_concurrency_rule(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    jobs = await queue.addBulk(bulk(16))
    await queue.setGlobalConcurrency(1)
    await queue.removeGlobalConcurrency()
    parallel = Parallel()
    order: list[str] = []

    async def process(job: Any, token: str) -> None:
        with parallel:
            order.append(job.id)
            await asyncio.sleep(0.1)

    worker = make_worker(bq, name, process, autorun=False, concurrency=2)
    done = future_of(worker, "completed", 16)
    running = start(worker)
    await wait_for(done)
    assert order == [job.id for job in jobs]
    assert parallel.peak == 2
    assert await queue.getGlobalConcurrency() is None
    await stop(worker, running)


# Node: tests/concurrency.test.ts › Concurrency › emits drained global event only once when
#   worker is idle
async def test_idle_worker_emits_drained_once(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)

    async def process(job: Any, token: str) -> None:
        await asyncio.sleep(0.025)

    worker = make_worker(bq, name, process, concurrency=10, drainDelay=1)
    events = bq.queue_events(name, lastEventId="0")
    drained: list[Any] = []
    events.on("drained", lambda *args: drained.append(args))
    completed = future_of(worker, "completed", 2)
    await queue.addBulk(
        [{"name": "test", "data": {"foo": "bar"}}, {"name": "test", "data": {"foo": "baz"}}]
    )
    await queue.setGlobalConcurrency(1)
    await wait_for(completed)
    await asyncio.sleep(3)  # the idle worker polls again every drainDelay (1 s) meanwhile
    assert await queue.getJobCountByTypes("completed") == 2
    assert len(drained) == 1


# Node: tests/concurrency.test.ts › Concurrency › when moving job to waiting-children › should
#   run max concurrency for jobs added first processed
async def test_global_concurrency_holds_with_jobs_moving_to_waiting_children(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    flow = bq.flow_producer()
    await queue.addBulk(bulk(2))
    await queue.setGlobalConcurrency(1)
    await flow.add(
        {
            "name": "parent-job",
            "queueName": name,
            "data": {},
            "children": [
                {
                    "name": "child-job",
                    "data": {"idx": 0, "foo": "bar"},
                    "queueName": name,
                    "children": [
                        {"name": "child-job", "data": {"idx": 0, "foo": "bar"}, "queueName": name}
                    ],
                }
            ],
        }
    )
    parallel = Parallel()
    count = [0]
    reached = asyncio.get_running_loop().create_future()

    async def process(job: Any, token: str) -> None:
        count[0] += 1
        with parallel:
            await asyncio.sleep(0.1)
        await job.moveToWaitingChildren(token, {})
        if count[0] == 5 and not reached.done():
            reached.set_result(None)

    worker = make_worker(bq, name, process, autorun=False, concurrency=10)
    worker.on("error", lambda *args: None)
    running = start(worker)
    await wait_for(reached)
    assert parallel.peak == 1
    await stop(worker, running)


# Node: tests/concurrency.test.ts › Concurrency › should automatically process stalled jobs
#   respecting group order
async def test_stalled_jobs_are_taken_again_in_order_under_global_concurrency(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    for j in range(4):
        await queue.add("test-stalled", {"foo": j % 2})
    await queue.setGlobalConcurrency(2)

    async def forever(job: Any, token: str) -> None:
        await asyncio.sleep(3)

    worker = make_worker(
        bq, name, forever, autorun=False, lockDuration=1000, stalledInterval=100, concurrency=4
    )
    worker.on("error", lambda *args: None)
    all_active = future_of(worker, "active", 2)
    running = start(worker)
    await wait_for(all_active)
    await stop(worker, running, force=True)
    processed: list[int] = []

    async def process(job: Any, token: str) -> None:
        await asyncio.sleep(0.01)
        processed.append(job.data["foo"])

    worker2 = make_worker(bq, name, process, autorun=False, concurrency=4, stalledInterval=100)
    worker2.on("error", lambda *args: None)
    stalled = future_of(worker2, "stalled", 2)
    completed = future_of(worker2, "completed", 4)
    running2 = start(worker2)
    await wait_for(stalled)
    await wait_for(completed)
    await stop(worker2, running2)
    assert processed[0] + processed[1] == 1
    assert processed[2] + processed[3] == 1


# Node: tests/concurrency.test.ts › Concurrency › when jobs use backoff strategy › processes
#   jobs without getting stuck
# Node: tests/concurrency.test.ts › Concurrency › when jobs use backoff strategy › when backoff
#   is 0 › processes jobs without getting stuck
async def _retries_under_global_concurrency(bq: Bull, jobs: int, backoff: int, conc: int) -> None:
    name = bq.name()
    queue = bq.queue(name)
    for j in range(jobs):
        await queue.add("test", {"foo": f"bar{j}"}, {"attempts": 2, "backoff": backoff})
    await queue.setGlobalConcurrency(1)
    processed: list[Any] = []
    done = asyncio.get_running_loop().create_future()

    async def process(job: Any, token: str) -> None:
        await asyncio.sleep(0.02)
        if job.attemptsStarted == 1:
            raise Exception("Not yet!")
        processed.append(job.data)
        if len(processed) == jobs and not done.done():
            done.set_result(None)

    make_worker(bq, name, process, concurrency=conc)
    await wait_for(done)
    assert len(processed) == jobs


async def test_retries_with_backoff_do_not_stall_global_concurrency(bq: Bull) -> None:
    await _retries_under_global_concurrency(bq, jobs=2, backoff=100, conc=10)


async def test_retries_with_zero_backoff_do_not_stall_global_concurrency(bq: Bull) -> None:
    await _retries_under_global_concurrency(bq, jobs=3, backoff=0, conc=4)


# --- rate limits ----------------------------------------------------------------------------


# Node: tests/rate_limiter.test.ts › Rate Limiter › should not put a job into the delayed queue
#   when limit is hit
async def test_rate_limited_jobs_are_not_delayed(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)

    async def process(job: Any, token: str) -> None:
        await asyncio.sleep(0.2)

    worker = make_worker(bq, name, process, concurrency=5, limiter={"max": 1, "duration": 1000})
    active = future_of(worker, "active")
    await queue.addBulk([{"name": "test", "data": {}} for _ in range(5)])
    await wait_for(active)
    await asyncio.sleep(0.1)  # the other four meet the limit meanwhile
    assert await queue.getDelayedCount() == 0


# Node: tests/rate_limiter.test.ts › Rate Limiter › when setting rate limit globally › should
#   obey the rate limit
async def test_global_rate_limit_spaces_the_jobs(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    events = bq.queue_events(name, lastEventId="0")
    ttls: list[int] = []

    async def process(job: Any, token: str) -> None:
        ttls.append(await queue.getRateLimitTtl())

    await queue.setGlobalRateLimit(1, 500)
    assert await queue.getGlobalRateLimit() == {"max": 1, "duration": 500}
    completed = future_of(events, "completed", 4)
    failed: list[Any] = []
    events.on("failed", lambda *args: failed.append(args))
    make_worker(bq, name, process)
    started = time.monotonic()
    await queue.addBulk([{"name": "rate test", "data": {}} for _ in range(4)])
    await wait_for(completed)
    assert time.monotonic() - started >= 3 * 0.5
    assert all(200 < ttl <= 500 for ttl in ttls), ttls
    assert failed == []


# Node: tests/rate_limiter.test.ts › Rate Limiter › when setting rate limit globally › when rate
#   limit is removed › should execute jobs without rate limit
async def test_removed_global_rate_limit_no_longer_spaces_the_jobs(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    events = bq.queue_events(name, lastEventId="0")
    ttls: list[int] = []

    async def process(job: Any, token: str) -> None:
        ttls.append(await queue.getRateLimitTtl())

    await queue.setGlobalRateLimit(1, 500)
    await queue.removeGlobalRateLimit()
    assert await queue.getGlobalRateLimit() is None
    completed = future_of(events, "completed", 10)
    make_worker(bq, name, process)
    await queue.addBulk([{"name": "rate test", "data": {}} for _ in range(10)])
    await wait_for(completed)
    assert ttls == [-2] * 10  # no limit while they ran


# Node: tests/rate_limiter.test.ts › Rate Limiter › should obey the rate limit
async def test_worker_limiter_spaces_the_jobs(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    events = bq.queue_events(name, lastEventId="0")
    completed = future_of(events, "completed", 4)
    make_worker(bq, name, noop, limiter={"max": 1, "duration": 300})
    started = time.monotonic()
    await queue.addBulk([{"name": "rate test", "data": {}} for _ in range(4)])
    await wait_for(completed)
    assert time.monotonic() - started >= 3 * 0.3


# Node: tests/rate_limiter.test.ts › Rate Limiter › should respect processing time without
#   adding limiter delay
async def test_limiter_adds_no_delay_to_the_processing_time(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)

    async def process(job: Any, token: str) -> None:
        await asyncio.sleep(0.001 * (1 + job.data["i"] % 4))

    worker = make_worker(bq, name, process, concurrency=5, limiter={"max": 4, "duration": 500})
    completed = future_of(worker, "completed", 12)
    jobs = await queue.addBulk([{"name": "rate test", "data": {"i": i}} for i in range(12)])
    await wait_for(completed)
    for job in jobs:
        stored = await queue.getJob(job.id)
        assert stored.finishedOn - stored.processedOn <= 500


# Node: tests/rate_limiter.test.ts › Rate Limiter › should quickly close a worker even with slow
#   rate-limit
async def test_worker_with_a_slow_limiter_closes_quickly(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    worker = make_worker(bq, name, noop, limiter={"max": 1, "duration": 60000})
    completed = future_of(worker, "completed")
    await queue.add("test", 1)
    await wait_for(completed)
    await wait_for(worker.close(), 3)


# Node: tests/rate_limiter.test.ts › Rate Limiter › when a job never completed › should not
#   block the rate limit
async def test_a_job_that_never_ends_does_not_block_the_limiter(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)

    async def process(job: Any, token: str) -> str | None:
        if job.data == "delay":
            await asyncio.get_running_loop().create_future()  # never resolves
        return "Success" if job.data == "test" else None

    worker = make_worker(
        bq, name, process, autorun=False, concurrency=2, limiter={"max": 5, "duration": 300}
    )
    completed = future_of(worker, "completed", 19)
    await queue.add("delay-job", "delay")
    for _ in range(20):
        await queue.add("test-job", "test")
    running = start(worker)
    await wait_for(completed)
    await stop(worker, running, force=True)


# Node: tests/rate_limiter.test.ts › Rate Limiter › when queue is paused between rate limit ›
#   should add active jobs to wait
async def test_pausing_a_rate_limited_queue_leaves_the_rest_waiting(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    limiter = {"max": 1, "duration": 2000}
    workers = [make_worker(bq, name, noop, limiter=limiter) for _ in range(4)]
    active = asyncio.get_running_loop().create_future()
    for worker in workers:
        worker.on("active", lambda *args: active.done() or active.set_result(None))
    events = bq.queue_events(name, lastEventId="0")
    completed = future_of(events, "completed")
    await queue.addBulk([{"name": "rate test", "data": {}} for _ in range(4)])
    await wait_for(active)
    await queue.pause()
    await wait_for(completed)
    await asyncio.sleep(0.5)  # nothing else completes meanwhile
    counts = await queue.getJobCounts("completed", "wait")
    assert counts["completed"] == 1
    assert counts["wait"] == 3


# Node: tests/rate_limiter.test.ts › Rate Limiter › when using flows › should obey the rate
#   limit per queue
async def test_each_queue_of_a_flow_obeys_its_own_limiter(bq: Bull) -> None:
    name = bq.name()
    parent_name = bq.name("parent-queue")
    events = bq.queue_events(name, lastEventId="0")
    parent_events = bq.queue_events(parent_name, lastEventId="0")
    children_done = future_of(events, "completed", 6)
    parents_done = future_of(parent_events, "completed", 3)

    async def process(job: Any, token: str) -> None:
        await asyncio.sleep(0.1)

    make_worker(bq, name, process, concurrency=2, limiter={"max": 1, "duration": 300})
    make_worker(bq, parent_name, process, concurrency=2, limiter={"max": 1, "duration": 600})
    flow = bq.flow_producer()
    started = time.monotonic()
    await flow.addBulk(
        [
            {
                "name": "parent-job",
                "queueName": parent_name,
                "data": {},
                "children": [
                    {"name": "child-job", "data": {"idx": 0, "foo": "bar"}, "queueName": name},
                    {"name": "child-job", "data": {"idx": 1, "foo": "baz"}, "queueName": name},
                ],
            }
            for _ in range(3)
        ]
    )
    await wait_for(children_done, 30)
    assert time.monotonic() - started >= 5 * 0.3
    await wait_for(parents_done, 30)
    assert time.monotonic() - started >= 2 * 0.6


# Node: tests/rate_limiter.test.ts › Rate Limiter › should obey the rate limit with max value
#   greater than 1
async def test_limiter_with_max_two_spaces_pairs_of_jobs(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    events = bq.queue_events(name, lastEventId="0")
    completed = future_of(events, "completed", 6)
    make_worker(bq, name, noop, limiter={"max": 2, "duration": 300})
    started = time.monotonic()
    await queue.addBulk([{"name": "rate test", "data": {}} for _ in range(6)])
    await wait_for(completed)
    assert time.monotonic() - started >= (6 / 2 - 1) * 0.3


# Node: tests/rate_limiter.test.ts › Rate Limiter › when dynamic limit is used › when removing
#   rate limit › should process jobs normally
# (Node sets the limit with ``worker.rateLimit``; the Python package has ``Queue.rateLimit``.)
async def test_removed_rate_limit_key_lets_the_limiter_rule(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    events = bq.queue_events(name, lastEventId="0")
    assert await queue.getRateLimitTtl() == -2
    worker = make_worker(bq, name, noop, autorun=False, limiter={"max": 1, "duration": 1000})
    await queue.rateLimit(10000)
    await queue.removeRateLimitKey()
    completed = future_of(events, "completed", 2)
    started = time.monotonic()
    await queue.addBulk([{"name": "rate test", "data": {}} for _ in range(2)])
    running = start(worker)
    await wait_for(completed)
    elapsed = time.monotonic() - started
    assert 1.0 <= elapsed < 10.0  # the limiter spaces them; the 10 s rate limit is gone
    await stop(worker, running)


# Node: tests/rate_limiter.test.ts › Rate Limiter › when there are more added jobs than max
#   limiter › processes jobs as max limiter from the beginning
async def test_limiter_caps_jobs_in_parallel_from_the_start(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    parallel = Parallel()

    async def process(job: Any, token: str) -> str:
        with parallel:
            await asyncio.sleep(0.35)
        return "success"

    worker = make_worker(
        bq, name, process, concurrency=60, autorun=False, limiter={"max": 10, "duration": 500}
    )
    completed = future_of(worker, "completed", 40)
    await queue.addBulk([{"name": "test-job", "data": {"id": f"id-{i}"}} for i in range(40)])
    running = start(worker)
    await wait_for(completed)
    assert parallel.peak <= 10
    await stop(worker, running)


# Node: tests/rate_limiter.test.ts › Rate Limiter › when there are more added jobs than max
#   limiter › when rate limit is max 1 › processes jobs as max limiter from the beginning
async def test_limiter_of_one_runs_one_job_at_a_time(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    parallel = Parallel()

    async def process(job: Any, token: str) -> str:
        with parallel:
            await asyncio.sleep(0.35)
        return "success"

    worker = make_worker(
        bq, name, process, concurrency=100, autorun=False, limiter={"max": 1, "duration": 500}
    )
    completed = future_of(worker, "completed", 3)
    await queue.addBulk([{"name": "test-job", "data": {"id": f"id-{i}"}} for i in range(3)])
    running = start(worker)
    await wait_for(completed)
    assert parallel.peak <= 1
    await stop(worker, running)


# Node: tests/rate_limiter.test.ts › Rate Limiter › should obey priority
async def test_rate_limited_worker_obeys_priority(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    await queue.pause()
    for i in range(5):
        await queue.add("priority test", {"id": i}, {"priority": i % 4 + 1})
    seen: list[int] = []

    async def process(job: Any, token: str) -> None:
        seen.append(job.opts["priority"])

    worker = make_worker(bq, name, process, limiter={"max": 1, "duration": 10})
    events = bq.queue_events(name, lastEventId="0")
    completed = future_of(events, "completed", 5)
    failed: list[Any] = []
    events.on("failed", lambda *args: failed.append(args))
    await queue.resume()
    await wait_for(completed)
    assert seen == sorted(seen)
    assert failed == []
    assert worker is not None


FACADE_PENDING: dict[str, str] = {}


# --- a worker's limiter belongs to the worker (BullMQ: its claims count in the queue's limiter
# key, and only the workers that pass a limiter compare that count with a max) --------------


async def test_a_worker_without_limiter_is_not_held_by_another_workers_limiter(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    limited = make_worker(bq, name, noop, limiter={"max": 1, "duration": 60000})
    first = future_of(limited, "completed")
    await queue.add("test", {"i": 0})
    await wait_for(first)  # the limited worker's window is now full for a minute
    free = make_worker(bq, name, noop, concurrency=5)
    finished = future_of(free, "completed", 20)
    await queue.addBulk(bulk(20))
    await wait_for(finished, 30)  # well inside the limited worker's minute
    assert await queue.getGlobalRateLimit() is None
    assert await queue.getJobCountByTypes("completed") == 21


async def test_workers_with_limiters_share_one_limit(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    events = bq.queue_events(name, lastEventId="0")
    completed = future_of(events, "completed", 6)
    limiter = {"max": 2, "duration": 500}
    for _ in range(2):
        make_worker(bq, name, noop, concurrency=5, limiter=limiter)
    jobs = await queue.addBulk(bulk(6))
    await wait_for(completed, 30)
    starts = sorted([(await queue.getJob(job.id)).processedOn for job in jobs])
    # two starts per window across both workers: the 3rd and 5th each wait for a new window
    assert starts[2] - starts[0] >= 500, starts
    assert starts[4] - starts[2] >= 500, starts


async def test_a_limiter_does_not_outlive_its_worker(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    limited = make_worker(bq, name, noop, autorun=False, limiter={"max": 2, "duration": 60000})
    two = future_of(limited, "completed", 2)
    await queue.addBulk(bulk(2))
    running = start(limited)
    await wait_for(two)
    await stop(limited, running)  # its window stays full for the rest of the minute
    free = make_worker(bq, name, noop, autorun=False, concurrency=5)
    finished = future_of(free, "completed", 30)
    await queue.addBulk(bulk(30))
    running = start(free)
    await wait_for(finished, 30)
    await stop(free, running)
    assert await queue.getGlobalRateLimit() is None
    assert await queue.getJobCountByTypes("completed") == 32


async def test_global_limits_set_and_removed_report_what_they_changed(bq: Bull) -> None:
    """The return values of the global limit calls, as BullMQ's HSET and HDEL give them (this
    file's facade-only test of the same calls predates the harness; this is its oracle)."""
    queue = bq.queue()
    assert await queue.getGlobalConcurrency() is None
    await queue.setGlobalConcurrency(5)
    assert await queue.getGlobalConcurrency() == 5
    assert await queue.removeGlobalConcurrency() == 1
    assert await queue.removeGlobalConcurrency() == 0
    assert await queue.setGlobalRateLimit(100, 1000) == 2
    assert await queue.setGlobalRateLimit(100, 1000) == 0
    assert await queue.getGlobalRateLimit() == {"max": 100, "duration": 1000}
    assert await queue.removeGlobalRateLimit() == 2
    assert await queue.removeGlobalRateLimit() == 0 and await queue.getGlobalRateLimit() is None
