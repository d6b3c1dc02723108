"""Reliability: tenant isolation through every tenant-scoped API, maintenance actors racing each
other (two schedulers and a GC at once), a flow re-drive racing a node's completion, and cancels
and purges racing a busy worker."""

from __future__ import annotations

import asyncio
import logging
import random
from collections import Counter
from typing import Any

import pytest

from pgjobs import (
    EdgePolicy,
    Fatal,
    Flow,
    FlowFilter,
    FlowRunning,
    JobContext,
    JobFilter,
    JobQueue,
    JobSpec,
    Registry,
    Status,
)
from pgjobs.maintenance import GcInput, collect_garbage
from tests.helpers import eventually
from tests.reliability.figures import Figure, record

pytestmark = pytest.mark.reliability


@pytest.fixture
def kind(registry: Registry) -> None:
    @registry.kind("t", input=Any, queue="shared", max_attempts=1)
    async def t(ctx: JobContext, data: Any) -> Any:
        return data


async def test_a_tenant_never_reads_counts_or_changes_another_tenants_jobs(
    jobs: JobQueue, kind: None
) -> None:
    theirs = await jobs.enqueue("t", {"secret": 1}, tenant="b", dedup_key="k", job_key="j")
    flow = Flow()
    flow.add("x", "t", {"secret": 2})
    their_flow = await jobs.submit_flow(flow, tenant="b")
    await jobs.append_log(theirs.id, "their line", tenant="b")
    a = {"tenant": "a"}
    # reads
    assert await jobs.get(theirs.id, **a) is None
    assert await jobs.get_by_dedup_key("shared", "k", **a) is None
    assert await jobs.dedup_holder("shared", "k", **a) is None
    assert await jobs.list_jobs(JobFilter(tenant="a")) == []
    assert sum((await jobs.substate_counts(JobFilter(tenant="a"))).values()) == 0
    assert (await jobs.read_logs(theirs.id, **a)).lines == []
    assert await jobs.flow_view(their_flow.flow_id, **a) is None
    assert await jobs.list_flows(FlowFilter(tenant="a")) == []
    # writes: every one is a no-op on another tenant's job
    assert not await jobs.cancel(theirs.id, **a)
    assert await jobs.cancel_flow(their_flow.flow_id, **a) == []
    assert not await jobs.requeue(theirs.id, **a)
    assert not await jobs.promote(theirs.id, **a)
    assert not await jobs.update_payload(theirs.id, {"secret": 0}, **a)
    assert not await jobs.change_priority(theirs.id, 99, **a)
    assert not await jobs.append_log(theirs.id, "injected", **a)
    assert (await jobs.purge(JobFilter(tenant="a"))).deleted == 0
    assert not await jobs.release_dedup_key("shared", "k", **a)
    # a same-named key of tenant a is its own
    mine = await jobs.enqueue("t", {"mine": 1}, tenant="a", dedup_key="k", job_key="j")
    assert mine.id != theirs.id and not mine.duplicate
    row = await jobs.get(theirs.id, tenant="b")
    assert row is not None and row.status == Status.PENDING and row.payload == {"secret": 1}
    assert row.priority == 0 and [
        ln.line for ln in (await jobs.read_logs(theirs.id, tenant="b")).lines
    ] == ["their line"]


async def test_two_schedulers_and_a_gc_together_emit_each_tick_once(
    jobs: JobQueue, kind: None
) -> None:
    await jobs.upsert_schedule("tick", "t", {"n": 1}, every=0.05, limit=20, immediately=True)
    old = await jobs.enqueue("t", {"old": True})
    await jobs.worker(queues=["shared"]).run(until_drained=True)

    async def emit_until_done() -> None:
        while (await jobs.get_schedule("tick")).next_run_at is not None:  # type: ignore[union-attr]
            await jobs.emit_due_schedules()
            await asyncio.sleep(0.01)  # paces the loop; emission is decided by the database

    async def gc_repeatedly() -> None:
        for _ in range(20):
            await collect_garbage(jobs.db, GcInput(completed_after=0))
            await asyncio.sleep(0.01)

    await asyncio.gather(emit_until_done(), emit_until_done(), gc_repeatedly())
    emitted = await jobs.list_jobs(JobFilter(queue="shared", status="pending"), limit=100)
    keys = [r.job_key for r in emitted]
    assert len(keys) == 20 and len(set(keys)) == 20  # each tick once, despite two emitters
    assert await jobs.get(old.id) is None  # the GC did its work meanwhile


