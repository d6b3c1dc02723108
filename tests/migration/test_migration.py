"""The migration, end to end: Redis data written by the real BullMQ client (PyPI bullmq 3.4.4)
in every state, migrated, then checked job by job through the facade and the engine."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import bullmq
import pytest
import redis.asyncio as aioredis

import bullmq_compat
from bullmq_compat import engine_queue
from migration_tools import ExitCode, MigrationOptions, migrate
from migration_tools.transform import Transformer
from pgjobs import JobQueue
from tests.helpers import dsn_with

HOUR_MS = 3_600_000


@pytest.fixture
async def target(jobs: JobQueue, pg_dsn: str, schema_name: str) -> AsyncIterator[JobQueue]:
    yield jobs


def options(redis_url: str, pg_dsn: str, jobs: JobQueue, prefix: str, **extra: Any) -> Any:
    return MigrationOptions(redis_url=redis_url, postgres_dsn=pg_dsn, schema=jobs.schema,
                            prefixes=[prefix], **extra)  # fmt: skip


async def run_bullmq_worker(
    redis_url: str, prefix: str, queue: str, processor: Any, finished: int
) -> None:
    """Process with BullMQ's own worker until ``finished`` jobs completed or failed."""
    done = asyncio.Event()
    count = 0

    def one(*_args: Any) -> None:
        nonlocal count
        count += 1
        if count >= finished:
            done.set()

    worker = bullmq.Worker(queue, processor, {"connection": redis_url, "prefix": prefix})
    worker.on("completed", one)
    worker.on("failed", one)
    await asyncio.wait_for(done.wait(), 30)
    await worker.close()


async def seed(redis_url: str, prefix: str) -> dict[str, str]:
    """Jobs in every state, by BullMQ; returns name -> BullMQ id."""
    conn = {"connection": redis_url, "prefix": prefix}
    main = bullmq.Queue("main", conn)
    ids: dict[str, str] = {}

    async def add(name: str, data: Any, opts: dict[str, Any] | None = None) -> None:
        ids[name] = (await main.add(name, data, opts or {})).id

    await add("ok", {"n": 1})
    await add("bad", {"n": 2}, {"attempts": 1})
    await add("retry", {"n": 3}, {"attempts": 3, "backoff": {"type": "fixed", "delay": HOUR_MS}})

    async def process(job: Any, token: Any) -> Any:
        if job.name == "ok":
            await job.log("hello from BullMQ")
            await job.updateProgress(100)
            return {"v": 1}
        raise Exception(f"{job.name} failed")

    await run_bullmq_worker(redis_url, prefix, "main", process, 3)

    # a flow whose child already completed: the parent is back in wait with the child's value
    flows = bullmq.FlowProducer(conn)
    tree = await flows.add({"name": "parent-done", "queueName": "main", "data": {"p": 2},
                            "children": [{"name": "kid", "queueName": "kids2",
                                          "data": {"c": 9}}]})  # fmt: skip
    ids["parent-done"] = tree["job"].id
    ids["kid-done"] = tree["children"][0]["job"].id

    async def kid(job: Any, token: Any) -> Any:
        return {"kid": job.data["c"]}

    await run_bullmq_worker(redis_url, prefix, "kids2", kid, 1)

    for name in ("w1", "w2", "w3"):
        await add(name, {"name": name})
    await add("lifo", {"x": 1}, {"lifo": True})
    await add("p5", {"x": 5}, {"priority": 5})
    await add("p1", {"x": 1}, {"priority": 1})
    await add("later", {"x": 0}, {"delay": HOUR_MS})
    await add("keyed", {"k": 1}, {"jobId": "order:7"})
    await add("dedup", {"d": 1}, {"deduplication": {"id": "dd"}})
    await add("throttle", {"t": 1}, {"deduplication": {"id": "th", "ttl": HOUR_MS}})
    await add("nul", {"s": "a\x00b"})
    await add("surrogate", {"s": "\ud800"})
    tree = await flows.add({"name": "parent-waiting", "queueName": "main", "data": {"p": 1},
                            "children": [{"name": "c1", "queueName": "kids", "data": {"c": 1}},
                                         {"name": "c2", "queueName": "kids",
                                          "data": {"c": 2}}]})  # fmt: skip
    ids["parent-waiting"] = tree["job"].id
    await main.upsertJobScheduler("tick", {"every": HOUR_MS}, "tick-job", {"t": 1})
    paused = bullmq.Queue("paused", conn)
    await paused.add("sleepy", {"z": 1})
    await paused.pause()
    for closable in (main, flows, paused):
        await closable.close()
    return ids


