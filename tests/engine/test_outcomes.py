"""Handler outcomes, exactly as ENGINE.md's table says."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pydantic
import pytest

from pgjobs import Backoff, Delayed, Fatal, JobQueue, Registry, Retry, Status, WaitForPrerequisites
from tests.helpers import eventually, expire_lease


class Task(pydantic.BaseModel):
    n: int = 0


FAST = Backoff.fixed(0.01)


async def finish(jobs: JobQueue, job_id: int):
    await jobs.worker(concurrency=4, poll_interval=0.5).run(until_drained=True)
    row = await jobs.get(job_id)
    assert row is not None
    return row


async def run_until_retried(jobs: JobQueue, count: int) -> None:
    """Run a worker until it has written ``count`` retries (of jobs it then leaves pending)."""
    worker = jobs.worker(concurrency=2)
    worker.start()

    async def retried() -> bool:
        return worker.stats.retried == count

    await eventually(retried)
    await worker.stop()


async def test_return_value_completes_and_stores_output(jobs: JobQueue, registry: Registry) -> None:
    @registry.kind("ok", input=Task)
    async def ok(ctx, task: Task) -> dict:
        return {"doubled": task.n * 2, "model": Task(n=task.n)}

    row = await finish(jobs, (await jobs.enqueue("ok", {"n": 21})).id)
    assert row.status is Status.COMPLETED
    assert row.output == {"doubled": 42, "model": {"n": 21}}
    assert row.attempts == 1 and row.finished_at is not None and row.last_error is None


async def test_exceptions_retry_with_backoff_then_die(jobs: JobQueue, registry: Registry) -> None:
    attempts_seen: list[int] = []

    @registry.kind("flaky", input=Task, max_attempts=3, backoff=FAST)
    async def flaky(ctx, task: Task) -> None:
        attempts_seen.append(ctx.attempts)
        raise ValueError(f"boom {ctx.attempts}")

    row = await finish(jobs, (await jobs.enqueue("flaky", {})).id)
    assert attempts_seen == [1, 2, 3]
    assert row.status is Status.DEAD and row.attempts == 3
    assert row.last_error["type"] == "ValueError" and row.last_error["message"] == "boom 3"
    assert "Traceback" in row.last_error["traceback"] and row.last_error["attempt"] == 3


async def test_every_failed_attempt_keeps_its_error_oldest_first(
    jobs: JobQueue, registry: Registry
) -> None:
    @registry.kind("thrice", input=Task, max_attempts=4, backoff=FAST)
    async def thrice(ctx, task: Task) -> str:
        if ctx.attempts < 4:
            raise ValueError(f"boom {ctx.attempts}")
        return "fourth time"

    row = await finish(jobs, (await jobs.enqueue("thrice", {})).id)
    assert row.status is Status.COMPLETED
    assert [(e["attempt"], e["type"], e["message"]) for e in row.errors] == [
        (1, "ValueError", "boom 1"),
        (2, "ValueError", "boom 2"),
        (3, "ValueError", "boom 3"),
    ]
    assert all("boom" in e["traceback"] and e["at"] for e in row.errors)
    assert row.last_error == row.errors[-1]


async def test_attempt_errors_keep_the_last_twenty_and_a_lease_expiry(
    jobs: JobQueue, registry: Registry
) -> None:
    @registry.kind("hopeless", input=Task, max_attempts=25, backoff=FAST)
    async def hopeless(ctx, task: Task) -> None:
        raise RuntimeError(f"no {ctx.attempts}")

    row = await finish(jobs, (await jobs.enqueue("hopeless", {})).id)
    assert row.status is Status.DEAD and row.attempts == 25
    assert [e["attempt"] for e in row.errors] == list(range(6, 26))

    registry.declare("stalls", input=Task, max_attempts=2)
    stalled = await jobs.enqueue("stalls", {})
    assert len(await jobs.claim(["default"], kinds=["stalls"])) == 1
    await expire_lease(jobs, stalled.id)
    await jobs.db.fetch("rescue_stalled", 10, "unused_channel")  # what a worker's rescue runs
    row = await jobs.get(stalled.id)
    assert row is not None and row.status is Status.PENDING
    [expiry] = row.errors
    assert expiry["type"] == "LeaseExpired" and expiry["attempt"] == 1
    assert "stopped heartbeating" in expiry["message"] and row.last_error == expiry


async def test_retry_succeeds_when_handler_recovers(jobs: JobQueue, registry: Registry) -> None:
    @registry.kind("recovers", input=Task, max_attempts=5, backoff=FAST)
    async def recovers(ctx, task: Task) -> int:
        if ctx.attempts < 3:
            raise ConnectionError("not yet")
        return ctx.attempts

    row = await finish(jobs, (await jobs.enqueue("recovers", {})).id)
    assert row.status is Status.COMPLETED and row.output == 3 and row.attempts == 3
    assert row.last_error["message"] == "not yet"  # the history of the last failure is kept


async def test_backoff_delays_the_retry(jobs: JobQueue, registry: Registry) -> None:
    @registry.kind("slow_retry", input=Task, max_attempts=2, backoff=Backoff.fixed(3600))
    async def slow_retry(ctx, task: Task) -> None:
        raise ValueError("later")

    result = await jobs.enqueue("slow_retry", {})
    await run_until_retried(jobs, 1)
    row = await jobs.get(result.id)
    assert row is not None and row.status is Status.PENDING and row.attempts == 1
    assert row.started_at is not None and row.run_at - row.started_at > timedelta(minutes=59)


async def test_a_job_row_holds_only_the_backoff_fields_that_differ_from_the_defaults(
    jobs: JobQueue, registry: Registry
) -> None:
    @registry.kind("plain", input=Task)
    async def plain(ctx, task: Task) -> None:
        return None

    uncapped = Backoff.exponential(5.0, max_delay=None, jitter=0.5)
    ids = [
        (await jobs.enqueue("plain", {})).id,
        (await jobs.enqueue("plain", {}, backoff=Backoff.fixed(2))).id,
        (await jobs.enqueue("plain", {}, backoff=uncapped)).id,
    ]
    stored = await jobs.db.pool.fetch(
        f"SELECT backoff::text FROM {jobs.schema}.jobs WHERE id = ANY($1) ORDER BY id", ids
    )
    assert [r["backoff"] for r in stored] == [
        "{}",
        '{"type": "fixed", "delay": 2, "max_delay": null}',
        '{"delay": 5.0, "jitter": 0.5, "max_delay": null}',
    ]
    shown = [(await jobs.get(i)).backoff for i in ids]  # type: ignore[union-attr]
    assert shown == [
        {"type": "exponential", "delay": 1.0, "max_delay": 3600.0, "jitter": 0.0},
        {"type": "fixed", "delay": 2, "max_delay": None, "jitter": 0.0},
        {"type": "exponential", "delay": 5.0, "max_delay": None, "jitter": 0.5},
    ]


async def test_a_retry_reads_the_backoff_of_rows_from_before_and_after_the_compact_form(
    jobs: JobQueue, registry: Registry
) -> None:
    """A row of an earlier release holds every field; a row of this one only those that differ
    from the defaults (``{}``: exponential from 1 s). Both give their own delay."""

    @registry.kind("fails", input=Task, max_attempts=2)
    async def fails(ctx, task: Task) -> None:
        raise ValueError("later")

    compact = (await jobs.enqueue("fails", {"n": 1})).id
    full = (await jobs.enqueue("fails", {"n": 2})).id
    await jobs.db.pool.execute(
        f"UPDATE {jobs.schema}.jobs SET backoff = $2::jsonb WHERE id = $1",
        full,
        '{"type": "fixed", "delay": 7200.0, "max_delay": null, "jitter": 0.0}',
    )
    await run_until_retried(jobs, 2)
    rows = {i: await jobs.get(i) for i in (compact, full)}
    waits = {i: row.run_at - row.started_at for i, row in rows.items() if row is not None}
    assert timedelta(seconds=1) <= waits[compact] < timedelta(minutes=1)
    assert timedelta(hours=2) <= waits[full] < timedelta(hours=2, minutes=1)


def test_a_stored_backoff_reads_back_as_the_same_policy() -> None:
    policies = [
        Backoff(),
        Backoff.fixed(2),
        Backoff.fixed(1.0),  # its delay is the default's: not written, read back as 1.0
        Backoff.exponential(1.0, max_delay=None),  # no cap is written out, never defaulted
        Backoff.exponential(3.0, max_delay=60.0, jitter=0.25),
    ]
    for policy in policies:
        assert Backoff.from_json(policy.stored_json()) == policy
        assert Backoff.from_json(policy.to_json()) == policy
    assert Backoff().stored_json() == {}
    assert Backoff.exponential(1.0, max_delay=None).stored_json() == {"max_delay": None}


def test_backoff_policies_are_pure() -> None:
    exp = Backoff.exponential(1.0, max_delay=10.0)
    assert [exp.seconds(a) for a in (1, 2, 3, 4, 5)] == [1.0, 2.0, 4.0, 8.0, 10.0]
    assert Backoff.fixed(5.0).seconds(9) == 5.0
    jittered = Backoff.exponential(8.0, jitter=0.5)
    for _ in range(100):
        assert 4.0 <= jittered.seconds(1) <= 8.0
    assert Backoff.exponential(1.0, max_delay=None).seconds(10_000) > 0


async def test_retry_signal_uses_its_delay_and_an_attempt(
    jobs: JobQueue, registry: Registry
) -> None:
    @registry.kind("asks_retry", input=Task, max_attempts=2, backoff=Backoff.fixed(3600))
    async def asks_retry(ctx, task: Task) -> str:
        if ctx.attempts == 1:
            raise Retry(after=0.01, reason="rate limited upstream")
        return "second time"

    row = await finish(jobs, (await jobs.enqueue("asks_retry", {})).id)
    assert row.status is Status.COMPLETED and row.attempts == 2 and row.output == "second time"
    assert row.last_error["type"] == "Retry"


async def test_deferral_does_not_consume_an_attempt(jobs: JobQueue, registry: Registry) -> None:
    @registry.kind("defers", input=Task, max_attempts=1)
    async def defers(ctx, task: Task) -> dict:
        if ctx.deferrals < 4:
            raise Delayed(0.01, "cache not ready")
        return {"attempts": ctx.attempts, "deferrals": ctx.deferrals}

    row = await finish(jobs, (await jobs.enqueue("defers", {})).id)
    # max_attempts=1: four deferrals would have killed it had they consumed attempts.
    assert row.status is Status.COMPLETED
    assert row.output == {"attempts": 1, "deferrals": 4}
    assert (row.attempts, row.deferrals) == (1, 4)


async def test_deferral_budget_dead_letters_at_the_limit(
    jobs: JobQueue, registry: Registry
) -> None:
    calls: list[int] = []

    @registry.kind("always_defers", input=Task, max_deferrals=3)
    async def always_defers(ctx, task: Task) -> None:
        calls.append(ctx.deferrals)
        raise Delayed(0.01)

    row = await finish(jobs, (await jobs.enqueue("always_defers", {})).id)
    assert calls == [0, 1, 2]
    assert row.status is Status.DEAD and row.deferrals == 3 and row.attempts == 0
    assert row.last_error["type"] == "Delayed"


async def test_unlimited_deferrals_when_budget_is_zero(jobs: JobQueue, registry: Registry) -> None:
    @registry.kind("many_defers", input=Task, max_deferrals=0, max_attempts=1)
    async def many_defers(ctx, task: Task) -> int:
        if ctx.deferrals < 25:
            raise Delayed(0)
        return ctx.deferrals

    row = await finish(jobs, (await jobs.enqueue("many_defers", {})).id)
    assert row.status is Status.COMPLETED and row.output == 25


async def test_fatal_dies_at_once(jobs: JobQueue, registry: Registry) -> None:
    @registry.kind("fatal", input=Task, max_attempts=10)
    async def fatal(ctx, task: Task) -> None:
        raise Fatal("corrupt input file")

    row = await finish(jobs, (await jobs.enqueue("fatal", {})).id)
    assert row.status is Status.DEAD and row.attempts == 1
    assert row.last_error == {**row.last_error, "type": "Fatal", "message": "corrupt input file"}


async def test_payload_invalid_at_claim_dies_with_a_clear_error(
    jobs: JobQueue, registry: Registry
) -> None:
    ran: list[int] = []

    @registry.kind("strict", input=Task, max_attempts=5)
    async def strict(ctx, task: Task) -> None:
        ran.append(task.n)

    result = await jobs.enqueue("strict", {"n": 1})
    # The model changed (or the row was edited) since enqueue.
    await jobs.db.pool.execute(
        f'UPDATE {jobs.schema}.jobs SET payload = \'{{"n": "seven"}}\' WHERE id = $1', result.id
    )
    row = await finish(jobs, result.id)
    assert ran == []
    assert row.status is Status.DEAD and row.attempts == 1
    assert row.last_error["type"] == "InvalidJobInput" and "'n'" in row.last_error["message"]


async def test_output_that_is_not_json_is_fatal(jobs: JobQueue, registry: Registry) -> None:
    @registry.kind("bad_output", input=Task, max_attempts=3)
    async def bad_output(ctx, task: Task) -> float:
        return float("nan")

    row = await finish(jobs, (await jobs.enqueue("bad_output", {})).id)
    assert (
        row.status is Status.DEAD and row.attempts == 1 and "not JSON" in row.last_error["message"]
    )


@pytest.mark.parametrize("after", [-1, float("nan")])
def test_signals_reject_bad_delays(after: float) -> None:
    with pytest.raises(ValueError, match="delay"):
        Delayed(after)
    with pytest.raises(ValueError, match="delay"):
        Retry(after)


async def test_worker_events_follow_the_written_outcome(jobs: JobQueue, registry: Registry) -> None:
    events: list[tuple[str, int, object]] = []

    @registry.kind("evented", input=Task, max_attempts=2, backoff=FAST)
    async def evented(ctx, task: Task) -> int:
        if task.n == 1 and ctx.attempts == 1:
            raise ValueError("first try fails")
        if task.n == 2:
            raise Fatal("never")
        return task.n

    async def async_listener(event, ctx, detail) -> None:  # async listeners are awaited too
        events.append((f"async:{event}", ctx.id, None))

    def listener(event, ctx, detail):
        events.append(
            (
                event,
                ctx.id,
                detail.get("output")
                if event == "completed"
                else (detail["error"]["message"] if detail.get("error") else None),
            )
        )
        if event == "completed" and ctx.id < 0:
            raise RuntimeError("unreachable")
        return async_listener(event, ctx, detail) if event == "failed" else None

    ok = await jobs.enqueue("evented", {"n": 0})
    flaky = await jobs.enqueue("evented", {"n": 1})
    fatal = await jobs.enqueue("evented", {"n": 2})
    await jobs.worker(concurrency=1, on_event=listener).run(until_drained=True)
    assert ("completed", ok.id, 0) in events
    assert ("retrying", flaky.id, "first try fails") in events
    assert ("completed", flaky.id, 1) in events
    assert ("failed", fatal.id, "never") in events
    assert ("async:failed", fatal.id, None) in events
    assert [e for e in events if e[0] == "active"] == [
        ("active", i, None) for i in (ok.id, flaky.id, fatal.id, flaky.id)
    ]


async def test_a_raising_listener_does_not_disturb_the_job(
    jobs: JobQueue, registry: Registry
) -> None:
    @registry.kind("calm", input=Task)
    async def calm(ctx, task: Task) -> str:
        return "done"

    def explode(event, ctx, detail):
        raise RuntimeError("listener bug")

    result = await jobs.enqueue("calm", {})
    await jobs.worker(on_event=explode).run(until_drained=True)
    row = await jobs.get(result.id)
    assert row is not None and row.status is Status.COMPLETED and row.output == "done"


async def test_a_counted_wait_for_prerequisites_is_a_deferral(
    jobs: JobQueue, registry: Registry
) -> None:
    """``WaitForPrerequisites(counted=True)``: the run is counted in ``deferrals`` (so that
    attempts + deferrals + stalls count every run) and refunds its attempt; a deferral budget
    applies to it as to ``Delayed``."""
    runs: list[tuple[int, int]] = []

    @registry.kind("child", input=Task, queue="kids")
    async def child(ctx, task: Task) -> int:
        return task.n

    @registry.kind("waits", input=Task, queue="kids")
    async def waits(ctx, task: Task) -> int:
        runs.append((ctx.attempts, ctx.deferrals))
        if not await ctx.prerequisites():
            await jobs.add_prerequisite(ctx.id, "child", {"n": 7})
            raise WaitForPrerequisites(counted=True)
        return 1

    row = await finish(jobs, (await jobs.enqueue("waits", {})).id)
    assert row.status is Status.COMPLETED and runs == [(1, 0), (1, 1)]
    assert (row.attempts, row.deferrals) == (1, 1)

    @registry.kind("budget", input=Task, queue="kids", max_deferrals=1)
    async def budget(ctx, task: Task) -> int:
        await jobs.add_prerequisite(ctx.id, "child", {"n": 8})
        raise WaitForPrerequisites(counted=True)

    row = await finish(jobs, (await jobs.enqueue("budget", {})).id)
    assert row.status is Status.DEAD and (row.attempts, row.deferrals) == (0, 1)


async def test_a_retry_due_at_once_keeps_its_place_by_priority(
    jobs: JobQueue, registry: Registry
) -> None:
    """A retry without backoff holds its worker's slot until it is written: the claim that
    slot makes sees it, and a higher-priority retry runs before lower-priority due jobs."""
    order: list[tuple[int, int]] = []

    @registry.kind("ranked", input=Task, max_attempts=2, backoff=Backoff.fixed(0))
    async def ranked(ctx, task: Task) -> None:
        order.append((task.n, ctx.attempts))
        await asyncio.sleep(0.02)
        if task.n == 1 and ctx.attempts == 1:
            raise ValueError("once more")

    for _ in range(3):
        order.clear()
        await jobs.enqueue("ranked", {"n": 1}, priority=5)
        for n in (2, 3):
            await jobs.enqueue("ranked", {"n": n}, priority=1)
        await jobs.worker(concurrency=1, claim_ahead=0).run(until_drained=True)
        assert order == [(1, 1), (1, 2), (2, 1), (3, 1)]
