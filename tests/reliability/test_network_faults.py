"""A network that goes silent under running workers: every connection blackholed (no FIN, no
RST), only the LISTEN connection blackholed, latency spikes, and heartbeats that cannot land
for a whole lease. The workers reach PostgreSQL through tests/fault_proxy.py, with the default
Timeouts; producers and checks go to the server directly.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import asyncpg
import pytest

import bullmq_compat
from pgjobs import DatabaseTimeout, JobContext, JobQueue, Registry
from tests.fault_proxy import FaultProxy
from tests.helpers import eventually
from tests.reliability.figures import Figure, record, seconds

pytestmark = [pytest.mark.reliability, pytest.mark.slow]


@pytest.fixture
async def proxy(pg_dsn: str) -> AsyncIterator[FaultProxy]:
    async with FaultProxy(pg_dsn) as proxy:
        yield proxy


class Completions:
    """When each job id completed (monotonic) and by which worker, and a way to wait."""

    def __init__(self) -> None:
        self.at: dict[Any, float] = {}
        self.by: dict[Any, int] = {}
        self._changed = asyncio.Event()

    def listener(self, worker: int) -> Any:
        def on_event(event: str, ctx: JobContext, detail: dict[str, Any]) -> None:
            if event == "completed":
                self.add(ctx.id, worker)

        return on_event

    def add(self, job_id: Any, worker: int) -> None:
        if job_id not in self.at:
            self.at[job_id] = time.monotonic()
            self.by[job_id] = worker
        self._changed.set()

    def first_after(self, moment: float, worker: int) -> float | None:
        times = [t for i, t in self.at.items() if t > moment and self.by[i] == worker]
        return min(times) - moment if times else None

    async def wait_until(self, probe: Any, *, timeout: float) -> None:
        async def reached() -> None:
            while not probe():
                self._changed.clear()
                await self._changed.wait()

        await asyncio.wait_for(reached(), timeout)

    async def through_an_outage(
        self, proxy: FaultProxy, add: Callable[[int], Awaitable[set[Any]]], workers: int
    ) -> tuple[int, float]:
        """Jobs added and run, every connection blackholed, more jobs added: waits until each
        worker has completed one of them (well within a minute) and every job is done. The
        number of connections silenced, and when."""
        before = await add(40)
        await self.wait_until(lambda: before <= self.at.keys(), timeout=30)
        silenced = proxy.blackhole()
        fault = time.monotonic()
        after = await add(80)
        await self.wait_until(
            lambda: all(self.first_after(fault, n) is not None for n in range(workers)),
            timeout=50,
        )
        await self.wait_until(lambda: (before | after) <= self.at.keys(), timeout=120)
        return silenced, fault


def _check_and_record(
    who: str, done: Completions, runs: Counter[Any], errors: list[list[BaseException]],
    silenced: int, fault: float,
) -> None:  # fmt: skip
    assert set(runs.values()) == {1} and len(runs) == 120, "a job ran twice, or not at all"
    for worker_errors in errors:
        # the outage is reported once per worker, with the error that revealed it
        assert len(worker_errors) == 1, worker_errors
        assert isinstance(worker_errors[0], DatabaseTimeout)
    recovery = [done.first_after(fault, n) or 0.0 for n in range(len(errors))]
    record(
        Figure(
            scenario=f"every connection of the workers blackholed ({len(errors)} {who}, defaults)",
            faults=f"{silenced} connections silenced (no FIN, no RST); new ones go through",
            jobs=120,
            lost=0,
            duplicated="0 jobs run twice",
            recovery="fault → each worker's first completion: " + seconds(recovery),
        )
    )


@pytest.mark.timeout(300)
async def test_engine_workers_whose_connections_all_go_silent_complete_jobs_again(
    jobs: JobQueue, registry: Registry, schema_name: str, proxy: FaultProxy
) -> None:
    runs: Counter[int] = Counter()
    done = Completions()

    @registry.kind("work", input=dict[str, int])
    async def work(ctx: JobContext, data: dict[str, int]) -> None:
        runs[ctx.id] += 1
        await asyncio.sleep(0.05)

    queues: list[JobQueue] = []
    workers = []
    errors: list[list[BaseException]] = []
    for n in range(2):
        remote = await JobQueue.connect(
            f"{proxy.dsn}?application_name=worker{n}", schema=schema_name, registry=registry
        )
        queues.append(remote)
        errors.append([])
        workers.append(
            remote.worker(concurrency=3, on_event=done.listener(n), on_error=errors[n].append)
        )
    tasks = [worker.start() for worker in workers]

    async def add(count: int) -> set[Any]:
        return {r.id for r in await jobs.enqueue_batch("work", [{"n": n} for n in range(count)])}

    try:
        silenced, fault = await done.through_an_outage(proxy, add, len(workers))
    finally:
        for worker in workers:
            await worker.stop()
        await asyncio.gather(*tasks, return_exceptions=True)
        for remote in queues:
            await asyncio.wait_for(remote.close(), 30)
    statuses = Counter(row.status for row in await jobs.list_jobs(limit=1000))
    assert statuses == Counter({"completed": 120})
    _check_and_record("engine workers", done, runs, errors, silenced, fault)


@pytest.mark.timeout(300)
async def test_facade_workers_whose_connections_all_go_silent_complete_jobs_again(
    jobs: JobQueue, schema_name: str, proxy: FaultProxy
) -> None:
    runs: Counter[str] = Counter()
    done = Completions()
    errors: list[list[BaseException]] = [[], []]

    async def process(job: Any, token: str) -> int:
        runs[job.id] += 1
        await asyncio.sleep(0.05)
        return int(job.data["n"])

    workers = []
    for n in range(2):
        worker = bullmq_compat.Worker(
            "net",
            process,
            {
                "connection": f"{proxy.dsn}?application_name=facade{n}",
                "schema": schema_name,
                "concurrency": 3,
            },
        )
        worker.on("completed", lambda job, value, n=n: done.add(job.id, n))
        worker.on("error", errors[n].append)
        workers.append(worker)
    queue = bullmq_compat.Queue("net", {"connection": jobs})

    async def add(count: int) -> set[Any]:
        added = await queue.addBulk([{"name": "n", "data": {"n": n}} for n in range(count)])
        return {job.id for job in added}

    try:
        silenced, fault = await done.through_an_outage(proxy, add, len(workers))
        counts = await queue.getJobCounts("completed", "waiting", "active", "failed")
    finally:
        for worker in workers:
            await asyncio.wait_for(worker.close(), 60)
        await queue.close()
    assert counts == {"completed": 120, "waiting": 0, "active": 0, "failed": 0}
    _check_and_record("facade workers", done, runs, errors, silenced, fault)


async def test_a_silent_listen_connection_is_replaced_and_wake_ups_resume(
    jobs: JobQueue, registry: Registry, schema_name: str, proxy: FaultProxy, pg_dsn: str
) -> None:
    """With the safety-net poll at 10 minutes, only a notification (or the wake-up the new
    LISTEN connection brings) can start a job within the test's deadline."""
    started: asyncio.Queue[int] = asyncio.Queue()

    @registry.kind("ping", input=dict[str, int])
    async def ping(ctx: JobContext, data: dict[str, int]) -> None:
        started.put_nowait(data["n"])

    remote = await JobQueue.connect(proxy.dsn, schema=schema_name, registry=registry)
    worker = remote.worker(concurrency=1, poll_interval=600)
    task = worker.start()
    observer = await asyncpg.connect(pg_dsn)
    registered = f"SELECT max(expires_at) FROM {schema_name}.idle_workers"
    listening = (
        "SELECT client_port FROM pg_stat_activity WHERE datname = current_database()"
        " AND query ILIKE 'LISTEN%' AND pid <> pg_backend_pid()"
    )
    try:
        # Waiting, registered as such, before any job: the first job can then start only by a
        # notification, which goes to the silent connection, or by the wake-up its
        # replacement brings.
        first = await eventually(lambda: observer.fetchval(registered), timeout=30)
        port = await eventually(lambda: observer.fetchval(listening))
        assert proxy.blackhole(proxy.by_upstream_port({port})) == 1
        fault = time.monotonic()
        await jobs.enqueue("ping", {"n": 1})
        assert await asyncio.wait_for(started.get(), 45) == 1
        woken_after = time.monotonic() - fault

        # Waiting again: its registration after job 1 (with one slot, the last statement before
        # it waits, and made only while its LISTEN is up). Job 2 can now start only by a
        # notification on the new connection.
        async def registered_again() -> bool:
            return bool((await observer.fetchval(registered) or first) > first)

        await eventually(registered_again, timeout=30)
        await jobs.enqueue("ping", {"n": 2})
        assert await asyncio.wait_for(started.get(), 20) == 2
    finally:
        await observer.close()
        await worker.stop()
        await task
        await asyncio.wait_for(remote.close(), 30)
    assert worker.stats.completed == 2
    record(
        Figure(
            scenario="worker's LISTEN connection blackholed (poll at 10 min, defaults)",
            faults="the LISTEN connection silenced (no FIN, no RST)",
            jobs=2,
            lost=0,
            duplicated="0",
            recovery="fault → the job it missed started: " + seconds([woken_after]),
        )
    )