async def redis_order(redis_url: str, prefix: str) -> list[str]:
    """BullMQ's own processing order of the ready jobs of ``main``: wait (right end first),
    then prioritized by score."""
    client = aioredis.from_url(redis_url, decode_responses=True)
    wait = list(reversed(await client.lrange(f"{prefix}:main:wait", 0, -1)))
    prioritized = await client.zrange(f"{prefix}:main:prioritized", 0, -1)
    await client.aclose()
    return [*wait, *prioritized]


async def test_every_state_migrates_and_reads_back_through_the_facade(
    redis_url: str, pg_dsn: str, target: JobQueue, prefix: str
) -> None:
    ids = await seed(redis_url, prefix)
    expected_order = await redis_order(redis_url, prefix)
    report = await migrate(options(redis_url, pg_dsn, target, prefix, include_history=True))
    assert report.exit_code is ExitCode.OK, report.render()
    assert report.verified is True
    assert sorted(report.queues) == sorted(f"{prefix}:{q}" for q in ("kids", "kids2", "main",
                                                                      "paused"))  # fmt: skip
    counts = report.plan.counts[f"{prefix}:main"]  # type: ignore[union-attr]
    assert counts == {"completed": 1, "failed": 1, "delayed": 2, "waiting": 11,
                      "prioritized": 2, "waiting-children": 1}, counts  # fmt: skip
    conn = {"connection": target, "prefix": prefix}
    main = bullmq_compat.Queue("main", conn)

    async def job(name: str) -> Any:
        found = await main.getJob(ids[name])
        assert found is not None, name
        return found

    ok = await job("ok")
    assert await ok.getState() == "completed" and ok.returnvalue == {"v": 1}
    assert ok.attemptsMade == 1 and ok.progress == 100 and ok.data == {"n": 1}
    assert (await main.getJobLogs(ids["ok"]))["logs"] == ["hello from BullMQ"]
    bad = await job("bad")
    assert await bad.getState() == "failed" and bad.failedReason == "bad failed"
    retry = await job("retry")
    assert await retry.getState() == "delayed" and retry.attemptsMade == 1
    assert retry.failedReason == "retry failed"  # a retrying job keeps its last error
    # BullMQ's list of stack traces comes across as it was
    held = bullmq.Queue("main", {"connection": redis_url, "prefix": prefix})
    for name in ("bad", "retry"):
        original = await held.getJob(ids[name])
        assert original is not None and original.stacktrace
        assert (await job(name)).stacktrace == original.stacktrace, name
    await held.close()
    assert await (await job("later")).getState() == "delayed"
    assert (await job("p1")).priority == 1 and await (await job("p5")).getState() == "prioritized"
    assert (await main.getJob("order:7")) is not None
    assert await (await job("parent-waiting")).getState() == "waiting-children"
    parent_done = await job("parent-done")
    assert await parent_done.getChildrenValues() == {
        f"{prefix}:kids2:{ids['kid-done']}": {"kid": 9}
    }
    # data PostgreSQL's jsonb cannot hold: stored made safe with the exact bytes beside it,
    # reported, and returned by the facade exactly as BullMQ returns it
    nul = await job("nul")
    assert nul.data == {"s": "a\x00b"}
    assert (await job("surrogate")).data == {"s": "\ud800"}
    row = await target.get(nul.engine_id)
    assert row is not None and row.payload == {"s": "a\\0b"}
    assert any(ids["nul"] in w and "jsonb" in w for w in report.plan.warnings)  # type: ignore[union-attr]
    assert any(ids["surrogate"] in w for w in report.plan.warnings)  # type: ignore[union-attr]
    # the scheduler is a schedule whose pending iteration came across as that job: same id,
    # waiting (BullMQ's first `every` iteration is due at once), its template's data
    schedule = await target.get_schedule(f"{prefix}:main:tick")
    assert schedule is not None and schedule.every == HOUR_MS / 1000
    iterations = [j for j in await main.getJobs() if str(j.id).startswith("repeat:tick:")]
    pending = [i for i in expected_order if i.startswith("repeat:tick:")]
    assert [j.id for j in iterations] == pending and len(pending) == 1
    assert iterations[0].data == {"t": 1} and await iterations[0].getState() == "waiting"
    assert schedule.pending_job_id == iterations[0].engine_id
    # dedup keys hold in the engine: simple (in flight) and throttle (absolute expiry)
    assert (await main.add("dedup", {}, {"deduplication": {"id": "dd"}})).id == ids["dedup"]
    again = await main.add("throttle", {}, {"deduplication": {"id": "th", "ttl": 1000}})
    assert again.id == ids["throttle"]
    # queue meta, and new automatic ids above every migrated numeric id
    paused = bullmq_compat.Queue("paused", conn)
    assert await paused.isPaused()
    fresh = await main.add("fresh", {})
    assert int(fresh.id) > max(int(i) for i in ids.values() if i.isdigit())
    await fresh.remove()
    # BullMQ's processing order, by the facade's worker (scheduler ticks set aside)
    seen: list[str] = []
    done = asyncio.Event()
    wanted = {i for i in expected_order}

    async def process(job: Any, token: Any) -> None:
        if job.id in wanted:
            seen.append(job.id)
            if len(seen) == len(wanted):
                done.set()

    worker = bullmq_compat.Worker("main", process, {**conn, "concurrency": 1})
    await asyncio.wait_for(done.wait(), 30)
    await worker.close()
    assert seen == expected_order
    # a second run writes nothing new
    second = await migrate(options(redis_url, pg_dsn, target, prefix, include_history=True))
    assert second.written == 0 and second.already_done > 0, second.render()
    await main.close()
    await paused.close()