async def test_requeue_flow_racing_a_node_completion_keeps_the_flow_consistent(
    jobs: JobQueue, registry: Registry
) -> None:
    """Per flow: ``broken`` died, ``slow`` is running, ``top`` waits for both. The slow node
    completes while ``requeue_flow`` is called, 25 flows at once at random offsets. Whatever
    the interleaving (refused with FlowRunning, waiting on the node's lock, or after the
    completion), each flow ends with every node completed, each node run the expected number
    of times, and no edge left open."""
    flows = 25
    runs: Counter[str] = Counter()
    released = {label: asyncio.Event() for label in map(str, range(flows))}
    slow_started: set[str] = set()

    @registry.kind("broken", input=dict[str, str], max_attempts=1)
    async def broken(ctx: JobContext, data: dict[str, str]) -> None:
        runs["broken " + data["f"]] += 1
        if runs["broken " + data["f"]] == 1:
            raise Fatal("first run fails")

    @registry.kind("slow", input=dict[str, str])
    async def slow(ctx: JobContext, data: dict[str, str]) -> None:
        runs["slow " + data["f"]] += 1
        slow_started.add(data["f"])
        await released[data["f"]].wait()

    @registry.kind("top", input=dict[str, str])
    async def top(ctx: JobContext, data: dict[str, str]) -> None:
        runs["top " + data["f"]] += 1

    submitted = []
    for label in released:
        flow = Flow(label)
        for name in ("broken", "slow", "top"):
            flow.add(name, name, {"f": label})
        flow.edge("broken", "top", EdgePolicy.BLOCK)
        flow.edge("slow", "top", EdgePolicy.BLOCK)
        submitted.append(await jobs.submit_flow(flow))
    worker = jobs.worker(concurrency=flows + 5)
    task = worker.start()
    try:

        async def ready() -> bool:
            dead = sum(
                (await jobs.substate_counts(JobFilter(kind="broken", status=Status.DEAD))).values()
            )
            return dead == flows and len(slow_started) == flows

        await eventually(ready)
        rng = random.Random(5)
        refused = Counter[str]()

        async def requeue(label: str, flow_id: int) -> list[int]:
            await asyncio.sleep(rng.uniform(0, 0.01))
            while True:
                try:
                    return await jobs.requeue_flow(flow_id)
                except FlowRunning:
                    refused[label] += 1
                    await asyncio.sleep(0.001)  # retried until the node is done

        async def release(label: str) -> None:
            await asyncio.sleep(rng.uniform(0, 0.01))
            released[label].set()

        redriven = await asyncio.gather(
            *(requeue(label, s.flow_id) for label, s in zip(released, submitted, strict=True)),
            *(release(label) for label in released),
        )
        for ids, flow in zip(redriven[:flows], submitted, strict=True):
            assert ids == [flow.job_ids["broken"]]  # only the dead node came back

        async def finished() -> bool:
            counts = await jobs.substate_counts(JobFilter(status=Status.COMPLETED))
            return sum(counts.values()) == 3 * flows

        await eventually(finished)
    finally:
        await worker.stop()
        await task
    for label in released:
        assert (runs["broken " + label], runs["slow " + label], runs["top " + label]) == (2, 1, 1)
    open_edges = await jobs.db.pool.fetchval(
        f"SELECT count(*) FROM {jobs.schema}.job_edges WHERE state NOT IN ('satisfied', 'released')"
    )
    assert open_edges == 0


