"""Live move faults (issue 41's acceptance test): BullMQ producers (Python and Node) and workers keep adding and
processing on Redis, with a job scheduler firing every 300 ms, while facade workers process on
PostgreSQL and the live migration CLI is SIGKILLed at random points and rerun until it exits 0
after the producers stopped. Every added job runs exactly once (an extra run only for a job
BullMQ itself reported stalled), none is left unfinished in either store, and no scheduler slot
fires twice."""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import asyncpg
import bullmq
import pytest
import redis.asyncio as aioredis

import bullmq_compat
from migration_tools import live
from pgjobs import JobQueue
from tests.migration.test_node_client import NODE_DIR
from tests.reliability.figures import Figure, record, seconds

pytestmark = [pytest.mark.reliability, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
PRODUCERS = 2
PER_PRODUCER = 400
NODE_JOBS = 200
KILLS = 5
QUEUE = "live"

# BullMQ's Node client (tests/migration/node's pinned 5.x) as a third producer, same mix.
NODE_PRODUCER = """
import { Queue } from 'bullmq';
const [url, prefix, queue, first, count] = process.argv.slice(1);
const u = new URL(url);
const q = new Queue(queue, { prefix, connection: {
  host: u.hostname, port: Number(u.port || 6379), db: Number(u.pathname.slice(1) || 0) } });
for (let i = 0; i < Number(count); i++) {
  const n = Number(first) + i;
  const opts = n % 7 === 0 ? { delay: 300 } : n % 5 === 0 ? { priority: 1 + n % 3 } : {};
  await q.add('job', { n }, opts);
  if (i % 4 === 0) await new Promise((r) => setTimeout(r, 50));
}
await q.close();
"""


def node_ready() -> None:
    """As tests/migration/test_node_client.py: Node.js is required, its client installed once."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.fail("these tests need Node.js 18+ and npm on PATH (Debian: apt install nodejs npm)")
    if not (NODE_DIR / "node_modules" / "bullmq").is_dir():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                       cwd=NODE_DIR, check=True, timeout=600)  # fmt: skip


def cli(redis_url: str, pg_dsn: str, schema: str, prefix: str) -> list[str]:
    return [sys.executable, "-m", "migration_tools", "--redis", redis_url, "--postgres", pg_dsn,
            "--schema", schema, "--prefix", prefix, "--live", "--interval", "0.2",
            "--quiet-for", "1.5", "--deadline", "40"]  # fmt: skip


async def test_a_live_move_killed_at_random_points_runs_every_job_once(
    redis_url: str, pg_dsn: str, jobs: JobQueue, pool: asyncpg.Pool, prefix: str
) -> None:
    rng = random.Random(41)  # the kill points only, so a run is reproducible
    conn = {"connection": redis_url, "prefix": prefix}
    effects_key = f"{prefix}:effects"
    effects = aioredis.from_url(redis_url, decode_responses=True)
    stalled: set[str] = set()

    def processor(store: str) -> Any:
        async def process(job: Any, token: str) -> None:
            # The effect: (store, what ran) in a Redis list, outside both queues.
            if job.name == "tick":
                what = f"tick {job.id.rsplit(':', 1)[1]}"
            else:
                what = f"{job.data['n']} {job.id}"
            await effects.rpush(effects_key, f"{store} {what}")
            await asyncio.sleep(0.02)  # short: far inside BullMQ's default 30 s lock

        return process

    producer_queues = [bullmq.Queue(QUEUE, conn) for _ in range(PRODUCERS)]
    await producer_queues[0].upsertJobScheduler("tick", {"every": 300}, "tick", {})
    redis_workers = [
        bullmq.Worker(QUEUE, processor("redis"), {**conn, "concurrency": 1}) for _ in range(2)
    ]
    for worker in redis_workers:
        worker.on("stalled", lambda job_id, *_: stalled.add(str(job_id)))
    facade: dict[str, Any] = {"connection": jobs, "prefix": prefix, "concurrency": 4}
    pg_workers = [bullmq_compat.Worker(QUEUE, processor("postgres"), facade) for _ in range(2)]

    async def produce(queue: bullmq.Queue, first: int) -> None:
        for i in range(PER_PRODUCER):
            n = first + i
            opts: dict[str, Any] = {}
            if n % 7 == 0:
                opts = {"delay": (100, 300, 800)[n % 3]}
            elif n % 5 == 0:
                opts = {"priority": 1 + n % 3}
            await queue.add("job", {"n": n}, opts)
            if i % 4 == 0:
                await asyncio.sleep(0.05)

    async def produce_with_node(first: int) -> None:
        proc = await asyncio.create_subprocess_exec(
            "node", "--input-type=module", "-e", NODE_PRODUCER, redis_url, prefix, QUEUE,
            str(first), str(NODE_JOBS), cwd=NODE_DIR, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        _, err = await proc.communicate()
        assert proc.returncode == 0, err.decode()

    node_ready()
    total = PRODUCERS * PER_PRODUCER + NODE_JOBS
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    kills: list[float] = []
    runs = 0
    try:
        producing = asyncio.gather(
            *(produce(q, k * PER_PRODUCER) for k, q in enumerate(producer_queues)),
            produce_with_node(PRODUCERS * PER_PRODUCER),
        )
        await asyncio.sleep(0.3)
        started = time.monotonic()
        while True:
            runs += 1
            assert runs <= 30, "the live move never finished"
            after_producers = producing.done()
            proc = await asyncio.create_subprocess_exec(
                *cli(redis_url, pg_dsn, jobs.schema, prefix), env=env,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            # Killed anywhere from interpreter start-up to the middle of its passes.
            delay = rng.uniform(0.3, 2.0) if len(kills) < KILLS else None
            try:
                out, err = await asyncio.wait_for(proc.communicate(), delay)
            except TimeoutError:
                proc.send_signal(signal.SIGKILL)
                await proc.wait()
                kills.append(delay or 0.0)
                continue
            assert proc.returncode == 0, out.decode() + err.decode()
            if after_producers and len(kills) >= KILLS:
                break  # a whole run after the producers stopped: Redis holds nothing unfinished
        moving_seconds = time.monotonic() - started
        await producing

        async def all_ran() -> None:
            while True:
                done = {e.split()[1] for e in await effects.lrange(effects_key, 0, -1)}
                if {str(n) for n in range(total)} <= done:
                    return
                await asyncio.sleep(0.1)

        await asyncio.wait_for(all_ran(), 30)
    finally:
        for w in (*redis_workers, *pg_workers):
            await w.close()
        for q in producer_queues:
            await q.close()

    ran = [e.split() for e in await effects.lrange(effects_key, 0, -1)]
    runs_of = Counter(e[1] for e in ran if e[1] != "tick")
    assert set(runs_of) == {str(n) for n in range(total)}, "a job never ran"
    # A job ran twice only if BullMQ itself reported it stalled (its Redis lock expired).
    repeated = {n: c for n, c in runs_of.items() if c > 1}
    unexplained = {
        n: [e for e in ran if e[1] == n]
        for n in repeated
        if not any(e[2] in stalled for e in ran if e[1] == n)
    }
    assert not unexplained, (unexplained, stalled)
    assert {e[0] for e in ran} == {"redis", "postgres"}, "both stores were busy"

    slots = [int(e[2]) for e in ran if e[1] == "tick"]
    assert slots, "the scheduler never fired"
    assert len(slots) == len(set(slots)), sorted(slots)  # no slot fired twice

    # Nothing unfinished left: in Redis (no container BullMQ reads, no quarantine) ...
    redis = aioredis.from_url(redis_url)
    left = await live.still_in_redis(redis, f"{prefix}:{QUEUE}:")
    assert set(left) <= {"completed", "failed"}, left
    assert await redis.zcard(f"{prefix}:{QUEUE}:repeat") == 0
    assert await redis.hlen(f"{prefix}:{QUEUE}:{live.MOVING_SCHEDULERS}") == 0
    await redis.aclose()
    # ... nor in PostgreSQL (the scheduler's next iteration aside, which waits for its slot).
    unfinished = await pool.fetch(
        f"SELECT job_key, status FROM {jobs.schema}.jobs"
        f" WHERE status IN ('pending', 'running') AND job_key NOT LIKE 'repeat:tick:%'"
    )
    assert unfinished == [], unfinished
    moved = await pool.fetchval(f"SELECT count(*) FROM {jobs.schema}.imports")
    await effects.aclose()
    assert len(kills) == KILLS
    assert moved > total // 4, moved  # the move, not BullMQ's workers, took a good part
    duplicates = sum(c - 1 for c in repeated.values())
    record(
        Figure(
            scenario="live move CLI SIGKILLed while BullMQ and facade workers run",
            faults=f"{len(kills)} SIGKILLs of the live move",
            jobs=total,
            lost=0,
            duplicated=f"{duplicates} (explained by BullMQ stalls: {len(stalled)})",
            recovery=f"{runs} runs; {moved / moving_seconds:.0f} moved/s while workers ran;"
            f" killed after {seconds(kills)}",
        )
    )