async def final_state(jobs: JobQueue) -> set[tuple[str, str | None, str, Any]]:
    rows = await jobs.list_jobs(limit=1000)
    return {(r.queue, r.job_key, r.status.value, json.dumps(r.payload, sort_keys=True))
            for r in rows}  # fmt: skip


async def test_every_failed_attempts_stack_trace_comes_across(
    redis_url: str, pg_dsn: str, target: JobQueue, prefix: str
) -> None:
    """A job BullMQ retried twice before it completed keeps both stack traces, in order."""
    conn = {"connection": redis_url, "prefix": prefix}
    queue = bullmq.Queue("twice", conn)
    added = await queue.add("flaky", {"n": 1}, {"attempts": 3})

    async def process(job: Any, token: Any) -> str:
        if job.attemptsMade < 2:
            raise Exception(f"attempt {job.attemptsMade} failed")
        return "third time"

    await run_bullmq_worker(redis_url, prefix, "twice", process, 3)  # 2 failures, 1 success
    original = await queue.getJob(added.id)
    assert original is not None and len(original.stacktrace) == 2
    await queue.close()
    report = await migrate(options(redis_url, pg_dsn, target, prefix, include_history=True))
    assert report.exit_code is ExitCode.OK, report.render()
    migrated = await bullmq_compat.Queue("twice", {"connection": target, "prefix": prefix}).getJob(
        added.id
    )
    assert migrated is not None and migrated.stacktrace == original.stacktrace
    assert "attempt 0 failed" in migrated.stacktrace[0]
    assert "attempt 1 failed" in migrated.stacktrace[1]


async def test_a_run_killed_between_batches_resumes_to_the_same_end_state(
    redis_url: str, pg_dsn: str, target: JobQueue, prefix: str, pool: Any
) -> None:
    await seed(redis_url, prefix)

    class Killed(Exception):
        pass

    def kill_after_two(written: int) -> None:
        if written >= 4:
            raise Killed

    with pytest.raises(Killed):
        await migrate(options(redis_url, pg_dsn, target, prefix, include_history=True,
                              batch_size=2, after_batch=kill_after_two))  # fmt: skip
    partial = await final_state(target)
    assert 0 < len(partial) < 20
    resumed = await migrate(options(redis_url, pg_dsn, target, prefix, include_history=True,
                                    batch_size=2))  # fmt: skip
    assert resumed.exit_code is ExitCode.OK, resumed.render()
    assert resumed.already_done > 0
    # an uninterrupted run into a fresh schema ends in the same state
    other = await JobQueue.connect(pool=pool, schema=f"{target.schema}_b")
    await other.migrate()
    try:
        straight = await migrate(options(redis_url, pg_dsn, other, prefix, include_history=True))
        assert straight.exit_code is ExitCode.OK
        assert await final_state(other) == await final_state(target)
    finally:
        await pool.execute(f"DROP SCHEMA IF EXISTS {other.schema} CASCADE")


