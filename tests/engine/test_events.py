"""The job event log: what each transition writes, ordering, cursors, tenants, trimming; LIFO."""

from __future__ import annotations

import asyncio
import random
import uuid

import asyncpg
import pydantic
import pytest

from pgjobs import (
    Delayed,
    EventStream,
    InvalidOption,
    JobContext,
    JobEvent,
    JobFilter,
    JobQueue,
    JobSpec,
    Keep,
    Registry,
)
from pgjobs.maintenance import GcInput, collect_garbage
from tests.helpers import eventually
from tests.interleave import overlap


class Item(pydantic.BaseModel):
    n: int = 0


@pytest.fixture
def kinds(registry: Registry) -> None:
    @registry.kind("work", input=Item, queue="q", max_attempts=2)
    async def work(ctx: JobContext, item: Item) -> dict[str, int]:
        if item.n == 1:
            raise ValueError("boom")
        if item.n == 2 and ctx.deferrals == 0:
            raise Delayed(0)
        await ctx.progress({"pct": 50})
        return {"double": item.n * 2}


async def take(stream: EventStream, count: int) -> list[JobEvent]:
    """The next ``count`` events (the stream wakes on NOTIFY; the timeout only bounds a bug)."""

    async def collect() -> list[JobEvent]:
        return [await anext(stream) for _ in range(count)]

    return await asyncio.wait_for(collect(), timeout=20)


async def test_a_completed_job_logs_added_active_progress_completed(
    jobs: JobQueue, kinds: None
) -> None:
    async with jobs.events(["q"]) as stream:
        job = await jobs.enqueue("work", {"n": 3}, events=True, job_key="k3")
        await jobs.worker(queues=["q"]).run(until_drained=True)
        events = await take(stream, 4)
    assert [e.event for e in events] == ["added", "active", "progress", "completed"]
    assert {e.job_id for e in events} == {job.id}
    assert {e.job_key for e in events} == {"k3"}
    assert events[0].data["state"] == "ready"
    assert events[2].data["progress"] == {"pct": 50}
    assert events[3].data["output"] == {"double": 6} and events[3].prev == "running"


async def test_retry_then_final_failure_and_deferral(jobs: JobQueue, kinds: None) -> None:
    async with jobs.events(["q"]) as stream:
        failing = await jobs.enqueue("work", {"n": 1}, events=True)
        await jobs.worker(queues=["q"]).run(until_drained=True)
        events = await take(stream, 5)
        assert [e.event for e in events] == ["added", "active", "retrying", "active", "failed"]
        assert events[-1].data["error"]["message"] == "boom"
        assert events[-1].data["attempts"] == events[-1].data["max_attempts"] == 2
        assert {e.job_id for e in events} == {failing.id}

        deferred = await jobs.enqueue("work", {"n": 2}, events=True)
        await jobs.worker(queues=["q"]).run(until_drained=True)
        events = await take(stream, 6)
    assert [e.event for e in events] == [
        "added", "active", "deferred", "active", "progress", "completed",
    ]  # fmt: skip
    assert {e.job_id for e in events} == {deferred.id}


async def test_jobs_without_the_flag_write_nothing(jobs: JobQueue, kinds: None) -> None:
    await jobs.enqueue("work", {"n": 3})
    await jobs.worker(queues=["q"]).run(until_drained=True)
    n = await jobs.db.pool.fetchval(f"SELECT count(*) FROM {jobs.schema}.job_events")
    assert n == 0


