"""Operations: purge, job keys, cancel, requeue, promote, edits, logs, tenant scoping."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import asyncpg
import pydantic
import pytest

from pgjobs import (
    EdgePolicy,
    Flow,
    InvalidFlow,
    InvalidJobInput,
    InvalidOption,
    JobContext,
    JobFilter,
    JobQueue,
    JobSpec,
    Keep,
    NotJson,
    Registry,
    Status,
)
from pgjobs.completer import write_outcomes
from pgjobs.config import notify_channel
from pgjobs.outcomes import Outcome
from tests.helpers import eventually, expire_lease
from tests.interleave import overlap


class Item(pydantic.BaseModel):
    n: int = 0


@pytest.fixture
def kinds(registry: Registry) -> dict[str, list[int]]:
    seen: dict[str, list[int]] = {"x": [], "y": []}

    @registry.kind("x", input=Item, max_attempts=1)
    async def x(ctx: JobContext, item: Item) -> int:
        seen["x"].append(item.n)
        return item.n

    @registry.kind("y", input=Item, max_attempts=1)
    async def y(ctx: JobContext, item: Item) -> int:
        seen["y"].append(item.n)
        if item.n < 0:
            raise ValueError("negative")
        return item.n

    return seen


async def statuses(jobs: JobQueue) -> list[tuple[int, str]]:
    rows = await jobs.db.pool.fetch(f"SELECT id, status FROM {jobs.schema}.jobs ORDER BY id")
    return [(r["id"], r["status"]) for r in rows]


async def remaining_ids(jobs: JobQueue) -> set[int]:
    return {i for i, _ in await statuses(jobs)}


async def populate(jobs: JobQueue) -> dict[str, int]:
    ids = {}
    ids["a_x"] = (await jobs.enqueue("x", {"n": 1}, queue="a")).id
    ids["a_y"] = (await jobs.enqueue("y", {"n": 2}, queue="a")).id
    ids["b_x"] = (await jobs.enqueue("x", {"n": 3}, queue="b")).id
    ids["b_y_dead"] = (await jobs.enqueue("y", {"n": -1}, queue="b")).id
    await jobs.worker(queues=["b"]).run(until_drained=True)  # b_x completed, b_y_dead dead
    flow = Flow()
    flow.add("f1", "x", {"n": 5}, queue="c")
    ids["flow_job"] = (await jobs.submit_flow(flow)).job_ids["f1"]
    return ids


@pytest.mark.parametrize(
    ("where", "gone"),
    [
        (JobFilter(queue="a"), {"a_x", "a_y"}),
        (JobFilter(kind="x"), {"a_x", "b_x", "flow_job"}),
        (JobFilter(status="dead"), {"b_y_dead"}),
        (JobFilter(status=("completed", "dead")), {"b_x", "b_y_dead"}),
        (JobFilter(queue="b", kind="y"), {"b_y_dead"}),
        (JobFilter(sub_state="failed"), {"b_y_dead"}),
        (JobFilter(sub_state=("ready", "completed")), {"a_x", "a_y", "b_x", "flow_job"}),
        (JobFilter(), {"a_x", "a_y", "b_x", "b_y_dead", "flow_job"}),
    ],
)
async def test_purge_by_each_filter_field(
    jobs: JobQueue, kinds, where: JobFilter, gone: set[str]
) -> None:
    ids = await populate(jobs)
    result = await jobs.purge(where)
    assert result.deleted == len(gone) and result.skipped_running == 0
    assert await remaining_ids(jobs) == {ids[k] for k in ids if k not in gone}


async def test_cancel_matching_cancels_in_flight_jobs_of_the_filter_only(
    jobs: JobQueue, kinds
) -> None:
    ids = await populate(jobs)
    other = (await jobs.enqueue("x", {"n": 9}, queue="a", tenant="acme")).id
    cancelled = await jobs.cancel_matching(JobFilter(queue="a", tenant=None))
    assert sorted(cancelled) == sorted([ids["a_x"], ids["a_y"], other])
    assert await jobs.cancel_matching(JobFilter(queue="a")) == []
    by_id = dict(await statuses(jobs))
    assert by_id[ids["b_x"]] == "completed" and by_id[ids["b_y_dead"]] == "dead"
    assert by_id[ids["flow_job"]] == "pending"
    scoped = (await jobs.enqueue("x", {"n": 10}, queue="c", tenant="acme")).id
    assert await jobs.cancel_matching(JobFilter(queue="c", tenant="acme")) == [scoped]
    assert dict(await statuses(jobs))[ids["flow_job"]] == "pending"  # another tenant's: kept


async def test_purge_by_flow(jobs: JobQueue, kinds) -> None:
    ids = await populate(jobs)
    flow_id = (await jobs.get(ids["flow_job"])).flow_id  # type: ignore[union-attr]
    assert (await jobs.purge(JobFilter(flow_id=flow_id))).deleted == 1
    assert ids["flow_job"] not in await remaining_ids(jobs)


async def test_purge_skip_leaves_running_jobs_and_cancel_removes_them(
    jobs: JobQueue, registry: Registry
) -> None:
    started, release = asyncio.Event(), asyncio.Event()

    @registry.kind("busy", input=Item, queue="q")
    async def busy(ctx: JobContext, item: Item) -> str:
        started.set()
        await release.wait()
        return "finished late"

    running = await jobs.enqueue("busy", {})
    waiting = await jobs.enqueue("busy", {"n": 1}, delay=3600)
    worker = jobs.worker(concurrency=1, lease=60)
    worker.start()
    await asyncio.wait_for(started.wait(), 20)

    skipped = await jobs.purge(JobFilter(queue="q"), running="skip")
    assert (skipped.deleted, skipped.skipped_running) == (1, 1)
    assert await remaining_ids(jobs) == {running.id}
    assert waiting.id not in await remaining_ids(jobs)

    cancelled = await jobs.purge(JobFilter(queue="q"), running="cancel")
    assert (cancelled.deleted, cancelled.skipped_running) == (1, 0)
    release.set()

    async def completion_refused() -> bool:
        return worker.stats.lost == 1

    await eventually(completion_refused)
    await worker.stop()
    assert await remaining_ids(jobs) == set()
    assert worker.stats.completed == 0


async def test_purge_expired_removes_only_running_jobs_whose_lease_ran_out(
    jobs: JobQueue, kinds
) -> None:
    held = (await jobs.enqueue("x", {"n": 1}, queue="q")).id
    expired = (await jobs.enqueue("x", {"n": 2}, queue="q")).id
    claimed = await jobs.claim(["q"], kinds=["x"], limit=2, lease=60)
    assert {ctx.id for ctx in claimed} == {held, expired}
    await expire_lease(jobs, expired)

    result = await jobs.purge(JobFilter(queue="q"), running="expired")
    assert (result.deleted, result.skipped_running) == (1, 1)
    assert await remaining_ids(jobs) == {held}
    lost = next(ctx for ctx in claimed if ctx.id == expired)
    assert await lost.complete("late") is False  # its claim's writes land nowhere


async def test_purging_a_prerequisite_releases_or_cascades_its_dependents(
    jobs: JobQueue, kinds
) -> None:
    flow = Flow()
    flow.add("pre", "x", {"n": 0}, delay=3600)
    for policy in EdgePolicy:
        flow.add(str(policy), "x", {"n": 1})
        flow.edge("pre", str(policy), policy)
    submitted = await jobs.submit_flow(flow)
    result = await jobs.purge(JobFilter(ids=(submitted.job_ids["pre"],)))
    assert result.deleted == 1
    rows = {name: await jobs.get(submitted.job_ids[name]) for name in map(str, EdgePolicy)}
    assert rows["cascade"].status is Status.CANCELLED  # type: ignore[union-attr]
    for name in ("block", "ignore", "continue"):
        row = rows[name]
        assert row is not None and row.status is Status.PENDING and row.pending_deps == 0, name
    await jobs.worker().run(until_drained=True)
    assert sorted(kinds["x"]) == [1, 1, 1]


async def test_purge_keeps_dependents_outside_the_filter_consistent(jobs: JobQueue, kinds) -> None:
    flow = Flow()
    flow.add("pre", "x", {"n": 0}, queue="purged", delay=3600)
    flow.add("dep", "x", {"n": 1}, queue="kept")
    flow.edge("pre", "dep")
    submitted = await jobs.submit_flow(flow)
    await jobs.purge(JobFilter(queue="purged"))
    dep = await jobs.get(submitted.job_ids["dep"])
    assert dep is not None and dep.pending_deps == 0
    assert await jobs.db.pool.fetchval(f"SELECT count(*) FROM {jobs.schema}.job_edges") == 0


async def test_two_concurrent_purges_do_not_deadlock(jobs: JobQueue, kinds) -> None:
    for round_ in range(3):
        specs = [
            JobSpec("x" if i % 2 else "y", {"n": i}, queue="a" if i % 3 else "b", delay=3600)
            for i in range(600)
        ]
        await jobs.enqueue_many(specs)
        results = await asyncio.gather(
            jobs.purge(JobFilter(queue="a")),
            jobs.purge(JobFilter(kind="x")),
            jobs.purge(JobFilter(queue="b", kind="y")),
        )
        assert sum(r.deleted for r in results) == 600, round_
        assert await remaining_ids(jobs) == set()


async def test_job_key_returns_the_existing_job_over_every_status(jobs: JobQueue, kinds) -> None:
    first = await jobs.enqueue("x", {"n": 1}, job_key="order:17/a b")
    again = await jobs.enqueue("x", {"n": 2}, job_key="order:17/a b")
    assert again.id == first.id and again.duplicate
    await jobs.worker().run(until_drained=True)
    after = await jobs.enqueue("x", {"n": 3}, job_key="order:17/a b")
    assert after.id == first.id and after.duplicate
    row = await jobs.get(first.id)
    assert row is not None and row.status is Status.COMPLETED and row.job_key == "order:17/a b"
    assert kinds["x"] == [1]
    other_queue = await jobs.enqueue("x", {"n": 4}, job_key="order:17/a b", queue="elsewhere")
    assert other_queue.id != first.id
    bulk = await jobs.enqueue_many(
        [
            JobSpec("x", {"n": 5}, job_key="order:17/a b"),
            JobSpec("x", {"n": 6}, job_key="k2"),
            JobSpec("x", {"n": 7}, job_key="k2"),
        ]
    )
    assert bulk[0].id == first.id and bulk[0].duplicate
    assert bulk[2].id == bulk[1].id and bulk[2].duplicate
    await jobs.purge(JobFilter(ids=(first.id,)))
    reborn = await jobs.enqueue("x", {"n": 8}, job_key="order:17/a b")
    assert reborn.id != first.id and not reborn.duplicate


async def test_cancel_pending_and_running(jobs: JobQueue, registry: Registry) -> None:
    started, stopped = asyncio.Event(), asyncio.Event()

    @registry.kind("long", input=Item)
    async def long(ctx: JobContext, item: Item) -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            stopped.set()

    pending = await jobs.enqueue("long", {}, delay=3600)
    running = await jobs.enqueue("long", {})
    worker = jobs.worker(concurrency=1, lease=1.5, heartbeat_interval=0.1)
    worker.start()
    await asyncio.wait_for(started.wait(), 20)
    assert await jobs.cancel(pending.id)
    assert await jobs.cancel(running.id)
    await asyncio.wait_for(stopped.wait(), 20)  # the worker learnt it at its next heartbeat
    await worker.stop()
    assert not await jobs.cancel(running.id)  # already terminal
    for job in (pending, running):
        row = await jobs.get(job.id)
        assert row is not None and row.status is Status.CANCELLED and row.finished_at is not None
    assert worker.stats.lost == 1


async def test_requeue_and_requeue_dead_start_a_new_life(jobs: JobQueue, kinds) -> None:
    dead = [(await jobs.enqueue("y", {"n": -i}, queue="r")).id for i in (1, 2)]
    await jobs.worker(queues=["r"]).run(until_drained=True)
    assert [s for _, s in await statuses(jobs)] == ["dead", "dead"]
    assert await jobs.requeue(dead[0])
    row = await jobs.get(dead[0])
    assert row is not None and (row.status, row.attempts, row.deferrals) == (Status.PENDING, 0, 0)
    assert row.finished_at is None and row.last_error is not None  # the history stays readable
    assert await jobs.requeue_dead(JobFilter(queue="r")) == [dead[1]]
    assert not await jobs.requeue(10**9)


async def test_requeue_clear_outcome_drops_the_finished_run(jobs: JobQueue, kinds) -> None:
    dead = (await jobs.enqueue("y", {"n": -1}, queue="c")).id
    done = (await jobs.enqueue("y", {"n": 3}, queue="c")).id
    await jobs.worker(queues=["c"]).run(until_drained=True)
    # a completed job whose earlier attempt failed keeps that attempt's error
    await jobs.db.pool.execute(
        f"UPDATE {jobs.schema}.jobs SET last_error = $2::text::jsonb WHERE id = $1",
        done,
        json.dumps({"message": "earlier"}),
    )
    assert await jobs.requeue(dead, reset_attempts=False, clear_outcome=True)
    assert await jobs.requeue_finished(JobFilter(ids=(done,)), clear_outcome=True) == [done]
    row = await jobs.get(dead)
    assert row is not None and row.status is Status.PENDING and row.attempts == 1
    assert (row.started_at, row.finished_at, row.last_error, row.output) == (None,) * 4
    row = await jobs.get(done)
    assert row is not None and row.status is Status.PENDING and row.attempts == 0
    assert (row.started_at, row.finished_at, row.output) == (None,) * 3
    assert row.last_error == {"message": "earlier"}
    await jobs.worker(queues=["c"]).run(until_drained=True)
    row = await jobs.get(done)
    assert row is not None and row.status is Status.COMPLETED and row.output == 3
    assert row.started_at is not None


async def test_requeue_skips_a_dead_job_whose_dedup_key_is_held(jobs: JobQueue, kinds) -> None:
    dead = await jobs.enqueue("y", {"n": -1}, dedup_key="k")
    await jobs.worker().run(until_drained=True)
    holder = await jobs.enqueue("y", {"n": 5}, dedup_key="k", delay=3600)
    assert not holder.duplicate
    assert not await jobs.requeue(dead.id)
    row = await jobs.get(dead.id)
    assert row is not None and row.status is Status.DEAD


async def test_promote_update_payload_change_priority(jobs: JobQueue, kinds) -> None:
    job = await jobs.enqueue("x", {"n": 1}, delay=3600)
    assert await jobs.update_payload(job.id, {"n": 42})
    with pytest.raises(InvalidJobInput):
        await jobs.update_payload(job.id, {"n": "many"})
    assert await jobs.change_priority(job.id, 7)
    with pytest.raises(InvalidOption):
        await jobs.change_priority(job.id, 10**15)
    assert await jobs.promote(job.id)
    assert not await jobs.promote(job.id)  # already due
    await jobs.worker().run(until_drained=True)
    row = await jobs.get(job.id)
    assert row is not None and row.output == 42 and row.priority == 7


async def test_change_priority_places_a_due_job_first_or_last_among_its_equals(
    jobs: JobQueue, kinds
) -> None:
    a, b, c = [(await jobs.enqueue("x", {"n": n}, queue="p")).id for n in range(3)]
    later = await jobs.enqueue("x", {"n": 9}, queue="p", delay=3600)
    assert await jobs.change_priority(a, 0, place="last")  # behind b and c
    assert await jobs.change_priority(c, 0, place="first")  # before b
    assert await jobs.change_priority(later.id, 0, place="first")  # delayed: keeps its time
    with pytest.raises(InvalidOption):
        await jobs.change_priority(b, 0, place="middle")  # type: ignore[arg-type]
    claimed = await jobs.claim(["p"], kinds=["x"], limit=10)
    assert [ctx.id for ctx in claimed] == [c, b, a]
    row = await jobs.get(later.id)
    assert row is not None and row.sub_state.value == "delayed"


async def test_logs_append_trim_read_and_fence(jobs: JobQueue, registry: Registry) -> None:
    logged: list[int] = []

    @registry.kind("chatty", input=Item)
    async def chatty(ctx: JobContext, item: Item) -> None:
        for i in range(3):
            logged.append(await ctx.log(f"step {i}\x00"))

    result = await jobs.enqueue("chatty", {})
    await jobs.worker().run(until_drained=True)
    for i in range(3, 8):
        assert await jobs.append_log(result.id, f"line {i}", keep_last=4) == min(i + 1, 4)
    page = await jobs.read_logs(result.id, offset=1, limit=2)
    assert page.total == 4 and [line.line for line in page.lines] == ["line 5", "line 6"]
    everything = await jobs.read_logs(result.id)
    assert [line.line for line in everything.lines] == ["line 4", "line 5", "line 6", "line 7"]
    assert logged == [1, 2, 3]  # the lines the log holds after each
    assert not await jobs.append_log(10**9, "nobody")


async def test_logs_read_newest_first_page_from_the_latest(jobs: JobQueue, kinds) -> None:
    job = await jobs.enqueue("x", {"n": 1}, tenant="org-a", delay=3600)
    for i in range(7):
        await jobs.append_log(job.id, f"line {i}", tenant="org-a")
    latest = await jobs.read_logs(job.id, limit=3, newest_first=True, tenant="org-a")
    assert latest.total == 7
    assert [line.line for line in latest.lines] == ["line 6", "line 5", "line 4"]
    older = await jobs.read_logs(job.id, offset=6, limit=3, newest_first=True, any_tenant=True)
    assert older.total == 7 and [line.line for line in older.lines] == ["line 0"]
    times = [line.created_at for line in latest.lines]
    assert times == sorted(times, reverse=True)
    assert (await jobs.read_logs(job.id, newest_first=True, tenant="org-b")).total == 0
    oldest = await jobs.read_logs(job.id, limit=2, any_tenant=True)  # the default is unchanged
    assert [line.line for line in oldest.lines] == ["line 0", "line 1"]


async def test_ids_based_operations_are_tenant_scoped(jobs: JobQueue, kinds) -> None:
    theirs = await jobs.enqueue("x", {"n": 1}, tenant="org-b", delay=3600)
    assert not await jobs.cancel(theirs.id, tenant="org-a")
    assert not await jobs.cancel(theirs.id)
    assert not await jobs.promote(theirs.id, tenant="org-a")
    assert not await jobs.update_payload(theirs.id, {"n": 2}, tenant="org-a")
    assert not await jobs.append_log(theirs.id, "x", tenant="org-a")
    assert (await jobs.read_logs(theirs.id, tenant="org-a")).total == 0
    assert (await jobs.purge(JobFilter(tenant="org-a"))).deleted == 0
    row = await jobs.get(theirs.id, tenant="org-b")
    assert row is not None and row.status is Status.PENDING and row.payload == {"n": 1}
    assert await jobs.cancel(theirs.id, tenant="org-b")


async def test_retention_remove_at_once_on_completion(jobs: JobQueue, kinds) -> None:
    gone = await jobs.enqueue("x", {"n": 1}, keep_completed=Keep(count=0))
    kept = await jobs.enqueue("x", {"n": 2}, keep_completed=Keep(count=10))
    dead_removed = await jobs.enqueue("y", {"n": -1}, keep_dead=Keep(count=0))
    await jobs.worker().run(until_drained=True)
    assert await jobs.get(gone.id) is None
    assert await jobs.get(dead_removed.id) is None
    assert await jobs.get(kept.id) is not None


async def test_a_claim_sets_the_retention_its_finish_applies(jobs: JobQueue, kinds) -> None:
    ruled = await jobs.enqueue("x", {"n": 1}, keep_dead=Keep(count=3))
    other = await jobs.enqueue("x", {"n": 2})
    claimed = {ctx.id: ctx for ctx in await jobs.claim(["default"], kinds=["x"], limit=2)}
    assert await claimed[ruled.id].keep(completed=Keep(count=0))
    with pytest.raises(InvalidOption):
        await claimed[other.id].keep()
    row = await jobs.get(ruled.id)
    assert row is not None and row.retention == {"completed": {"count": 0}, "dead": {"count": 3}}
    assert await claimed[ruled.id].complete(1)
    assert await jobs.get(ruled.id) is None  # removed at once, as its new rule says
    await expire_lease(jobs, other.id)
    assert (await jobs.purge(JobFilter(ids=(other.id,)), running="expired")).deleted == 1
    assert not await claimed[other.id].keep(completed=Keep(count=0))  # no longer its claim's


async def events_of(jobs: JobQueue, job_id: int) -> list[tuple[str, Any]]:
    rows = await jobs.db.pool.fetch(
        f"SELECT event, data FROM {jobs.schema}.job_events WHERE job_id = $1 ORDER BY id", job_id
    )
    return [(r["event"], None if r["data"] is None else json.loads(r["data"])) for r in rows]


async def test_a_job_removed_at_once_records_its_outcome_and_no_removal(
    jobs: JobQueue, kinds
) -> None:
    """A job whose rule keeps none of its status is deleted as it finishes, never written
    finished: its 'completed' or 'failed' event is the one the update would have recorded,
    and no 'removed' event follows (housekeeping, as BullMQ's removeOnComplete)."""
    done = await jobs.enqueue("x", {"n": 7}, keep_completed=Keep(count=0), events=True)
    failed = await jobs.enqueue("y", {"n": -1}, keep_dead=Keep(count=0), events=True)
    await jobs.worker().run(until_drained=True)
    assert await jobs.get(done.id) is None and await jobs.get(failed.id) is None
    assert await events_of(jobs, done.id) == [
        ("active", {"attempt": 1}),
        ("completed", {"output": 7, "attempts": 1}),
    ]
    ((first, _), (event, data)) = await events_of(jobs, failed.id)
    assert (first, event) == ("active", "failed") and (data["attempts"], data["max_attempts"]) == (
        1,
        1,
    )
    assert data["error"]["message"] == "negative"


async def test_a_lapsed_claim_cannot_remove_a_job_at_once(jobs: JobQueue, kinds) -> None:
    """The deletion is fenced by the claim's token as the update is: the worker whose lease
    lapsed finishes nothing, and the job goes only with the outcome of the claim that holds
    it, recording one 'completed' event."""
    job = await jobs.enqueue(
        "x", {"n": 1}, max_attempts=2, keep_completed=Keep(count=0), events=True
    )
    stale = (await jobs.db.fetch("claim", ["default"], ["x"], 1, 30.0, 0))[0]
    await expire_lease(jobs, job.id)
    assert len(await jobs.db.fetch("rescue_stalled", 10, notify_channel(jobs.schema))) == 1
    fresh = (await jobs.db.fetch("claim", ["default"], ["x"], 1, 30.0, 0))[0]
    assert await write_outcomes(jobs.db, completions([stale])) == set()
    row = await jobs.get(job.id)
    assert row is not None and row.status is Status.RUNNING
    assert await write_outcomes(jobs.db, completions([fresh])) == {job.id}
    assert await jobs.get(job.id) is None
    assert [e for e, _ in await events_of(jobs, job.id)].count("completed") == 1


async def test_removal_at_finish_racing_a_purge_ends_each_job_one_way(
    jobs: JobQueue, kinds
) -> None:
    """Two workers finish jobs that go as they finish while purges that take running jobs too
    hit their queue: every job ends exactly one way, completed by a worker (one 'completed'
    event) or purged (one 'removed' event), none both, none left."""
    keep = Keep(count=0)
    workers = [jobs.worker(concurrency=4) for _ in range(2)]
    for worker in workers:
        worker.start()
    ids: list[int] = []
    purged = 0
    for batch in range(20):
        added = await jobs.enqueue_many(
            [JobSpec("x", {"n": i}, keep_completed=keep, events=True) for i in range(15)]
        )
        ids += [r.id for r in added]
        if batch % 4 == 3:
            purged += (await jobs.purge(JobFilter(kind="x"), running="cancel")).deleted

    async def all_gone() -> bool:
        return not await remaining_ids(jobs)

    await eventually(all_gone)
    for worker in workers:
        await worker.stop()
    rows = await jobs.db.pool.fetch(
        f"SELECT job_id, event FROM {jobs.schema}.job_events"
        " WHERE job_id = ANY($1) AND event IN ('completed', 'removed')",
        ids,
    )
    endings: dict[int, list[str]] = {}
    for r in rows:
        endings.setdefault(r["job_id"], []).append(r["event"])
    assert sorted(endings) == sorted(ids)
    assert all(len(ends) == 1 for ends in endings.values())
    completed = sum(worker.stats.completed for worker in workers)
    assert [e for (e,) in endings.values()].count("completed") == completed
    assert [e for (e,) in endings.values()].count("removed") == purged
    assert completed + purged == len(ids)


@pytest.mark.parametrize("keep", [None, Keep(count=0)])
async def test_a_dependency_between_jobs_outside_flows_is_resolved_when_its_prerequisite_ends(
    jobs: JobQueue, kinds, keep: Keep | None
) -> None:
    """``add_dependency`` puts an edge between jobs of no flow: the prerequisite's finish
    resolves it as a flow's (it used to look for dependents only in flows, and the dependent
    waited for ever), and a prerequisite that removes itself as it finishes goes at once, its
    output kept on the satisfied edge for its dependent to read."""
    first = await jobs.enqueue("x", {"n": 1}, keep_completed=keep)
    second = await jobs.enqueue("x", {"n": 2}, keep_completed=keep)
    await jobs.add_dependency(first.id, second.id)
    await jobs.worker().run(until_drained=True)
    assert kinds["x"] == [1, 2]
    assert await remaining_ids(jobs) == (set() if keep else {first.id, second.id})


async def test_a_dependency_on_a_job_that_dies_stalled_outside_flows_cascades(
    jobs: JobQueue, kinds
) -> None:
    doomed = await jobs.enqueue("x", {"n": 1})
    dependent = await jobs.enqueue("x", {"n": 2})
    await jobs.add_dependency(doomed.id, dependent.id, policy=EdgePolicy.CASCADE)
    (claimed,) = await jobs.db.fetch("claim", ["default"], ["x"], 1, 30.0, 0)
    assert claimed["id"] == doomed.id
    await expire_lease(jobs, doomed.id)
    rescued = await jobs.db.fetch("rescue_stalled", 10, notify_channel(jobs.schema))
    assert [(r["id"], r["status"]) for r in rescued] == [(doomed.id, "dead")]
    row = await jobs.get(dependent.id)
    assert row is not None and row.status is Status.DEAD  # failed with its prerequisite


@pytest.mark.parametrize("keep", [None, Keep(count=0)])
async def test_a_dependency_added_while_its_prerequisite_finishes_is_resolved(
    jobs: JobQueue, kinds, keep: Keep | None
) -> None:
    """The dependency is added first, in a transaction left open: it holds the running
    prerequisite (FOR SHARE), so the finish waits for its commit, then reads the new edge
    with a fresh snapshot and releases the dependent; a prerequisite that removes itself as
    it finishes goes, the dependent reading its output from the satisfied edge."""
    first = await jobs.enqueue("x", {"n": 1}, keep_completed=keep)
    second = await jobs.enqueue("x", {"n": 2})
    (claimed,) = await jobs.db.fetch("claim", ["default"], ["x"], 1, 30.0, 0)
    assert claimed["id"] == first.id

    async def attach(conn: Any) -> None:
        await jobs.add_dependency(first.id, second.id, connection=conn)

    async def finish(conn: Any) -> set[int]:
        return await write_outcomes(jobs.db, completions([claimed]), conn)

    _, written, waited = await overlap(jobs.db.pool, attach, finish)
    assert waited and written == {first.id}
    row = await jobs.get(second.id)
    assert row is not None and row.status is Status.PENDING and row.pending_deps == 0
    kept = await jobs.get(first.id)
    if keep:
        assert kept is None
    else:
        assert kept is not None and kept.status is Status.COMPLETED
    [read] = await jobs.prerequisite_results(second.id)
    assert (read["id"], read["status"], read["state"]) == (first.id, "completed", "satisfied")
    await jobs.worker().run(until_drained=True)
    assert kinds["x"] == [2]
    # the second keeps everything
    assert await remaining_ids(jobs) == ({second.id} if keep else {first.id, second.id})


async def test_a_dependency_added_after_its_prerequisite_finished_or_went_is_settled(
    jobs: JobQueue, kinds
) -> None:
    """The finish first, in a transaction left open: the dependency waits for it (the finish
    holds the row). Then a prerequisite that completed resolves the new edge at once, and one
    that removed itself as it finished is gone, so the dependency is refused and nothing is
    written."""
    kept = await jobs.enqueue("x", {"n": 1})
    gone = await jobs.enqueue("x", {"n": 2}, keep_completed=Keep(count=0))
    dependent = await jobs.enqueue("x", {"n": 3}, delay=3600)
    claimed = await jobs.db.fetch("claim", ["default"], ["x"], 2, 30.0, 0)
    assert sorted(r["id"] for r in claimed) == [kept.id, gone.id]
    for prerequisite, expected in ((kept.id, None), (gone.id, InvalidFlow)):
        (row,) = [r for r in claimed if r["id"] == prerequisite]

        async def finish(conn: Any, row: Any = row) -> set[int]:
            return await write_outcomes(jobs.db, completions([row]), conn)

        async def attach(conn: Any, prerequisite: int = prerequisite) -> Exception | None:
            try:
                await jobs.add_dependency(prerequisite, dependent.id, connection=conn)
            except InvalidFlow as exc:
                return exc
            return None

        written, refused, waited = await overlap(jobs.db.pool, finish, attach)
        assert waited and written == {prerequisite}
        assert (refused is None) if expected is None else isinstance(refused, expected)
    row = await jobs.get(dependent.id)
    assert row is not None and row.pending_deps == 0  # resolved, or never counted
    edges = await jobs.db.pool.fetch(
        f"SELECT prerequisite_id, state FROM {jobs.schema}.job_edges WHERE dependent_id = $1",
        dependent.id,
    )
    assert [(e["prerequisite_id"], e["state"]) for e in edges] == [(kept.id, "satisfied")]


async def age_history(jobs: JobQueue, hours: float) -> None:
    """Every finished job finished ``hours`` ago (a history older than its rules)."""
    await jobs.db.pool.execute(
        f"UPDATE {jobs.schema}.jobs SET finished_at = now() - make_interval(hours => $1)"
        " WHERE finished_at IS NOT NULL",
        hours,
    )


async def test_age_retention_removes_expired_history_as_a_job_finishes(
    jobs: JobQueue, kinds
) -> None:
    """As BullMQ applies ``removeOnComplete: {age}`` at each completion: a finished job whose
    rule has an age removes its queue's finished jobs of its status whose own age has passed,
    without the GC; a job with no age rule, with a longer one, or of another status stays."""
    hour = Keep(age=3600)
    expiring = [(await jobs.enqueue("x", {"n": i}, keep_completed=hour)).id for i in range(4)]
    longer = (await jobs.enqueue("x", {"n": 5}, keep_completed=Keep(age=3 * 3600))).id
    forever = [(await jobs.enqueue("x", {"n": i})).id for i in range(2)]
    dead = (await jobs.enqueue("y", {"n": -1}, keep_dead=hour)).id
    await jobs.worker().run(until_drained=True)
    await age_history(jobs, 2)
    assert await remaining_ids(jobs) == {*expiring, longer, *forever, dead}  # nothing finished
    newest = (await jobs.enqueue("x", {"n": 9}, keep_completed=hour)).id
    await jobs.worker().run(until_drained=True)
    assert await remaining_ids(jobs) == {longer, *forever, dead, newest}
    another_dead = (await jobs.enqueue("y", {"n": -2}, keep_dead=hour)).id
    await jobs.worker().run(until_drained=True)
    assert await remaining_ids(jobs) == {longer, *forever, newest, another_dead}


async def test_age_retention_skips_jobs_another_transaction_holds(jobs: JobQueue, kinds) -> None:
    """The trim never waits: finished jobs another transaction holds are skipped (here one it
    locks, as a purge or the GC on its way would, and one it re-drives), the outcome is written
    at once; after that transaction commits, a later finish takes the job still expired and
    leaves the re-driven one, which is not finished any more."""
    hour = Keep(age=3600)
    old = [(await jobs.enqueue("x", {"n": i}, keep_completed=hour)).id for i in range(3)]
    await jobs.worker().run(until_drained=True)
    await age_history(jobs, 2)
    async with jobs.transaction() as holder:
        await holder.execute(f"SELECT 1 FROM {jobs.schema}.jobs WHERE id = $1 FOR UPDATE", old[0])
        await holder.execute(
            f"UPDATE {jobs.schema}.jobs SET status = 'pending', finished_at = NULL,"
            " pending_deps = 1 WHERE id = $1",  # back to waiting (on a prerequisite)
            old[1],
        )
        first = (await jobs.enqueue("x", {"n": 7}, keep_completed=hour)).id
        await asyncio.wait_for(jobs.worker().run(until_drained=True), 20)
        assert await remaining_ids(jobs) == {old[0], old[1], first}
    second = (await jobs.enqueue("x", {"n": 8}, keep_completed=hour)).id
    await jobs.worker().run(until_drained=True)
    assert await statuses(jobs) == [
        (old[1], "pending"),
        (first, "completed"),
        (second, "completed"),
    ]


async def test_age_retention_racing_purges_and_other_finishes_never_deadlocks(
    jobs: JobQueue, kinds
) -> None:
    """Stress: 300 expired jobs; two workers finish 60 age-ruled jobs each while a loop purges
    the expired history in id order. No outcome write fails (a deadlock would fail a batch and
    leave its jobs running), and the expired history is gone."""
    hour = Keep(age=3600)
    await jobs.enqueue_many([JobSpec("x", {"n": i}, keep_completed=hour) for i in range(300)])
    await jobs.worker(concurrency=10).run(until_drained=True)
    await age_history(jobs, 2)
    await jobs.enqueue_many([JobSpec("x", {"n": i}, keep_completed=hour) for i in range(120)])
    cutoff = await jobs.db.pool.fetchval("SELECT now() - interval '1 hour'")
    purging = True

    async def purge() -> None:
        while purging:
            await jobs.purge(JobFilter(finished_before=cutoff))
            await asyncio.sleep(0)

    purger = asyncio.ensure_future(purge())
    workers = [jobs.worker(concurrency=5) for _ in range(2)]
    await asyncio.gather(*(w.run(until_drained=True) for w in workers))
    purging = False
    await purger
    assert sum(w.stats.completed for w in workers) == 120
    rows = await jobs.db.pool.fetch(f"SELECT status, finished_at FROM {jobs.schema}.jobs")
    assert len(rows) == 120 and all(r["status"] == "completed" for r in rows)
    assert all(r["finished_at"] > cutoff for r in rows)


def completions(claimed: list[Any]) -> list[Outcome]:
    """A completed outcome for each claimed row, fenced by its claim's token."""
    return [Outcome(r["id"], r["lock_token"], "completed") for r in claimed]


async def test_count_retention_holds_when_one_write_finishes_more_than_the_look_ahead(
    jobs: JobQueue, kinds
) -> None:
    """A worker whose completer fell behind writes hundreds of outcomes in one statement: the
    trim must remove as many old rows as that write added, not only its fixed look-ahead."""
    first = await jobs.enqueue_many(
        [JobSpec("x", {"n": i}, keep_completed=Keep(count=5)) for i in range(50)]
    )
    await jobs.worker().run(until_drained=True)  # a history of exactly 5
    await jobs.enqueue_many(
        [JobSpec("x", {"n": i}, keep_completed=Keep(count=5)) for i in range(400)]
    )
    claimed = await jobs.db.fetch("claim", ["default"], ["x"], 400, 30.0, 0)
    assert len(claimed) == 400
    written = await write_outcomes(jobs.db, completions(claimed))
    assert len(written) == 400
    left = await jobs.db.pool.fetch(f"SELECT id FROM {jobs.schema}.jobs ORDER BY id")
    newest = sorted(r["id"] for r in claimed)[-5:]
    assert [r["id"] for r in left] == newest
    assert all(r.id not in newest for r in first)


async def test_count_retention_is_exact_when_outcome_writes_overlap(jobs: JobQueue, kinds) -> None:
    """Two workers' outcome writes in overlapping transactions: neither sees the other's rows in
    its own snapshot, so each trimming to n would leave 2n. Trimmers take turns under a lock and
    read after taking it: the history ends at exactly n, the newest."""
    keep = Keep(count=5)
    await jobs.enqueue_many([JobSpec("x", {"n": i}, keep_completed=keep) for i in range(20)])
    await jobs.worker().run(until_drained=True)  # a history of exactly 5
    await jobs.enqueue_many([JobSpec("x", {"n": i}, keep_completed=keep) for i in range(40)])
    claimed = await jobs.db.fetch("claim", ["default"], ["x"], 40, 30.0, 0)
    early, late = claimed[:20], claimed[20:]
    async with jobs.db.pool.acquire() as first, jobs.db.pool.acquire() as second:
        tx = first.transaction()
        await tx.start()
        await write_outcomes(jobs.db, completions(early), first)
        pids = (first.get_server_pid(), second.get_server_pid())
        writing = asyncio.create_task(write_outcomes(jobs.db, completions(late), second))

        async def second_waits_for_first() -> bool:
            return pids[0] in await jobs.db.pool.fetchval("SELECT pg_blocking_pids($1)", pids[1])

        await eventually(second_waits_for_first)
        await tx.commit()
        assert len(await writing) == 20
    left = await jobs.db.pool.fetch(
        f"SELECT id FROM {jobs.schema}.jobs ORDER BY finished_at DESC, id DESC"
    )
    # The second write began after the first: its rows are the newest.
    newest = sorted((r["id"] for r in late), reverse=True)[:5]
    assert [r["id"] for r in left] == newest


async def test_an_outcome_for_a_lapsed_claim_locks_nothing(jobs: JobQueue, kinds) -> None:
    """A worker whose lease lapsed writes its outcome after the job was completed by another:
    the write changes nothing and holds no lock on that row (a trimmer may be deleting it)."""
    job = await jobs.enqueue("x", {"n": 1}, max_attempts=2)
    stale = (await jobs.db.fetch("claim", ["default"], ["x"], 1, 30.0, 0))[0]
    await expire_lease(jobs, job.id)
    assert len(await jobs.db.fetch("rescue_stalled", 10, notify_channel(jobs.schema))) == 1
    await jobs.worker().run(until_drained=True)
    async with jobs.db.pool.acquire() as conn, conn.transaction():
        written = await write_outcomes(
            jobs.db, [Outcome(job.id, stale["lock_token"], "failed")], conn
        )
        assert written == set()
        lockable = await jobs.db.pool.fetch(
            f"SELECT id FROM {jobs.schema}.jobs WHERE id = $1 FOR UPDATE SKIP LOCKED", job.id
        )
        assert len(lockable) == 1  # another session can still lock (or delete) it
    assert (await jobs.get(job.id)).status == "completed"


async def test_reschedule_moves_a_pending_job_and_nothing_else(jobs: JobQueue, kinds) -> None:
    delayed = await jobs.enqueue("x", {"n": 1}, delay=3600)
    before = await jobs.get(delayed.id)
    assert before is not None and before.sub_state == "delayed"
    assert await jobs.reschedule(delayed.id, 0)
    due = await jobs.get(delayed.id)
    assert due is not None and due.sub_state == "ready" and due.run_at < before.run_at
    assert await jobs.reschedule(delayed.id, 7200)
    later = await jobs.get(delayed.id)
    assert later is not None and later.run_at > before.run_at
    with pytest.raises(InvalidOption, match="delay"):
        await jobs.reschedule(delayed.id, -1)
    await jobs.promote(delayed.id)
    await jobs.worker().run(until_drained=True)
    assert not await jobs.reschedule(delayed.id, 10)  # completed: not pending
    assert not await jobs.reschedule(10**9, 10)


async def test_a_cancel_by_filter_waiting_for_a_finish_leaves_the_job_finished(
    jobs: JobQueue, kinds
) -> None:
    """cancel_matching picks the in-flight jobs it sees, then locks them: a job whose outcome
    commits while the cancel waits for its row is re-checked on its newest version and left
    completed; the others of the filter are cancelled."""
    for n in range(3):
        await jobs.enqueue("x", {"n": n}, queue="mixed")
    claimed = await jobs.db.fetch("claim", ["mixed"], ["x"], 1, 30.0, 0)
    assert len(claimed) == 1

    async def finish(conn: Any) -> None:
        await write_outcomes(jobs.db, completions(claimed), conn)

    async def cancel(conn: Any) -> list[int]:
        return await jobs.cancel_matching(JobFilter(queue="mixed"), connection=conn)

    _, cancelled, waited = await overlap(jobs.db.pool, finish, cancel)
    assert waited
    by_id = dict(await statuses(jobs))
    assert by_id.pop(claimed[0]["id"]) == "completed"
    assert sorted(cancelled) == sorted(by_id) and set(by_id.values()) == {"cancelled"}


async def _family(jobs: JobQueue, *, parent_queue: str = "a") -> dict[str, int]:
    """A grandparent <- parent <- two children, all waiting (children delayed), queue "a"
    but the parent's queue."""
    flow = Flow()
    flow.add("grandparent", "x", {"n": 0}, queue="a")
    flow.add("parent", "x", {"n": 1}, queue=parent_queue)
    flow.add("c1", "x", {"n": 2}, queue="a", delay=3600)
    flow.add("c2", "x", {"n": 3}, queue="a", delay=3600)
    flow.edge("parent", "grandparent")
    flow.edge("c1", "parent")
    flow.edge("c2", "parent")
    return dict((await jobs.submit_flow(flow)).job_ids)


async def test_purge_take_dependents_deletes_a_same_queue_parent_left_with_nothing_to_wait_for(
    jobs: JobQueue, kinds
) -> None:
    ids = await _family(jobs)
    children = JobFilter(ids=(ids["c1"], ids["c2"]))
    result = await jobs.purge(children, take_dependents=True)
    # The parent waited for the two children alone, and the grandparent for the parent alone.
    assert result.deleted == 4
    assert await remaining_ids(jobs) == set()


async def test_purge_take_dependents_keeps_a_parent_still_waiting_for_others(
    jobs: JobQueue, kinds
) -> None:
    ids = await _family(jobs)
    result = await jobs.purge(JobFilter(ids=(ids["c1"],)), take_dependents=True)
    assert result.deleted == 1
    parent = await jobs.get(ids["parent"])
    assert parent is not None and parent.pending_deps == 1  # c2 still counts


async def test_purge_take_dependents_releases_a_parent_of_another_queue(
    jobs: JobQueue, kinds
) -> None:
    ids = await _family(jobs, parent_queue="elsewhere")
    result = await jobs.purge(JobFilter(ids=(ids["c1"], ids["c2"])), take_dependents=True)
    assert result.deleted == 2
    parent = await jobs.get(ids["parent"])
    assert parent is not None and parent.status is Status.PENDING and parent.pending_deps == 0
    assert (await jobs.get(ids["grandparent"])).pending_deps == 1  # type: ignore[union-attr]


async def test_purge_without_take_dependents_releases_the_parent(jobs: JobQueue, kinds) -> None:
    ids = await _family(jobs)
    assert (await jobs.purge(JobFilter(ids=(ids["c1"], ids["c2"])))).deleted == 2
    parent = await jobs.get(ids["parent"])
    assert parent is not None and parent.pending_deps == 0
    with pytest.raises(InvalidOption, match="take_dependents"):
        await jobs.purge(JobFilter(ids=(ids["parent"],)), take_dependents="yes")  # type: ignore[arg-type]


@pytest.mark.parametrize("attach_first", [True, False])
async def test_purge_take_dependents_racing_a_new_prerequisite_of_the_parent(
    jobs: JobQueue, kinds, attach_first: bool
) -> None:
    """A prerequisite attached to the parent while the purge takes it: attached first, it
    keeps the parent (waiting for it); purged first, the attach is refused, naming the job."""
    ids = await _family(jobs)
    newcomer = (await jobs.enqueue("x", {"n": 9}, queue="b", delay=3600)).id
    children = JobFilter(ids=(ids["c1"], ids["c2"]))

    async def attach(conn: Any) -> str:
        try:
            await jobs.add_dependency(newcomer, ids["parent"], connection=conn)
        except Exception as exc:  # the refusal, checked below
            return type(exc).__name__ + str(exc)
        return "attached"

    async def purge(conn: Any) -> int:
        return (await jobs.purge(children, take_dependents=True, connection=conn)).deleted

    if attach_first:
        attached, deleted, waited = await overlap(jobs.db.pool, attach, purge)
        assert waited and attached == "attached" and deleted == 2
        parent = await jobs.get(ids["parent"])
        assert parent is not None and parent.pending_deps == 1
    else:
        deleted, attached, waited = await overlap(jobs.db.pool, purge, attach)
        assert waited and deleted == 4 and str(ids["parent"]) in attached
        assert await remaining_ids(jobs) == {newcomer}
    assert (
        await jobs.db.pool.fetchval(
            f"SELECT count(*) FROM {jobs.schema}.jobs d WHERE d.pending_deps <>"
            f" (SELECT count(*) FROM {jobs.schema}.job_edges e"
            "   WHERE e.dependent_id = d.id AND e.state IN ('open', 'blocked'))"
        )
        == 0
    )


async def test_purges_taking_dependents_racing_attaches_leave_counts_consistent(
    jobs: JobQueue, kinds
) -> None:
    """Stress: purges of children, taking their parents, racing attaches of new prerequisites
    to those parents: no parent is left waiting for an edge that is not there, none waits
    for a deleted job, and nothing deadlocks."""
    families = [await _family(jobs) for _ in range(30)]
    newcomers = [(await jobs.enqueue("x", {"n": i}, queue="b", delay=3600)).id for i in range(30)]

    async def purge(family: dict[str, int]) -> None:
        await jobs.purge(JobFilter(ids=(family["c1"], family["c2"])), take_dependents=True)

    async def attach(family: dict[str, int], newcomer: int) -> None:
        try:
            await jobs.add_dependency(newcomer, family["parent"])
        except Exception as exc:  # refused when the parent went first
            assert str(family["parent"]) in str(exc), exc

    await asyncio.gather(
        *(purge(f) for f in families),
        *(attach(f, n) for f, n in zip(families, newcomers, strict=True)),
    )
    pool = jobs.db.pool
    assert (
        await pool.fetchval(
            f"SELECT count(*) FROM {jobs.schema}.jobs d WHERE d.pending_deps <>"
            f" (SELECT count(*) FROM {jobs.schema}.job_edges e"
            "   WHERE e.dependent_id = d.id AND e.state IN ('open', 'blocked'))"
        )
        == 0
    )
    assert (
        await pool.fetchval(
            f"SELECT count(*) FROM {jobs.schema}.job_edges e WHERE NOT EXISTS"
            f" (SELECT FROM {jobs.schema}.jobs j WHERE j.id = e.dependent_id)"
            f" OR NOT EXISTS (SELECT FROM {jobs.schema}.jobs j WHERE j.id = e.prerequisite_id)"
        )
        == 0
    )
    for family in families:
        parent = await jobs.get(family["parent"])
        # Kept only by a newcomer it now waits for; otherwise gone with its children.
        assert parent is None or parent.pending_deps == 1


async def test_pending_run_filter_selects_the_schedules_next_runs(jobs: JobQueue, kinds) -> None:
    await jobs.upsert_schedule(
        "hourly", "x", {"n": 1}, every=3600, immediately=True, materialize=True
    )
    other = (await jobs.enqueue("x", {"n": 2})).id
    run = (await jobs.get_schedule("hourly")).pending_job_id  # type: ignore[union-attr]
    assert run is not None
    listed = await jobs.list_jobs(JobFilter(pending_run=True))
    assert [r.id for r in listed] == [run]
    assert [r.id for r in await jobs.list_jobs(JobFilter(pending_run=False))] == [other]
    assert (await jobs.purge(JobFilter(pending_run=False))).deleted == 1
    assert await remaining_ids(jobs) == {run}


async def test_a_process_without_the_kind_updates_a_payload_as_json(
    jobs: JobQueue, kinds, pool: asyncpg.Pool, schema_name: str
) -> None:
    """The dashboard runs no kind: it stores the JSON it is given, as long as jsonb can."""
    job = await jobs.enqueue("x", {"n": 1})
    bare = await JobQueue.connect(pool=pool, schema=schema_name, registry=Registry())
    assert await bare.update_payload(job.id, {"n": "many", "note": [1, 2]})
    row = await jobs.get(job.id)
    assert row is not None and row.payload == {"n": "many", "note": [1, 2]}
    with pytest.raises(NotJson, match="n: nan is not a JSON number"):
        await bare.update_payload(job.id, {"n": float("nan")})
