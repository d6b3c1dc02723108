"""Migration faults: the migration CLI SIGKILLed at random points and rerun until it finishes
ends in exactly the state of one uninterrupted run; and the CLI's bad input gets a clear
error, exit code 2, and writes nothing."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import asyncpg
import bullmq
import pytest

from pgjobs import JobQueue
from tests.helpers import with_dsns
from tests.migration.test_migration import seed
from tests.reliability.figures import Figure, record, seconds

pytestmark = [pytest.mark.reliability, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
EXTRA_PER_QUEUE = 3_000


def cli(redis_url: str, pg_dsn: str, schema: str, prefix: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "migration_tools", "--redis", redis_url, "--postgres", pg_dsn,
            "--schema", schema, "--prefix", prefix, "--include-history", "--batch-size", "100",
            *extra]  # fmt: skip


async def state(pool: asyncpg.Pool, schema: str) -> dict[str, Any]:
    """Everything the migration wrote, minus what names a row rather than describes it (engine
    ids, which differ between two schemas) and the live-lock columns (always empty here). A
    waiting job is due at the time it was imported, so its ``run_at`` differs between any two
    runs: what must match is the order in which jobs will be claimed, compared instead."""
    jobs = await pool.fetch(
        f"SELECT to_jsonb(j) - 'id' - 'flow_id' - 'lock_token' - 'heartbeat_at' - 'locked_until'"
        f" - CASE WHEN j.run_at < now() THEN 'run_at' ELSE '' END AS row FROM {schema}.jobs j"
    )
    claim_order = await pool.fetch(
        f"SELECT queue, array_agg(job_key ORDER BY priority DESC, run_at, id) AS keys"
        f" FROM {schema}.jobs WHERE status = 'pending' GROUP BY queue"
    )
    edges = await pool.fetch(
        f"SELECT p.job_key AS prerequisite, d.job_key AS dependent, e.policy, e.state,"
        f" e.failure::text FROM {schema}.job_edges e JOIN {schema}.jobs p ON p.id = e.prerequisite_id"
        f" JOIN {schema}.jobs d ON d.id = e.dependent_id"
    )
    logs = await pool.fetch(
        f"SELECT j.job_key, l.line FROM {schema}.job_logs l JOIN {schema}.jobs j ON j.id = l.job_id"
    )
    schedules = await pool.fetch(
        f"SELECT to_jsonb(s) - 'created_at' - 'updated_at' - 'pending_job_id' AS row"
        f" FROM {schema}.schedules s"
    )
    holds = await pool.fetch(
        f"SELECT h.queue, h.key, j.job_key, extract(epoch FROM h.expires_at)::float8"
        f" FROM {schema}.dedup_holds h"
        f" LEFT JOIN {schema}.jobs j ON j.id = h.job_id"
    )
    settings = await pool.fetch(
        f"SELECT queue, paused, concurrency, rate_limit FROM {schema}.queue_settings"
    )
    return {
        "jobs": sorted(r["row"] for r in jobs),
        "claim order": sorted(map(tuple, claim_order)),
        "edges": sorted(map(tuple, edges)),
        "logs": sorted(map(tuple, logs)),
        "schedules": sorted(r["row"] for r in schedules),
        "holds": sorted(map(tuple, holds)),
        "settings": sorted(map(tuple, settings)),
    }


def assert_same(got: dict[str, Any], expected: dict[str, Any]) -> None:
    """Equal, except that a ttl dedup key's absolute expiry (the read time plus Redis' remaining
    PTTL, in whole milliseconds) may differ by the rounding of two reads."""
    assert {k: v for k, v in got.items() if k != "holds"} == {
        k: v for k, v in expected.items() if k != "holds"
    }
    assert [h[:3] for h in got["holds"]] == [h[:3] for h in expected["holds"]]
    for mine, theirs in zip(got["holds"], expected["holds"], strict=True):
        assert abs(mine[3] - theirs[3]) <= 0.005, (mine, theirs)


async def test_a_migration_killed_at_random_points_ends_as_one_uninterrupted_run(
    redis_url: str,
    pg_dsn: str,
    jobs: JobQueue,
    pool: asyncpg.Pool,
    prefix: str,
) -> None:
    await seed(redis_url, prefix)
    conn = {"connection": redis_url, "prefix": prefix}
    for queue_name in ("bulk-a", "bulk-b", "bulk-c"):
        queue = bullmq.Queue(queue_name, conn)
        await queue.addBulk([{"name": f"j{i}", "data": {"i": i, "q": queue_name},
                              "opts": {"priority": i % 4, "attempts": 2}}
                             for i in range(EXTRA_PER_QUEUE)])  # fmt: skip
        await queue.close()
    other = await JobQueue.connect(pool=pool, schema=f"{jobs.schema}_straight")
    await other.migrate()
    rng = random.Random(11)
    started = time.monotonic()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    kills: list[float] = []
    try:
        straight = subprocess.run(cli(redis_url, pg_dsn, other.schema, prefix), env=env,
                                  capture_output=True, text=True, timeout=300)  # fmt: skip
        assert straight.returncode == 0, straight.stdout + straight.stderr
        duration = time.monotonic() - started
        expected = await state(pool, other.schema)
        assert len(expected["jobs"]) > 3 * EXTRA_PER_QUEUE

        runs = 0
        while True:
            runs += 1
            assert runs <= 40, "the migration never finished between kills"
            proc = await asyncio.create_subprocess_exec(
                *cli(redis_url, pg_dsn, jobs.schema, prefix), env=env,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            # Kill anywhere from interpreter start-up to the verification, eight times.
            delay = rng.uniform(0.1, 0.7) * duration if len(kills) < 8 else None
            try:
                out, err = await asyncio.wait_for(proc.communicate(), delay)
            except TimeoutError:
                proc.send_signal(signal.SIGKILL)
                await proc.wait()
                kills.append(delay or 0.0)
                continue
            assert proc.returncode == 0, out.decode() + err.decode()
            break
        assert "verification: passed" in out.decode()
        assert_same(await state(pool, jobs.schema), expected)
        again = subprocess.run(cli(redis_url, pg_dsn, jobs.schema, prefix), env=env,
                               capture_output=True, text=True, timeout=300)  # fmt: skip
        assert again.returncode == 0
        assert_same(await state(pool, jobs.schema), expected)
    finally:
        await pool.execute(f"DROP SCHEMA IF EXISTS {other.schema} CASCADE")
    assert kills, "no run was killed"
    record(
        Figure(
            scenario="migration CLI SIGKILLed at random points, rerun until done",
            faults=f"{len(kills)} SIGKILLs",
            jobs=len(expected["jobs"]),
            lost=0,
            duplicated="0 (state identical to an uninterrupted run)",
            recovery=f"{runs} runs in all; killed after {seconds(kills)} of running",
        )
    )


BAD_ARGUMENTS = [
    (["--batch-size", "0"], "--batch-size", 2),
    (["--batch-size", "many"], "--batch-size", 2),
    (["--wait-active", "-1"], "--wait-active", 2),
    (["--wait-active", "nan"], "--wait-active", 2),
    (["--prefix", ""], "--prefix", 2),
    (["--queue", "a:b"], "--queue", 2),
    (["--queue", "'; DROP TABLE jobs; --"], "no BullMQ queue found", 2),  # data, not SQL
    (["--redis", "not-a-url"], "--redis", 2),
    (["--postgres", "garbage"], "--postgres", 2),
    (["--schema", "x; DROP SCHEMA public"], "invalid schema name", 2),
    (["--schema", "s" * 60], "invalid schema name", 2),
    (["--schema", "missing_schema"], "not installed", 2),
    (["--dry-run", "--delete-from-redis"], "cannot be combined", 2),
    (["--postgres", "postgresql://postgres@127.0.0.1:1/postgres"], "cannot use PostgreSQL", 2),
    (["--postgres", "{database:no_such_db}"], "InvalidCatalogName", 2),
    (["--postgres", "{user:no_such_role}"], "cannot use PostgreSQL", 2),
    (["--redis", "redis://127.0.0.1:1/0"], "cannot reach Redis", 2),
]


@pytest.mark.parametrize(("extra", "named", "code"), BAD_ARGUMENTS,
                         ids=[" ".join(a)[:40] for a, _, _ in BAD_ARGUMENTS])  # fmt: skip
async def test_the_cli_names_bad_input_and_writes_nothing(
    redis_url: str,
    pg_dsn: str,
    jobs: JobQueue,
    extra: list[str],
    named: str,
    code: int,
) -> None:
    base = cli(redis_url, pg_dsn, jobs.schema, "bad")
    extra = with_dsns(extra, pg_dsn)
    # later flags win in argparse, and --prefix/--queue append: the bad value is what counts
    result = subprocess.run([*base, *extra], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == code, output
    assert named in output and "Traceback" not in output, output
    assert await jobs.list_jobs() == []
    assert await jobs.db.pool.fetchval(f"SELECT count(*) FROM {jobs.schema}.imports") == 0