async def test_one_statement_changing_both_kinds_of_job_logs_only_the_flagged_ones(
    jobs: JobQueue, kinds: None
) -> None:
    """The update trigger's first look (does any changed row record events?) must look past
    rows without the flag: here the flagged job is the statement's last row."""
    plain = await jobs.enqueue("work", {"n": 3}, delay=3600)
    flagged = await jobs.enqueue("work", {"n": 4}, delay=3600, events=True)
    assert plain.id < flagged.id
    async with jobs.events(["q"], after="0") as stream:
        cancelled = await jobs.cancel_matching(JobFilter(queue="q"))
        assert sorted(cancelled) == [plain.id, flagged.id]
        events = await take(stream, 2)
    assert [(e.event, e.job_id) for e in events] == [
        ("added", flagged.id),
        ("cancelled", flagged.id),
    ]
    logged = await jobs.db.pool.fetch(
        f"SELECT job_id, event FROM {jobs.schema}.job_events WHERE job_id IS NOT NULL"
    )
    assert [tuple(row) for row in logged] == [(flagged.id, "cancelled")]


async def test_a_new_stream_skips_history_and_a_cursor_resumes(jobs: JobQueue, kinds: None) -> None:
    before = await jobs.enqueue("work", {"n": 3}, events=True)
    async with jobs.events(["q"]) as stream:
        after = await jobs.enqueue("work", {"n": 4}, events=True)
        (first,) = await take(stream, 1)
    assert first.job_id == after.id  # the earlier job's "added" is history

    async with jobs.events(["q"], after="0") as replay:
        events = await take(replay, 2)
        assert [e.job_id for e in events] == [before.id, after.id]
    async with jobs.events(["q"], after=events[0].cursor) as resumed:
        (next_event,) = await take(resumed, 1)
    assert next_event.job_id == after.id


async def test_removed_paused_resumed_and_published_events(jobs: JobQueue, kinds: None) -> None:
    async with jobs.events(["q"]) as stream:
        job = await jobs.enqueue("work", {"n": 3}, events=True)
        await jobs.pause("q")
        await jobs.resume("q")
        await jobs.publish_event("q", "custom", {"hello": "world"})
        await jobs.purge(JobFilter(ids=(job.id,)))
        events = await take(stream, 5)
    assert [(e.event, e.job_id) for e in events] == [
        ("added", job.id), ("paused", None), ("resumed", None), ("custom", None),
        ("removed", job.id),
    ]  # fmt: skip
    assert events[3].data == {"hello": "world"}
    assert events[4].prev == "pending"


async def test_housekeeping_removes_jobs_without_removed_events(
    jobs: JobQueue, kinds: None
) -> None:
    """Only a removal someone asks for is an event, as in BullMQ: a finished job's retention
    rule (removed at once, or trimmed by count), the GC and a purge told not to delete without
    one. A quiet purge followed by a plain one in the same transaction: the second still
    writes its events (the quiet mark covers one statement)."""
    at_once = await jobs.enqueue("work", {"n": 3}, events=True, keep_completed=Keep(count=0))
    older = await jobs.enqueue("work", {"n": 3}, events=True, keep_completed=Keep(count=1))
    await jobs.worker(queues=["q"]).run(until_drained=True)
    newer = await jobs.enqueue("work", {"n": 3}, events=True, keep_completed=Keep(count=1))
    await jobs.worker(queues=["q"]).run(until_drained=True)  # trims `older`
    collected = await jobs.enqueue("work", {"n": 3}, events=True, queue="gc")
    await jobs.worker(queues=["gc"]).run(until_drained=True)
    gc = await collect_garbage(jobs.db, GcInput(completed_after=0))
    quiet = await jobs.enqueue("work", {"n": 3}, events=True)
    loud = await jobs.enqueue("work", {"n": 3}, events=True)
    async with jobs.events(["q", "gc"], after="0") as replay:
        async with jobs.transaction() as conn:
            purged = await jobs.purge(
                JobFilter(ids=(quiet.id,)), connection=conn, removed_events=False
            )
            await jobs.purge(JobFilter(ids=(loud.id,)), connection=conn)
        events: list[JobEvent] = []
        while not events or (events[-1].event, events[-1].job_id) != ("removed", loud.id):
            events += await take(replay, 1)
    gone = (at_once.id, older.id, collected.id, quiet.id)
    assert purged.deleted == 1 and gc["deleted_jobs"] >= 2  # `newer` and `collected`
    assert await jobs.list_jobs(JobFilter(ids=(*gone, loud.id, newer.id))) == []
    assert [(e.event, e.job_id) for e in events if e.event == "removed"] == [("removed", loud.id)]
    completed = {e.job_id for e in events if e.event == "completed"}
    assert {at_once.id, older.id, newer.id, collected.id} <= completed  # their history stays


