"""The live move (migration_tools/live.py) of flows and edge cases, with BullMQ running on Redis.

Interleavings considered, each with its test here:
- a flow tree waiting for its children moves as one unit: the parent runs on PostgreSQL after
  its children, with their values;
- a tree with a child a BullMQ worker holds is not taken at all (no part of it moves); the
  next run, once the child completed in Redis, moves the rest with the child's result;
- a tree across two queues is taken as one unit from both;
- a queue paused in Redis: its jobs move while paused, and the queue is paused in PostgreSQL;
  a job given back while its queue is paused goes to paused;
- the application removes a job while it is quarantined: the rerun forgets its record;
- a dedup key with a TTL stays in Redis after the release, one without a TTL goes;
- a custom jobId added again in Redis after its job moved: PostgreSQL's job keeps the id, the
  report names the collision;
- jobs the Node client (BullMQ 5) added, paused queue included, move live; a Node worker on
  Redis and a facade worker on PostgreSQL run every job once across the move."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from typing import Any

import bullmq
import pytest
import redis.asyncio as aioredis

import bullmq_compat
from migration_tools import ExitCode, live, migrate
from pgjobs import JobQueue
from tests.migration.test_live_move import facade, redis_options
from tests.migration.test_migration import options
from tests.migration.test_node_client import NODE_DIR


def flow(redis_url: str, prefix: str) -> bullmq.FlowProducer:
    return bullmq.FlowProducer(redis_url, {"prefix": prefix})  # type: ignore[typeddict-item]


async def run_on_postgres(jobs: JobQueue, prefix: str, queue: str, count: int) -> list[Any]:
    """Run ``count`` jobs of ``queue`` with a facade worker; (name, children values) in order."""
    ran: list[Any] = []
    done = asyncio.Event()

    async def process(job: Any, token: str) -> Any:
        values = await job.getChildrenValues()
        ran.append((job.name, values))
        if len(ran) >= count:
            done.set()
        return job.data.get("n")

    worker = bullmq_compat.Worker(queue, process, facade(jobs, prefix))
    try:
        await asyncio.wait_for(done.wait(), 30)
    finally:
        await worker.close()
    return ran


async def test_a_waiting_flow_tree_moves_whole_and_runs_children_first(
    redis_url: str, pg_dsn: str, jobs: JobQueue, prefix: str
) -> None:
    producer = flow(redis_url, prefix)
    tree = await producer.add(
        {
            "name": "parent",
            "queueName": "main",
            "data": {},
            "children": [
                {"name": "c1", "queueName": "main", "data": {"n": 1}},
                {"name": "c2", "queueName": "main", "data": {"n": 2}},
            ],
        }
    )
    assert tree is not None
    parent_id = tree["job"].id
    queue = bullmq.Queue("main", redis_options(redis_url, prefix))
    assert await queue.getJobState(parent_id) == "waiting-children"
    report = await migrate(options(redis_url, pg_dsn, jobs, prefix, live=True))
    assert report.exit_code is ExitCode.OK, report.render()
    assert report.written == 3, report.render()
    assert await queue.getJob(parent_id) is None
    assert await live.still_in_redis(aioredis.from_url(redis_url), f"{prefix}:main:") == {}
    ours = bullmq_compat.Queue("main", facade(jobs, prefix))
    assert await ours.getJobState(parent_id) == "waiting-children"
    ran = await run_on_postgres(jobs, prefix, "main", 3)
    assert [name for name, _ in ran][-1] == "parent"
    assert sorted(ran[-1][1].values()) == [1, 2]
    await ours.close()
    await queue.close()
    await producer.close()


async def test_a_tree_with_an_active_child_waits_and_moves_once_it_finished(
    redis_url: str, pg_dsn: str, jobs: JobQueue, prefix: str
) -> None:
    """No part of a tree moves while a BullMQ worker holds one of its children; the rerun after
    the child completed in Redis moves the parent (and the waiting child) with the completed
    child's result, history off."""
    producer = flow(redis_url, prefix)
    started, release = asyncio.Event(), asyncio.Event()

    async def hold(job: Any, token: str) -> Any:
        started.set()
        await release.wait()
        return "from redis"

    worker = bullmq.Worker("kids", hold, redis_options(redis_url, prefix))
    queue = bullmq.Queue("main", redis_options(redis_url, prefix))
    kids = bullmq.Queue("kids", redis_options(redis_url, prefix))
    try:
        tree = await producer.add(
            {
                "name": "parent",
                "queueName": "main",
                "data": {},
                "children": [{"name": "busy", "queueName": "kids", "data": {}}],
            }
        )
        assert tree is not None
        parent_id = tree["job"].id
        busy_id = tree["children"][0]["job"].id
        await asyncio.wait_for(started.wait(), 30)
        await worker.pause(True)
        late = await producer.add(
            {
                "name": "parent2",
                "queueName": "main",
                "data": {},
                "children": [{"name": "late", "queueName": "kids", "data": {"n": 5}}],
            }
        )
        assert late is not None
        report = await migrate(
            options(
                redis_url, pg_dsn, jobs, prefix, live=True, live_deadline=0.5, live_interval=0.1
            )
        )
        assert report.exit_code is ExitCode.INCOMPLETE, report.render()
        assert report.written == 2, report.render()  # the second tree, whole
        assert await queue.getJobState(parent_id) == "waiting-children"
        assert await kids.getJobState(busy_id) == "active"
        ours = bullmq_compat.Queue("main", facade(jobs, prefix))
        assert await ours.getJob(parent_id) is None

        finished = asyncio.get_running_loop().create_future()
        worker.on("completed", lambda job, *_: finished.done() or finished.set_result(job.id))
        release.set()
        assert await asyncio.wait_for(finished, 30) == busy_id
        await worker.close()
        assert await queue.getJobState(parent_id) == "waiting"
        again = await migrate(options(redis_url, pg_dsn, jobs, prefix, live=True))
        assert again.exit_code is ExitCode.OK, again.render()
        assert await queue.getJob(parent_id) is None
        assert await ours.getJobState(parent_id) == "waiting"
        assert await run_on_postgres(jobs, prefix, "kids", 1) == [("late", {})]
        values = dict(await run_on_postgres(jobs, prefix, "main", 2))
        assert list(values["parent"].values()) == ["from redis"], values
        assert list(values["parent2"].values()) == [5], values
        await ours.close()
    finally:
        release.set()
        await worker.close()
        await queue.close()
        await kids.close()
        await producer.close()