async def test_cancels_and_purges_racing_a_busy_worker_leave_every_job_accounted_for(
    jobs: JobQueue, registry: Registry, caplog: pytest.LogCaptureFixture
) -> None:
    """While a worker completes short jobs as fast as it can, two other actors cancel and purge
    random ones (running ones included). Every job ends in exactly one place: completed (run
    once, its output written), cancelled (any late outcome fenced off), or gone (purged); every
    claim is accounted for as a completion or a refused write; nothing fails or deadlocks."""
    caplog.set_level(logging.WARNING, logger="pgjobs")
    runs: Counter[int] = Counter()

    @registry.kind("brief", input=dict[str, int], queue="churn", max_attempts=1)
    async def brief(ctx: JobContext, data: dict[str, int]) -> int:
        runs[data["n"]] += 1
        await asyncio.sleep(0.001 * (data["n"] % 3))  # some finish at once, some a little later
        return data["n"]

    created = await jobs.enqueue_many([JobSpec("brief", {"n": n}) for n in range(2_000)])
    n_of = {r.id: n for n, r in enumerate(created)}
    ids = list(n_of)
    rng = random.Random(20261130)
    to_cancel = rng.sample(ids, 300)
    to_purge = [rng.sample(ids, 10) for _ in range(30)]
    cancelled_by_call: set[int] = set()
    worker = jobs.worker(queues=["churn"], concurrency=20)
    task = worker.start()
    try:

        async def canceller() -> None:
            for job_id in to_cancel:
                if await jobs.cancel(job_id):
                    cancelled_by_call.add(job_id)
                await asyncio.sleep(0)

        async def purger() -> None:
            for chunk in to_purge:
                await jobs.purge(JobFilter(ids=tuple(chunk)), running="cancel")
                await asyncio.sleep(0.005)

        await asyncio.gather(canceller(), purger())

        async def settled() -> bool:
            return (
                await jobs.db.pool.fetchval(
                    f"SELECT count(*) FROM {jobs.schema}.jobs"
                    " WHERE queue = 'churn' AND status IN ('pending', 'running')"
                )
                == 0
            )

        await eventually(settled)
    finally:
        await worker.stop()
        await task
    rows = {
        r["id"]: r
        for r in await jobs.db.pool.fetch(
            f"SELECT id, status, output FROM {jobs.schema}.jobs WHERE queue = 'churn'"
        )
    }
    purged = set(ids) - set(rows)
    assert purged <= {i for chunk in to_purge for i in chunk}
    assert {r["status"] for r in rows.values()} <= {"completed", "cancelled"}
    cancelled = {i for i, r in rows.items() if r["status"] == "cancelled"}
    assert cancelled <= cancelled_by_call and all(rows[i]["output"] is None for i in cancelled)
    completed = {i for i, r in rows.items() if r["status"] == "completed"}
    assert all(runs[n_of[i]] == 1 and rows[i]["output"] == str(n_of[i]) for i in completed)
    assert max(runs.values()) == 1  # nothing ran twice
    stats = worker.stats
    assert stats.claimed == stats.completed + stats.lost and stats.dead == stats.retried == 0
    assert cancelled and purged and completed  # the race had all three outcomes
    failures = [r.getMessage() for r in caplog.records if "failed" in r.getMessage()]
    assert failures == []
    record(
        Figure(
            scenario="cancels and purges racing a busy worker (concurrency 20)",
            faults=f"{len(to_cancel)} cancels + {len(to_purge)} purges of 10, running jobs included",
            jobs=len(ids),
            lost=0,
            duplicated="0",
            recovery=(
                f"{len(completed):,} completed, {len(cancelled)} cancelled, {len(purged)} purged;"
                f" {stats.lost} late outcomes fenced off"
            ),
        )
    )


async def test_flow_siblings_finishing_together_never_strand_their_parent(
    jobs: JobQueue, registry: Registry
) -> None:
    """300 flows of one parent and 10 children through 4 workers whose handlers return at once:
    siblings' outcomes are written by different workers in overlapping transactions, over and
    over. Every parent runs, exactly once, after all of its children (before the fix to
    dependent resolution, 2-7 of every 100 parents stayed waiting for ever)."""
    flows, children = 300, 10
    runs: Counter[int] = Counter()
    early: list[int] = []

    @registry.kind("child", input=Any, queue="siblings", max_attempts=1)
    async def child(ctx: JobContext, data: Any) -> None:
        return None

    @registry.kind("parent", input=Any, queue="siblings", max_attempts=1)
    async def parent(ctx: JobContext, data: Any) -> None:
        runs[ctx.id] += 1
        if any(p["status"] != "completed" for p in await ctx.prerequisites()):
            early.append(ctx.id)

    parents = []
    for f in range(flows):
        flow = Flow()
        flow.add("p", "parent", {"f": f})
        for c in range(children):
            flow.add(f"c{c}", "child", {"c": c})
            flow.edge(f"c{c}", "p")
        parents.append((await jobs.submit_flow(flow)).job_ids["p"])
    workers = [jobs.worker(queues=["siblings"], concurrency=5, claim_ahead=0) for _ in range(4)]
    await asyncio.gather(*(w.run(until_drained=True) for w in workers))
    stranded = await jobs.pool.fetchval(
        f"SELECT count(*) FROM {jobs.schema}.jobs WHERE status = 'pending'"
    )
    assert stranded == 0 and early == []
    assert sorted(runs) == sorted(parents) and set(runs.values()) == {1}
    record(
        Figure(
            scenario="flow siblings finishing together (4 workers, 300 flows of 1 + 10)",
            faults="none (overlapping outcome writes of siblings)",
            jobs=flows * (children + 1),
            lost=0,
            duplicated="0 parents run twice",
            recovery=f"parents stranded: {stranded} of {flows}",
        )
    )