async def test_a_quiet_mark_is_its_own_transactions(jobs: JobQueue, kinds: None) -> None:
    """Two connections: a transaction that marked its next removal quiet and is still open
    does not silence a purge another connection commits meanwhile; its own next DELETE is
    quiet."""
    other = await jobs.enqueue("work", {"n": 3}, events=True)
    mine = await jobs.enqueue("work", {"n": 3}, events=True)
    after = await jobs.enqueue("work", {"n": 3}, events=True)
    async with jobs.events(["q"], after="0") as replay:
        async with jobs.transaction() as conn:
            assert await conn.fetchval(f"SELECT {jobs.schema}.quiet_next_removal()")
            await jobs.purge(JobFilter(ids=(other.id,)))  # another connection, committed
            await conn.execute(f"DELETE FROM {jobs.schema}.jobs WHERE id = $1", mine.id)
        await jobs.purge(JobFilter(ids=(after.id,)))
        events: list[JobEvent] = []
        while not events or (events[-1].event, events[-1].job_id) != ("removed", after.id):
            events += await take(replay, 1)
    assert [e.job_id for e in events if e.event == "removed"] == [other.id, after.id]


async def test_purge_refuses_a_removed_events_flag_that_is_not_a_bool(jobs: JobQueue) -> None:
    with pytest.raises(InvalidOption, match="removed_events"):
        await jobs.purge(JobFilter(ids=(1,)), removed_events="no")  # type: ignore[arg-type]


async def test_events_are_scoped_to_their_queue_and_tenant(jobs: JobQueue, kinds: None) -> None:
    await jobs.enqueue("work", {"n": 1}, events=True, queue="other")
    await jobs.enqueue("work", {"n": 2}, events=True, tenant="acme")
    mine = await jobs.enqueue("work", {"n": 3}, events=True, tenant="zen")
    async with jobs.events(["q"], after="0", tenant="zen") as stream:
        (event,) = await take(stream, 1)
        assert event.job_id == mine.id
        await jobs.enqueue("work", {"n": 4}, events=True, tenant="acme")
        last = await jobs.enqueue("work", {"n": 5}, events=True, tenant="zen")
        (event,) = await take(stream, 1)
    assert event.job_id == last.id


async def test_an_open_transaction_holds_later_events_back_until_it_ends(
    jobs: JobQueue, kinds: None
) -> None:
    async with jobs.events(["q"]) as stream:
        async with jobs.transaction() as conn:
            slow = await jobs.enqueue("work", {"n": 1}, events=True, connection=conn)
            fast = await jobs.enqueue("work", {"n": 2}, events=True)  # commits first
            waiting = asyncio.ensure_future(take(stream, 1))
            done, _ = await asyncio.wait({waiting}, timeout=0.3)
            assert not done  # the fast job's event waits for the older transaction
        events = [*(await waiting), *(await take(stream, 1))]
    assert [e.job_id for e in events] == [slow.id, fast.id]


async def test_gc_keeps_the_newest_events_per_queue(jobs: JobQueue, kinds: None) -> None:
    for n in range(5):
        await jobs.enqueue("work", {"n": n}, events=True)
        await jobs.enqueue("work", {"n": n}, events=True, queue="b")
    result = await collect_garbage(jobs.db, GcInput(events_per_queue=2))
    assert result["deleted_events"] == 6
    for queue in ("q", "b"):
        async with jobs.events([queue], after="0") as replay:
            kept = await take(replay, 2)
            assert replay.buffered == 0  # the read that found these two found nothing more
        newest = await jobs.list_jobs(JobFilter(queue=queue), limit=2)
        assert sorted(e.job_id for e in kept) == sorted(r.id for r in newest)  # type: ignore[type-var]