async def test_a_tree_across_two_queues_moves_as_one_unit(
    redis_url: str, pg_dsn: str, jobs: JobQueue, prefix: str
) -> None:
    producer = flow(redis_url, prefix)
    tree = await producer.add(
        {
            "name": "top",
            "queueName": "main",
            "data": {},
            "children": [{"name": "leaf", "queueName": "other", "data": {"n": 9}}],
        }
    )
    assert tree is not None
    report = await migrate(options(redis_url, pg_dsn, jobs, prefix, live=True))
    assert report.exit_code is ExitCode.OK, report.render()
    assert report.written == 2, report.render()
    redis = aioredis.from_url(redis_url)
    for name in ("main", "other"):
        assert await live.still_in_redis(redis, f"{prefix}:{name}:") == {}
    leaf = await run_on_postgres(jobs, prefix, "other", 1)
    assert leaf == [("leaf", {})]
    top = await run_on_postgres(jobs, prefix, "main", 1)
    assert [name for name, _ in top] == ["top"] and list(top[0][1].values()) == [9]
    await redis.aclose()
    await producer.close()


async def test_a_paused_queue_moves_paused(
    redis_url: str, pg_dsn: str, jobs: JobQueue, prefix: str
) -> None:
    queue = bullmq.Queue("main", redis_options(redis_url, prefix))
    await queue.pause()
    added = [await queue.add("p", {"n": n}) for n in range(2)]
    report = await migrate(options(redis_url, pg_dsn, jobs, prefix, live=True))
    assert report.exit_code is ExitCode.OK, report.render()
    assert report.written == 2, report.render()
    ours = bullmq_compat.Queue("main", facade(jobs, prefix))
    assert await ours.isPaused()
    assert [await ours.getJobState(j.id) for j in added] == ["waiting"] * 2
    assert await queue.getJob(added[0].id) is None
    await ours.close()
    await queue.close()


