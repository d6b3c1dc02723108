"""Worker crashes: four worker processes, SIGKILLed at random and restarted, over 10,000 jobs.

Every job ends completed and none is lost. Effects written inside ``ctx.completing()`` are
recorded exactly once; effects written by a plain handler are duplicated only for jobs whose
worker died between the effect and the completion, and those are counted.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sys
from collections import defaultdict
from pathlib import Path

import asyncpg
import pytest

from pgjobs import JobQueue, JobSpec, Registry
from tests.helpers import eventually
from tests.reliability.figures import Figure, record, seconds

pytestmark = [pytest.mark.reliability, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
JOBS = 10_000
WORKERS = 4


async def spawn(pg_dsn: str, schema: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        str(Path(__file__).with_name("crash_worker.py")),
        pg_dsn,
        schema,
        stdout=asyncio.subprocess.DEVNULL,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


async def test_sigkilled_workers_lose_nothing_and_fenced_effects_happen_once(
    jobs: JobQueue, registry: Registry, pg_dsn: str
) -> None:
    schema = jobs.schema
    for name in ("fenced", "plain"):  # declared here, handled in the worker processes
        registry.declare(name, input=dict[str, int], max_attempts=50)
    await jobs.db.pool.execute(
        f"CREATE TABLE {schema}.effects (seq bigserial PRIMARY KEY, job_id bigint NOT NULL,"
        " pid int NOT NULL, mode text NOT NULL)"
    )
    specs = [JobSpec("fenced" if i % 2 else "plain", {"n": i}) for i in range(JOBS)]
    await jobs.enqueue_many(specs)

    observer = await asyncpg.connect(pg_dsn)
    done_sql = f"SELECT count(*) FROM {schema}.jobs WHERE status = 'completed'"
    workers = [await spawn(pg_dsn, schema) for _ in range(WORKERS)]
    killed_at: dict[int, object] = {}  # pid -> the database clock right after the kill
    rng = random.Random(9)
    try:
        # Kill a random worker every few hundred ms until 90% are done, then let them finish.
        while await observer.fetchval(done_sql) < JOBS * 0.9:
            await asyncio.sleep(rng.uniform(0.2, 0.6))  # paces the fault injector
            slot = rng.randrange(WORKERS)
            victim = workers[slot]
            victim.send_signal(signal.SIGKILL)
            await victim.wait()
            killed_at[victim.pid] = await observer.fetchval("SELECT clock_timestamp()")
            workers[slot] = await spawn(pg_dsn, schema)

        async def all_done() -> bool:
            return bool(await observer.fetchval(done_sql) == JOBS)

        await eventually(all_done, timeout=120, interval=0.2)
        statuses = await observer.fetch(
            f"SELECT status, count(*) AS n FROM {schema}.jobs GROUP BY status"
        )
        effects = await observer.fetch(
            f"SELECT e.job_id, e.pid, e.mode, j.finished_at FROM {schema}.effects e"
            f" JOIN {schema}.jobs j ON j.id = e.job_id ORDER BY e.seq"
        )
        errors = {
            r["id"]: (r["attempts"], r["last_error"])
            for r in await observer.fetch(
                f"SELECT id, attempts, last_error FROM {schema}.jobs WHERE attempts > 1"
            )
        }
        rescued = await observer.fetchval(f"SELECT count(*) FROM {schema}.jobs WHERE attempts > 1")
    finally:
        for proc in workers:
            if proc.returncode is None:
                proc.send_signal(signal.SIGKILL)
                await proc.wait()
        await observer.close()

    assert {r["status"]: r["n"] for r in statuses} == {"completed": JOBS}
    by_job: dict[int, list[asyncpg.Record]] = defaultdict(list)
    for row in effects:
        by_job[row["job_id"]].append(row)
    assert len(by_job) == JOBS  # every job's effect is there: nothing lost
    fenced = {job: runs for job, runs in by_job.items() if runs[0]["mode"] == "fenced"}
    plain = {job: runs for job, runs in by_job.items() if runs[0]["mode"] == "plain"}
    assert len(fenced) == len(plain) == JOBS // 2
    assert all(len(runs) == 1 for runs in fenced.values())  # exactly once
    duplicated = {job: runs for job, runs in plain.items() if len(runs) > 1}
    recoveries: list[float] = []
    for runs in duplicated.values():
        # Every run but the last was cut short by a kill: its worker is one the driver killed.
        assert all(run["pid"] in killed_at for run in runs[:-1]), (
            runs,
            errors.get(runs[0]["job_id"]),
            killed_at,
        )
        first_kill = killed_at[runs[0]["pid"]]
        recoveries.append((runs[-1]["finished_at"] - first_kill).total_seconds())
    assert killed_at, "the driver killed no worker"
    record(
        Figure(
            scenario="worker processes SIGKILLed (4 workers, lease 2 s)",
            faults=f"{len(killed_at)} SIGKILLs",
            jobs=JOBS,
            lost=JOBS - len(by_job),
            duplicated=(
                f"fenced effects 0 of {len(fenced):,}; plain effects "
                f"{sum(len(r) - 1 for r in duplicated.values())} of {len(plain):,} "
                f"(all on killed workers); {rescued} jobs re-run"
            ),
            recovery="kill → the re-run job completed (its lease is 2 s): " + seconds(recoveries),
        )
    )