async def log_size(jobs: JobQueue, queue: str) -> int:
    """Events of ``queue`` in the log (a batch's row counts one per job)."""
    return int(
        await jobs.db.pool.fetchval(
            f"SELECT coalesce(sum(coalesce(cardinality(added), 1)), 0)"
            f" FROM {jobs.schema}.job_events WHERE queue = $1",
            queue,
        )
    )


async def test_a_queue_trim_keeps_its_newest_events_and_leaves_other_queues(
    jobs: JobQueue, kinds: None
) -> None:
    for n in range(5):
        await jobs.enqueue("work", {"n": n}, events=True)
        await jobs.enqueue("work", {"n": n}, events=True, queue="b")
    assert await jobs.trim_events("q", 2) == 3
    async with jobs.events(["q"], after="0") as replay:
        kept = await take(replay, 2)
        assert replay.buffered == 0
    newest = await jobs.list_jobs(JobFilter(queue="q"), limit=2)
    assert sorted(e.job_id for e in kept) == sorted(r.id for r in newest)  # type: ignore[type-var]
    assert await log_size(jobs, "b") == 5
    assert await jobs.trim_events("q", 2) == 0  # nothing more to take
    assert await jobs.trim_events("q", 0) == 2
    assert await log_size(jobs, "q") == 0


async def test_a_queue_trim_takes_a_batch_row_whole_once_newer_rows_hold_the_count(
    jobs: JobQueue, kinds: None
) -> None:
    await jobs.enqueue_batch("work", [{"n": n} for n in range(6)], events=True)
    await jobs.enqueue("work", {"n": 9}, events=True)
    assert await jobs.trim_events("q", 3) == 0  # the newer row holds one event: the batch stays
    assert await log_size(jobs, "q") == 7
    assert await jobs.trim_events("q", 1) == 6
    assert await log_size(jobs, "q") == 1


async def test_a_queue_trim_refuses_bad_arguments_by_name(jobs: JobQueue) -> None:
    for keep in (-1, True, "3", 2.0):
        with pytest.raises(InvalidOption, match="keep"):
            await jobs.trim_events("q", keep)  # type: ignore[arg-type]
    with pytest.raises(InvalidOption, match="queue"):
        await jobs.trim_events("", 3)


async def test_an_event_of_a_transaction_open_during_a_trim_stays_until_a_later_trim(
    jobs: JobQueue,
) -> None:
    """A trim decides from its own snapshot: an event row written by a transaction still open
    is neither counted nor deleted, whatever its place in the log, and a later trim, seeing it,
    takes it in turn (it is the oldest, by its transaction)."""
    async with jobs.transaction() as conn:
        await jobs.publish_event("q", "early", connection=conn)  # the older transaction
        for n in range(5):
            await jobs.publish_event("q", f"late{n}")
        assert await jobs.trim_events("q", 2) == 3
    assert await log_size(jobs, "q") == 3  # late3, late4 and the early one, now committed
    assert await jobs.trim_events("q", 2) == 1
    async with jobs.events(["q"], after="0") as replay:
        assert [e.event for e in await take(replay, 2)] == ["late3", "late4"]