async def test_a_job_given_back_while_its_queue_is_paused_goes_to_paused(
    redis_url: str, prefix: str
) -> None:
    """Taken from wait, the queue paused meanwhile: given back, it waits in paused (a resume
    renames paused over wait), not in wait where a worker would take it."""
    redis = aioredis.from_url(redis_url)
    queue = bullmq.Queue("main", redis_options(redis_url, prefix))
    base = f"{prefix}:main:"
    job = await queue.add("x", {})
    assert await live.quarantine(redis, [(base, job.id, "wait")]) is None
    await queue.pause()
    await live.restore(redis, [(base, job.id)])
    assert await redis.lrange(base + "paused", 0, -1) == [job.id.encode()]
    assert await redis.llen(base + "wait") == 0
    await queue.resume()
    assert await queue.getJobState(job.id) == "waiting"
    await queue.close()
    await redis.aclose()


async def test_a_job_removed_while_quarantined_is_forgotten(
    redis_url: str, pg_dsn: str, jobs: JobQueue, prefix: str
) -> None:
    redis = aioredis.from_url(redis_url)
    queue = bullmq.Queue("main", redis_options(redis_url, prefix))
    base = f"{prefix}:main:"
    job = await queue.add("gone", {})
    assert await live.quarantine(redis, [(base, job.id, "wait")]) is None
    await queue.remove(job.id)  # the application removes it meanwhile
    assert await redis.exists(base + job.id) == 0
    assert await redis.hexists(base + live.MOVING, job.id)
    report = await migrate(options(redis_url, pg_dsn, jobs, prefix, live=True))
    assert report.exit_code is ExitCode.OK, report.render()
    assert report.written == 0, report.render()
    assert await redis.hlen(base + live.MOVING) == 0
    ours = bullmq_compat.Queue("main", facade(jobs, prefix))
    assert await ours.getJob(job.id) is None
    await ours.close()
    await queue.close()
    await redis.aclose()


async def test_a_dedup_key_with_a_ttl_stays_in_redis_one_without_goes(
    redis_url: str, pg_dsn: str, jobs: JobQueue, prefix: str
) -> None:
    redis = aioredis.from_url(redis_url)
    queue = bullmq.Queue("main", redis_options(redis_url, prefix))
    base = f"{prefix}:main:"
    held = await queue.add("a", {}, {"deduplication": {"id": "forever"}})
    timed = await queue.add("b", {}, {"deduplication": {"id": "timed", "ttl": 60_000}})
    assert await redis.get(base + "de:forever") == held.id.encode()
    report = await migrate(options(redis_url, pg_dsn, jobs, prefix, live=True))
    assert report.exit_code is ExitCode.OK, report.render()
    assert report.written == 2, report.render()
    assert await redis.exists(base + "de:forever") == 0
    assert await redis.get(base + "de:timed") == timed.id.encode()
    assert 0 < await redis.pttl(base + "de:timed") <= 60_000
    await queue.close()
    await redis.aclose()


async def test_a_custom_job_id_added_again_in_redis_collides_with_the_moved_job(
    redis_url: str, pg_dsn: str, jobs: JobQueue, prefix: str
) -> None:
    """A jobId moved to PostgreSQL is free in Redis again: BullMQ accepts it anew. The next run
    takes it like any other; PostgreSQL's job keeps the id (BullMQ's rule) and the report
    names the collision; the Redis copy leaves Redis."""
    queue = bullmq.Queue("main", redis_options(redis_url, prefix))
    await queue.add("first", {"n": 1}, {"jobId": "fixed"})
    first = await migrate(options(redis_url, pg_dsn, jobs, prefix, live=True))
    assert first.exit_code is ExitCode.OK and first.written == 1, first.render()
    await queue.add("second", {"n": 2}, {"jobId": "fixed"})
    assert await queue.getJobState("fixed") == "waiting"
    again = await migrate(options(redis_url, pg_dsn, jobs, prefix, live=True))
    assert again.written == 0, again.render()
    assert [line for line in again.collisions if "fixed" in line], again.render()
    assert await queue.getJob("fixed") is None
    ours = bullmq_compat.Queue("main", facade(jobs, prefix))
    kept = await ours.getJob("fixed")
    assert kept is not None and kept.data == {"n": 1}
    await ours.close()
    await queue.close()