async def test_latency_spikes_cost_no_job_and_no_false_rescue(
    jobs: JobQueue, registry: Registry, schema_name: str, proxy: FaultProxy
) -> None:
    runs: Counter[int] = Counter()

    @registry.kind("slowlink", input=dict[str, int])
    async def slowlink(ctx: JobContext, data: dict[str, int]) -> None:
        runs[ctx.id] += 1
        await ctx.progress({"step": 1})  # a fenced write across the slow link as well

    remote = await JobQueue.connect(proxy.dsn, schema=schema_name, registry=registry)
    worker = remote.worker(concurrency=10)
    task = worker.start()
    try:
        proxy.add_latency(0.2, 0.5)
        ids = [r.id for r in await jobs.enqueue_batch("slowlink", [{"n": n} for n in range(60)])]

        async def all_done() -> bool:
            rows = await jobs.list_jobs(limit=100)
            return all(row.status == "completed" for row in rows) and len(rows) == len(ids)

        await eventually(all_done, timeout=90, interval=0.2)
    finally:
        proxy.no_latency()
        await worker.stop()
        await task
        await asyncio.wait_for(remote.close(), 30)
    assert set(runs.values()) == {1} and len(runs) == 60
    assert (worker.stats.rescued, worker.stats.lost) == (0, 0)
    rows = await jobs.list_jobs(limit=100)
    assert {row.attempts for row in rows} == {1}
    record(
        Figure(
            scenario="200-500 ms of latency on every chunk of a worker's connections",
            faults="latency spikes for the whole run (defaults)",
            jobs=60,
            lost=0,
            duplicated="0 jobs run twice, 0 rescued",
            recovery="-",
        )
    )