async def test_a_trim_waiting_on_another_finds_its_rows_gone_and_deletes_nothing_more(
    jobs: JobQueue,
) -> None:
    """Two trims of one queue, the first left uncommitted: the second, which saw the same rows
    and chose the same cutoff, waits on the rows the first deletes; once the first commits it
    finds them gone (READ COMMITTED reads each again as of that commit) and deletes nothing
    else, so the log holds the newest ``keep`` events, not fewer."""
    for n in range(5):
        await jobs.publish_event("q", f"e{n}")
    async with jobs.db.pool.acquire() as first:
        tx = first.transaction()
        await tx.start()
        assert await jobs.db.fetchval("trim_queue_events", "q", 2, conn=first) == 3
        pid = first.get_server_pid()
        second = asyncio.ensure_future(jobs.trim_events("q", 2))

        async def second_waits_for_first() -> bool:
            rows = await jobs.db.pool.fetch(
                "SELECT pid FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))", pid
            )
            return bool(rows)

        await eventually(second_waits_for_first)
        await tx.commit()
    assert await second == 0
    async with jobs.events(["q"], after="0") as replay:
        assert [e.event for e in await take(replay, 2)] == ["e3", "e4"]
        assert replay.buffered == 0


async def test_trims_racing_writers_and_each_other_keep_the_newest(jobs: JobQueue) -> None:
    """Stress: four writers append 60 events each while two trimmers keep the newest 10 over
    and over: no trim fails or waits on another for good, every event goes once, and once all
    have ended one more trim leaves ten rows, the newest of each writer's."""
    writing = True

    async def write(w: int) -> None:
        for n in range(60):
            await jobs.publish_event("q", f"w{w}-{n}")

    async def trim() -> int:
        removed = 0
        while writing:
            removed += await jobs.trim_events("q", 10)
            await asyncio.sleep(0)
        return removed

    trimmers = [asyncio.ensure_future(trim()) for _ in range(2)]
    await asyncio.gather(*(write(w) for w in range(4)))
    writing = False
    removed = sum(await asyncio.gather(*trimmers))
    removed += await jobs.trim_events("q", 10)
    assert removed == 230
    kept = await jobs.db.pool.fetch(f"SELECT event FROM {jobs.schema}.job_events")
    assert len(kept) == 10
    by_writer: dict[str, list[int]] = {}
    for row in kept:
        writer, n = row["event"].split("-")
        by_writer.setdefault(writer, []).append(int(n))
    for ns in by_writer.values():  # each writer committed in order: its newest events stay
        assert sorted(ns) == list(range(60 - len(ns), 60))


async def test_a_batch_logs_one_added_event_per_job_and_resumes_inside_it(
    jobs: JobQueue, kinds: None
) -> None:
    """A bulk enqueue's 'added' events are stored together (one row per queue) and read back
    as one event per job, in id order, each with its own cursor: a stream resumed from the
    middle of a batch continues with the next job of it, and the trim counts each job."""
    batch = await jobs.enqueue_batch("work", [{"n": n} for n in range(6)], events=True)
    single = await jobs.enqueue("work", {"n": 9}, events=True, job_key="k9")
    ids = [r.id for r in batch]
    rows = await jobs.db.pool.fetchval(f"SELECT count(*) FROM {jobs.schema}.job_events")
    assert rows == 2
    async with jobs.events(["q"], after="0") as replay:
        events = await take(replay, 7)
    assert [(e.event, e.job_id) for e in events] == [("added", i) for i in [*ids, single.id]]
    assert [e.data["state"] for e in events] == ["ready"] * 7
    assert events[-1].job_key == "k9" and events[0].job_key is None
    assert len({e.cursor for e in events}) == 7
    async with jobs.events(["q"], after=events[2].cursor) as resumed:
        rest = await take(resumed, 4)
    assert [e.job_id for e in rest] == [*ids[3:], single.id]
    # a row goes whole, and only once the newer rows hold the number of events kept
    kept = await collect_garbage(jobs.db, GcInput(events_per_queue=3))
    assert kept["deleted_events"] == 0
    trimmed = await collect_garbage(jobs.db, GcInput(events_per_queue=1))
    assert trimmed["deleted_events"] == 6