async def test_a_batch_at_a_time_holds_one_page_and_its_flow_trees_only(
    redis_url: str,
    pg_dsn: str,
    target: JobQueue,
    prefix: str,
    pool: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Memory is bounded by the batch size, not the queue size: each time a batch is handed
    to be written, the jobs held are at most a page plus the flow trees it reached (largest
    here: a parent and its two children). Trees that straddle pages and queues still come
    across whole: the end state equals a run with batches larger than every queue."""
    await seed(redis_url, prefix)
    held: list[int] = []
    forget = Transformer.forget

    def counting_forget(self: Transformer) -> None:
        held.append(len(self.cache))
        forget(self)

    monkeypatch.setattr(Transformer, "forget", counting_forget)
    report = await migrate(options(redis_url, pg_dsn, target, prefix, include_history=True,
                                   batch_size=1))  # fmt: skip
    assert report.exit_code is ExitCode.OK, report.render()
    assert len(held) >= report.written // 3 and max(held) <= 1 + 3, held
    monkeypatch.undo()
    other = await JobQueue.connect(pool=pool, schema=f"{target.schema}_w")
    await other.migrate()
    try:
        whole = await migrate(options(redis_url, pg_dsn, other, prefix, include_history=True,
                                      batch_size=10_000))  # fmt: skip
        assert whole.exit_code is ExitCode.OK
        assert await final_state(other) == await final_state(target)
    finally:
        await pool.execute(f"DROP SCHEMA IF EXISTS {other.schema} CASCADE")


async def test_verification_finds_a_changed_payload_and_a_removed_job(
    redis_url: str, pg_dsn: str, target: JobQueue, prefix: str
) -> None:
    """PostgreSQL compares each stored payload with BullMQ's own text: a job whose payload
    changed after the run, or whose row is gone, fails a later --verify-only run by name."""
    ids = await seed(redis_url, prefix)
    assert (await migrate(options(redis_url, pg_dsn, target, prefix))).exit_code is ExitCode.OK
    main = engine_queue(prefix, "main")
    await target.pool.execute(
        f"UPDATE {target.schema}.jobs SET payload = '{{\"name\": \"w9\"}}' "
        "WHERE queue = $1 AND job_key = $2",
        main, ids["w1"],
    )  # fmt: skip
    await target.pool.execute(
        f"DELETE FROM {target.schema}.jobs WHERE queue = $1 AND job_key = $2", main, ids["w2"]
    )
    check = await migrate(options(redis_url, pg_dsn, target, prefix, verify_only=True))
    assert check.written == 0 and check.verified is False
    assert check.exit_code is ExitCode.INCOMPLETE
    assert sorted(check.problems) == sorted([
        f"{prefix}:main {ids['w1']}: data differs from Redis",
        f"{prefix}:main {ids['w2']}: not found through the facade",
    ])  # fmt: skip


async def test_a_job_added_during_the_run_is_detected(
    redis_url: str, pg_dsn: str, target: JobQueue, prefix: str
) -> None:
    queue = bullmq.Queue("main", {"connection": redis_url, "prefix": prefix})
    for n in range(4):
        await queue.add("j", {"n": n})

    async def producer_still_writing(written: int) -> None:
        if written == 2:
            await queue.add("late", {"n": 99})

    report = await migrate(options(redis_url, pg_dsn, target, prefix, batch_size=2,
                                   allow_connected=True, after_batch=producer_still_writing))  # fmt: skip
    assert report.exit_code is ExitCode.CHANGED, report.render()
    assert report.changed and f"{prefix}:main" in report.changed[0]
    rerun = await migrate(options(redis_url, pg_dsn, target, prefix, allow_connected=True))
    await queue.close()
    assert rerun.exit_code is ExitCode.OK, rerun.render()
    assert rerun.written == 1  # only the late job
    migrated = bullmq_compat.Queue("main", {"connection": target, "prefix": prefix})
    assert await migrated.getWaitingCount() == 5
    await migrated.close()


async def test_a_live_lock_is_not_migrated_and_clients_are_refused(
    redis_url: str, pg_dsn: str, target: JobQueue, prefix: str
) -> None:
    conn = {"connection": redis_url, "prefix": prefix}
    queue = bullmq.Queue("main", conn)
    busy = await queue.add("busy", {})
    await queue.add("idle", {}, {"delay": HOUR_MS})
    started, release = asyncio.Event(), asyncio.Event()

    async def process(job: Any, token: Any) -> None:
        started.set()
        await release.wait()

    worker = bullmq.Worker("main", process, conn)
    await asyncio.wait_for(started.wait(), 30)
    refused = await migrate(options(redis_url, pg_dsn, target, prefix))
    assert refused.exit_code is ExitCode.REFUSED and "still connected" in (refused.refused or "")
    assert await target.list_jobs() == []
    report = await migrate(options(redis_url, pg_dsn, target, prefix, allow_connected=True))
    release.set()
    await worker.close()
    await queue.close()
    assert report.exit_code is ExitCode.INCOMPLETE, report.render()
    skipped = [s for s in report.plan.skipped if s.job_id == busy.id]  # type: ignore[union-attr]
    assert skipped and "live lock" in skipped[0].reason
    assert [r.job_key for r in await target.list_jobs()] == [
        (await bullmq_compat.Queue("main", {"connection": target, "prefix": prefix}).getDelayed())[
            0
        ].id
    ]


async def test_a_legacy_layout_is_refused(
    redis_url: str, pg_dsn: str, target: JobQueue, prefix: str
) -> None:
    client = aioredis.from_url(redis_url)
    await client.hset(f"{prefix}:old:meta", mapping={"opts.maxLenEvents": "10000"})
    await client.lpush(f"{prefix}:old:wait", "0:0", "1")
    await client.hset(f"{prefix}:old:1", mapping={"name": "x", "data": "{}", "opts": "{}"})
    await client.aclose()
    report = await migrate(options(redis_url, pg_dsn, target, prefix))
    assert report.exit_code is ExitCode.REFUSED
    assert "v4 markers" in (report.refused or "")
    assert await target.list_jobs() == []


async def test_dry_run_writes_nothing_and_the_cli_reports_the_plan(
    redis_url: str, pg_dsn: str, target: JobQueue, prefix: str
) -> None:
    queue = bullmq.Queue("main", {"connection": redis_url, "prefix": prefix})
    await queue.add("a", {"n": 1})
    await queue.add("b", {"n": 2}, {"priority": 3})
    await queue.close()
    report = await migrate(options(redis_url, pg_dsn, target, prefix, dry_run=True))
    assert report.exit_code is ExitCode.OK and report.written == 0
    assert report.plan is not None and report.plan.counts[f"{prefix}:main"] == {
        "waiting": 1, "prioritized": 1,
    }  # fmt: skip
    assert await target.list_jobs() == []
    cli = [sys.executable, "-m", "migration_tools", "--redis", redis_url, "--postgres", pg_dsn,
           "--schema", target.schema, "--prefix", prefix]  # fmt: skip
    dry = subprocess.run([*cli, "--dry-run"], capture_output=True, text=True, timeout=120)
    assert dry.returncode == 0, dry.stderr
    assert f"{prefix}:main: prioritized 1, waiting 1" in dry.stdout
    real = subprocess.run(cli, capture_output=True, text=True, timeout=120)
    assert real.returncode == 0, real.stdout + real.stderr
    assert "verification: passed" in real.stdout
    assert len(await target.list_jobs()) == 2
    bad = subprocess.run([*cli, "--dry-run", "--verify-only"], capture_output=True, text=True)
    assert bad.returncode == 2 and "cannot be combined" in bad.stderr


async def test_flow_failure_records_verify_only_and_delete_after_verification(
    redis_url: str, pg_dsn: str, target: JobQueue, prefix: str
) -> None:
    conn = {"connection": redis_url, "prefix": prefix}
    flows = bullmq.FlowProducer(conn)
    tree = await flows.add({
        "name": "parent", "queueName": "main", "data": {},
        "children": [
            {"name": "ok", "queueName": "kids", "data": {"v": 1}},
            {"name": "ign", "queueName": "kids", "data": {"v": 2},
             "opts": {"ignoreDependencyOnFailure": True}},
            {"name": "open", "queueName": "kids-b", "data": {"v": 3}},
        ],
    })  # fmt: skip
    await flows.close()
    parent_id = tree["job"].id
    ok_id, ign_id, open_id = (c["job"].id for c in tree["children"])

    async def kids(job: Any, token: Any) -> Any:
        if job.name == "ign":
            raise Exception("ignored failure")
        return {"ok": job.data["v"]}

    await run_bullmq_worker(redis_url, prefix, "kids", kids, 2)
    report = await migrate(options(redis_url, pg_dsn, target, prefix, queues=["main"]))
    assert report.exit_code is ExitCode.OK, report.render()
    assert any("kids-b" in n for n in report.notes)  # the rest of the tree came along
    facade = {"connection": target, "prefix": prefix}
    main = bullmq_compat.Queue("main", facade)
    parent = await main.getJob(parent_id)
    assert parent is not None and await parent.getState() == "waiting-children"
    assert await parent.getChildrenValues() == {f"{prefix}:kids:{ok_id}": {"ok": 1}}
    assert await parent.getIgnoredChildrenFailures() == {
        f"{prefix}:kids:{ign_id}": "ignored failure"
    }
    # the open child runs here now, and releases the parent
    finished = asyncio.Event()
    child_worker = bullmq_compat.Worker("kids-b", kids, facade)
    parent_worker = bullmq_compat.Worker(
        "main", lambda job, token: asyncio.sleep(0, "done"), facade
    )
    parent_worker.on("completed", lambda job, result: finished.set())
    await asyncio.wait_for(finished.wait(), 30)
    await child_worker.close()
    await parent_worker.close()
    assert await (await main.getJob(parent_id)).getState() == "completed"  # type: ignore[union-attr]
    assert (
        await (await bullmq_compat.Queue("kids-b", facade).getJob(open_id)).getState()
        == "completed"
    )  # type: ignore[union-attr]
    # verify-only reads, writes nothing; delete-from-redis removes the queues with BullMQ's client
    check = await migrate(options(redis_url, pg_dsn, target, prefix, verify_only=True,
                                  include_history=True))  # fmt: skip
    assert check.written == 0 and check.verified is True, check.render()
    gone = await migrate(options(redis_url, pg_dsn, target, prefix, delete_from_redis=True))
    assert gone.exit_code is ExitCode.OK and len(gone.deleted) == 3, gone.render()
    client = aioredis.from_url(redis_url)
    assert not await client.exists(f"{prefix}:kids-b:{open_id}", f"{prefix}:kids:{ok_id}")
    assert await client.llen(f"{prefix}:kids-b:wait") == 0
    await client.aclose()
    await main.close()


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "migration_tools", *args], capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("redis", "database", "named"),
    [
        ("redis://127.0.0.1:1/0", None, "cannot reach Redis"),
        (None, "no_such_database_here", "cannot use PostgreSQL (InvalidCatalogNameError"),
    ],
    ids=["redis-refuses", "unknown-database"],
)
def test_the_cli_names_what_it_cannot_reach_in_one_line_and_exits_2(
    pg_dsn: str, redis_url: str, jobs: JobQueue, redis: str | None, database: str | None,
    named: str,
) -> None:  # fmt: skip
    dsn = pg_dsn if database is None else dsn_with(pg_dsn, database=database)
    result = run_cli("--redis", redis or redis_url, "--postgres", dsn, "--schema", jobs.schema)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and named in lines[0] and "nothing was" in lines[0], lines
    assert "rerun" not in lines[0] and "Traceback" not in result.stderr


async def test_the_cli_reports_as_json_and_summarises_skipped_jobs(
    redis_url: str, pg_dsn: str, target: JobQueue, prefix: str
) -> None:
    queue = bullmq.Queue("main", {"connection": redis_url, "prefix": prefix})
    for n in range(7):
        job = await queue.add("done", {"n": n})
        client = aioredis.from_url(redis_url)
        # a finished job (history is left out unless asked for)
        await client.lrem(f"{prefix}:main:wait", 0, job.id)
        await client.zadd(f"{prefix}:main:completed", {job.id: n})
        await client.aclose()
    await queue.add("todo", {})
    await queue.close()
    base = ["--redis", redis_url, "--postgres", pg_dsn, "--schema", target.schema,
            "--prefix", prefix, "--dry-run"]  # fmt: skip
    text = run_cli(*base)
    assert text.returncode == 0, text.stderr
    skipped = [line for line in text.stdout.splitlines() if "skipped" in line]
    assert len(skipped) == 1 and "7 completed (history not included)" in skipped[0], skipped
    report = json.loads(run_cli(*base, "--json").stdout)
    assert report["exit"] == "OK" and report["jobs"] == 1 and report["written"] == 0
    assert report["counts"] == {f"{prefix}:main": {"waiting": 1}}  # what comes across
    [group] = report["skipped"]
    assert group["count"] == 7 and group["reason"] == "completed (history not included)"


async def test_an_active_job_whose_lock_outlives_its_stopped_worker_comes_across_runnable(
    redis_url: str, pg_dsn: str, target: JobQueue, prefix: str
) -> None:
    # The worker took the job and stopped without finishing it; its lock has a minute left.
    # With no BullMQ client connected, nothing owns that lock: the job comes across waiting,
    # its attempt not counted, and the run says so and exits 0.
    conn = {"connection": redis_url, "prefix": prefix}
    queue = bullmq.Queue("main", conn)
    job = await queue.add("orphan", {"n": 1}, {"attempts": 3})
    worker = bullmq.Worker("main", None, {**conn, "autorun": False, "lockDuration": 60_000})
    taken = await worker.getNextJob("stopped-worker-token")
    assert taken is not None and taken.id == job.id
    await worker.close()
    await queue.close()
    client = aioredis.from_url(redis_url)
    assert await client.pttl(f"{prefix}:main:{job.id}:lock") > 0
    await client.aclose()
    report = await migrate(options(redis_url, pg_dsn, target, prefix))
    assert report.exit_code is ExitCode.OK, report.render()
    assert report.plan is not None and not report.plan.skipped
    assert any(job.id in w and "comes across waiting" in w for w in report.plan.warnings)
    migrated_queue = bullmq_compat.Queue("main", {"connection": target, "prefix": prefix})
    migrated = await migrated_queue.getJob(job.id)
    assert migrated is not None and await migrated.getState() == "waiting"
    assert migrated.attemptsMade == 0
    await migrated_queue.close()


async def test_an_active_job_whose_worker_died_comes_back_as_waiting(
    redis_url: str, pg_dsn: str, target: JobQueue, prefix: str
) -> None:
    conn = {"connection": redis_url, "prefix": prefix}
    queue = bullmq.Queue("main", conn)
    job = await queue.add("orphan", {"n": 1}, {"attempts": 3})
    # BullMQ's manual processing takes the job (active, locked for lockDuration) and, like a
    # worker that died, never renews the lock
    worker = bullmq.Worker("main", None, {**conn, "autorun": False, "lockDuration": 300})
    taken = await worker.getNextJob("dead-worker-token")
    assert taken is not None and taken.id == job.id
    await worker.close()
    client = aioredis.from_url(redis_url)

    async def lock_gone() -> bool:
        return await client.pttl(f"{prefix}:main:{job.id}:lock") == -2

    from tests.helpers import eventually

    await eventually(lock_gone)
    assert await client.lrange(f"{prefix}:main:active", 0, -1) == [job.id.encode()]
    await client.aclose()
    await queue.close()
    report = await migrate(options(redis_url, pg_dsn, target, prefix, allow_connected=True))
    assert report.exit_code is ExitCode.OK, report.render()
    migrated = await bullmq_compat.Queue("main", {"connection": target, "prefix": prefix}).getJob(
        job.id
    )
    assert migrated is not None and await migrated.getState() == "waiting"
    row = await target.get(migrated.engine_id)
    assert row is not None and row.metadata["bullmq"]["possibly_ran"] is True