async def test_a_worker_whose_heartbeats_cannot_land_gives_its_jobs_up_at_the_lease_end(
    jobs: JobQueue, registry: Registry, schema_name: str, proxy: FaultProxy,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    """Nothing reaches the database for longer than the lease: the running handler is
    cancelled when its lease ends on the worker's clock, its fenced writes are refused from then
    on, the outage is reported once; once the network is back the job is rescued and run
    again, by the same worker."""
    caplog.set_level(logging.WARNING, logger="pgjobs")
    first_run_cancelled = asyncio.Event()
    contexts: list[JobContext] = []

    @registry.kind("long", input=dict[str, int])
    async def long(ctx: JobContext, data: dict[str, int]) -> str:
        contexts.append(ctx)
        if len(contexts) == 1:
            try:
                await asyncio.Event().wait()  # runs until its worker gives it up
            except asyncio.CancelledError:
                first_run_cancelled.set()
                raise
        return "second run"

    errors: list[BaseException] = []
    events: list[str] = []
    remote = await JobQueue.connect(proxy.dsn, schema=schema_name, registry=registry)
    worker = remote.worker(
        concurrency=1,
        lease=3.0,
        on_error=errors.append,
        on_event=lambda event, ctx, detail: events.append(event),
    )
    task = worker.start()
    try:
        job = await jobs.enqueue("long", {"n": 1})
        await eventually(lambda: _started(contexts))
        proxy.drop_new = True  # nothing gets through, old connections or new
        proxy.blackhole()
        # nothing can reach the worker now: only its own clock can end the first run
        await asyncio.wait_for(first_run_cancelled.wait(), 30)
        assert contexts[0].lost and time.monotonic() >= contexts[0].lease_until
        assert await contexts[0].progress({"late": True}) is False  # refused, no round trip
        assert await contexts[0].log("late") == 0
        proxy.drop_new = False
        row = await eventually(lambda: _finished(jobs, job.id), timeout=60)
    finally:
        await worker.stop()
        await task
        await asyncio.wait_for(remote.close(), 30)
    assert row.status == "completed" and row.output == "second run"
    assert row.progress is None  # the late progress never landed
    assert events[:2] == ["active", "lost"] and "completed" in events
    assert len(errors) == 1 and isinstance(errors[0], DatabaseTimeout | OSError)
    lapsed = [r for r in caplog.records if "ran out before a heartbeat" in r.getMessage()]
    assert len(lapsed) == 1


async def _started(contexts: list[JobContext]) -> bool:
    return bool(contexts)


async def _finished(jobs: JobQueue, job_id: int) -> Any:
    row = await jobs.get(job_id)
    return row if row is not None and row.status == "completed" else None