async def test_concurrent_batches_reach_a_resuming_reader_once_each_and_in_order(
    jobs: JobQueue, kinds: None
) -> None:
    """Stress: four producers commit batches of random sizes and single jobs at once while a
    reader takes the log in pages of 7 events, closing and resuming from its last cursor
    every 11 (so pages and resumes fall inside batches). Every job's 'added' event arrives
    exactly once, and each producer's jobs arrive in the order it committed them."""
    rng = random.Random(17)
    plans = [[rng.randint(1, 40) for _ in range(8)] for _ in range(4)]
    total = sum(map(sum, plans))

    async def produce(plan: list[int]) -> list[int]:
        ids: list[int] = []
        for size in plan:
            if size == 1:
                ids.append((await jobs.enqueue("work", {"n": 3}, events=True)).id)
            else:
                batch = await jobs.enqueue_batch("work", [{"n": 3}] * size, events=True)
                ids.extend(r.id for r in batch)
        return ids

    producers = asyncio.gather(*(produce(plan) for plan in plans))
    received: list[int | None] = []
    cursor = "0"
    while len(received) < total:
        stream = EventStream(jobs.db, ["q"], after=cursor, tenant=None, any_tenant=False, batch=7)
        async with stream:
            for event in await take(stream, min(11, total - len(received))):
                assert event.event == "added"
                received.append(event.job_id)
                cursor = event.cursor
    produced = await producers
    assert len(received) == len(set(received)) == total
    assert set(received) == {job_id for ids in produced for job_id in ids}
    position = {job_id: index for index, job_id in enumerate(received)}
    for ids in produced:
        assert [position[job_id] for job_id in ids] == sorted(position[job_id] for job_id in ids)


async def test_bad_stream_arguments_are_named(jobs: JobQueue) -> None:
    with pytest.raises(InvalidOption, match="queues"):
        jobs.events("q")  # type: ignore[arg-type]
    with pytest.raises(InvalidOption, match="after"):
        jobs.events(["q"], after="yesterday")
    with pytest.raises(InvalidOption, match="event"):
        await jobs.publish_event("q", "")


async def test_lifo_jobs_run_newest_first_ahead_of_fifo_ones(
    jobs: JobQueue, registry: Registry
) -> None:
    order: list[int] = []

    @registry.kind("rec", input=Item, queue="l")
    async def rec(ctx: JobContext, item: Item) -> None:
        order.append(item.n)

    await jobs.enqueue("rec", {"n": 1})
    await jobs.enqueue("rec", {"n": 2})
    await jobs.enqueue("rec", {"n": 3}, lifo=True)
    await jobs.enqueue_many([JobSpec("rec", {"n": n}, lifo=True) for n in (4, 5)])
    await jobs.enqueue("rec", {"n": 6}, priority=1)
    await jobs.worker(queues=["l"], concurrency=1).run(until_drained=True)
    assert order == [6, 5, 4, 3, 1, 2]
    with pytest.raises(InvalidOption, match="lifo"):
        await jobs.enqueue("rec", {"n": 7}, lifo=True, delay=5)


async def test_the_cursor_is_that_of_the_last_event_delivered_not_read(
    jobs: JobQueue, kinds: None
) -> None:
    async with jobs.events(["q"]) as stream:
        await jobs.enqueue_batch("work", [{"n": 3}] * 3, events=True)
        (first,) = await take(stream, 1)
        assert stream.buffered == 2  # one read took all three
        assert stream.cursor == first.cursor


async def test_two_connections_drawing_the_first_incarnation_agree_on_one(
    jobs: JobQueue,
) -> None:
    """After a crash the incarnation row is gone; the first callers draw it at once. The second
    one's insert waits for the first's, then finds the first's token rather than its own."""
    await jobs.db.pool.execute(f"DELETE FROM {jobs.schema}.incarnation")
    draw = f"SELECT {jobs.schema}.current_incarnation()"

    async def first(conn: asyncpg.Connection) -> object:
        return await conn.fetchval(draw)

    async def second(conn: asyncpg.Connection) -> object:
        return await conn.fetchval(draw)

    one, two, waited = await overlap(jobs.db.pool, first, second)
    assert waited and one == two
    assert await jobs.db.pool.fetchval(draw) == one