# -- BullMQ's Node client (tests/migration/node) ---------------------------------------------


def node_ready() -> None:
    """As tests/migration/test_node_client.py: Node.js and npm required, the pinned client
    installed on first use."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.fail("these tests need Node.js 18+ and npm on PATH (Debian: apt install nodejs npm)")
    if not (NODE_DIR / "node_modules" / "bullmq").is_dir():
        subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=NODE_DIR,
            check=True,
            timeout=600,
        )


async def test_jobs_the_node_client_added_move_live(
    redis_url: str, pg_dsn: str, jobs: JobQueue, prefix: str
) -> None:
    node_ready()
    done = subprocess.run(["node", "live_client.mjs", redis_url, prefix, "add"], cwd=NODE_DIR,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    added = json.loads(done.stdout.strip().splitlines()[-1])
    report = await migrate(options(redis_url, pg_dsn, jobs, prefix, live=True))
    assert report.exit_code is ExitCode.OK, report.render()
    assert report.written == 5, report.render()
    ours = bullmq_compat.Queue("main", facade(jobs, prefix))
    held = bullmq_compat.Queue("held", facade(jobs, prefix))
    states = {kind: await ours.getJobState(added[kind])
              for kind in ("waiting", "delayed", "prioritized")}  # fmt: skip
    assert states == {"waiting": "waiting", "delayed": "delayed", "prioritized": "prioritized"}
    assert await held.isPaused() and not await ours.isPaused()
    assert [await held.getJobState(i) for i in added["held"]] == ["waiting"] * 2
    redis = aioredis.from_url(redis_url)
    for name in ("main", "held"):
        assert await live.still_in_redis(redis, f"{prefix}:{name}:") == {}
    await redis.aclose()
    await ours.close()
    await held.close()


async def test_a_node_worker_and_a_facade_worker_run_every_job_once_across_the_move(
    redis_url: str, pg_dsn: str, jobs: JobQueue, prefix: str
) -> None:
    node_ready()
    total = 200
    node = await asyncio.create_subprocess_exec(
        "node", "live_client.mjs", redis_url, prefix, "busy", str(total),
        cwd=NODE_DIR, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert node.stdin is not None and node.stdout is not None
    on_postgres: list[int] = []

    async def process(job: Any, token: str) -> None:
        on_postgres.append(job.data["n"])

    pg_worker = bullmq_compat.Worker("main", process, facade(jobs, prefix))
    try:
        line = await asyncio.wait_for(node.stdout.readline(), 60)
        assert line.strip() == b"started"
        moving = asyncio.ensure_future(
            migrate(
                options(
                    redis_url,
                    pg_dsn,
                    jobs,
                    prefix,
                    live=True,
                    live_interval=0.2,
                    live_quiet=1.5,
                    live_deadline=60,
                )
            )
        )
        line = await asyncio.wait_for(node.stdout.readline(), 60)
        assert line.strip() == b"produced"
        report = await asyncio.wait_for(moving, 90)
        assert report.exit_code is ExitCode.OK, report.render()
        node.stdin.close()
        out, _ = await asyncio.wait_for(node.communicate(), 60)
        on_redis = json.loads(out.strip().splitlines()[-1])

        async def all_ran() -> None:
            while len(on_postgres) + len(on_redis) < total:
                await asyncio.sleep(0.05)

        await asyncio.wait_for(all_ran(), 60)
    finally:
        if node.returncode is None:
            node.kill()
            await node.wait()
        await pg_worker.close()
    assert sorted(on_postgres + on_redis) == list(range(total)), "every job once"
    assert on_postgres and on_redis  # both were busy
    counts = await live.still_in_redis(aioredis.from_url(redis_url), f"{prefix}:main:")
    assert set(counts) <= {"completed", "failed"}, counts