async def test_many_connections_drawing_the_incarnation_at_once_agree_on_one(
    jobs: JobQueue,
) -> None:
    """Stress: eight connections draw the incarnation at the same moment, five times over
    after the row is cleared; each time they all get the one token that was stored."""
    draw = f"SELECT {jobs.schema}.current_incarnation()::text"
    seen: set[str] = set()
    for _ in range(5):
        await jobs.db.pool.execute(f"DELETE FROM {jobs.schema}.incarnation")
        tokens = await asyncio.gather(*(jobs.db.pool.fetchval(draw) for _ in range(8)))
        stored = await jobs.db.pool.fetchval(f"SELECT token::text FROM {jobs.schema}.incarnation")
        assert set(tokens) == {stored}
        seen.add(stored)
    assert len(seen) == 5  # a fresh token after every clearing


async def test_a_new_incarnation_sends_a_stream_back_to_its_last_safe_position(
    jobs: JobQueue, kinds: None, caplog: pytest.LogCaptureFixture
) -> None:
    """What a stream does when the server's incarnation changes (recovery empties the unlogged
    table; here the test does): it goes back to its newest position known to be on disk and
    reads on, so the event written after the change arrives, and whatever comes again before
    it is one of the events already delivered, in the same order."""
    async with jobs.events(["q"]) as stream:
        one = await jobs.enqueue("work", {"n": 3}, events=True)
        two = await jobs.enqueue("work", {"n": 3}, events=True)
        delivered = await take(stream, 2)
        assert [e.job_id for e in delivered] == [one.id, two.id]
        await jobs.db.pool.execute(f"DELETE FROM {jobs.schema}.incarnation")
        three = await jobs.enqueue("work", {"n": 3}, events=True)
        again: list[JobEvent] = []
        while not again or again[-1].job_id != three.id:
            again.extend(await take(stream, 1))
    assert "recovered from a crash" in caplog.text
    repeated = [e.cursor for e in again[:-1]]
    assert repeated == [e.cursor for e in delivered][len(delivered) - len(repeated) :]


async def test_after_a_new_incarnation_a_stream_rereads_all_it_read_since_its_safe_position(
    jobs: JobQueue, kinds: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the WAL never seen flushed past the stream's reads (as right before a crash), the
    only safe position is the start: on a new incarnation the stream reads again everything
    after it, in order, then goes on; nothing is skipped and nothing comes out of order."""
    monkeypatch.setattr(EventStream, "_flushed_to", lambda self, flushed: None)
    async with jobs.events(["q"]) as stream:
        first = [await jobs.enqueue("work", {"n": 3}, events=True) for _ in range(3)]
        before = await take(stream, 3)
        assert [e.job_id for e in before] == [j.id for j in first]
        await jobs.db.pool.execute(f"DELETE FROM {jobs.schema}.incarnation")
        last = await jobs.enqueue("work", {"n": 3}, events=True)
        after = await take(stream, 4)
    assert [e.cursor for e in after[:3]] == [e.cursor for e in before]
    assert after[3].job_id == last.id


async def test_a_read_in_another_incarnation_returns_no_event(jobs: JobQueue, kinds: None) -> None:
    await jobs.enqueue("work", {"n": 3}, events=True)
    current = str(await jobs.db.pool.fetchval(f"SELECT {jobs.schema}.current_incarnation()"))
    args = (["q"], "0", 0, None, 10, True, None, 0)
    (stale,) = await jobs.db.fetch("read_events", *args, str(uuid.uuid4()))
    assert stale["incarnation"] == current and stale["id"] is None
    (fresh,) = await jobs.db.fetch("read_events", *args, current)
    assert fresh["event"] == "added" and fresh["inserted"] >= fresh["flushed"] > 0
