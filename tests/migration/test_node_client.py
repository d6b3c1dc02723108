"""The migration on queues written by BullMQ's Node client of the 5.x line (the version most
production Redis instances hold; tests/migration/node pins it): every job comes across in the
state BullMQ itself reports, and runs as BullMQ would run it."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

import bullmq_compat
from migration_tools import ExitCode, MigrationOptions, migrate
from pgjobs import JobQueue
from tests.helpers import eventually

NODE_DIR = Path(__file__).parent / "node"


def write_with_node(script: str, redis_url: str, prefix: str) -> Any:
    """Run one of node/'s writers (installing its pinned client first if needed); its last
    output line is JSON."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.fail("these tests need Node.js 18+ and npm on PATH (Debian: apt install nodejs npm)")
    if not (NODE_DIR / "node_modules" / "bullmq").is_dir():
        subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=NODE_DIR,
            check=True,
            timeout=600,
        )
    done = subprocess.run(
        ["node", script, redis_url, prefix],
        cwd=NODE_DIR,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


async def test_child_failure_options_leave_each_parent_as_bullmq_holds_it(
    redis_url: str, pg_dsn: str, jobs: JobQueue, prefix: str
) -> None:
    # One flow per child-failure option, each with a child that failed and one still waiting.
    states = write_with_node("write_child_failures.mjs", redis_url, prefix)
    report = await migrate(
        MigrationOptions(
            redis_url=redis_url, postgres_dsn=pg_dsn, schema=jobs.schema, prefixes=[prefix]
        )
    )
    assert report.exit_code is ExitCode.OK, report.render()
    queues = {
        name: bullmq_compat.Queue(name, {"connection": jobs, "prefix": prefix})
        for name in ("parents", "failing", "idle")
    }
    seen = {}
    for key, expected in states.items():
        queue_name, job_id = key.split(":", 1)
        job = await queues[queue_name].getJob(job_id)
        assert job is not None, expected["name"]
        seen[expected["name"]] = await job.getState()
    assert seen == {expected["name"]: expected["state"] for expected in states.values()}
    # And they run as BullMQ runs them: the failParentOnFailure parent fails when a worker
    # takes it (BullMQ's deferred failure) without reaching the processor; the
    # continueParentOnFailure parent runs; the others wait for their pending child.
    parents = {expected["name"]: key.split(":", 1)[1] for key, expected in states.items()}
    processed: list[str] = []

    async def process(job: Any, token: Any) -> str:
        processed.append(job.name)
        return "ran"

    worker = bullmq_compat.Worker("parents", process, {"connection": jobs, "prefix": prefix})
    parents_queue = queues["parents"]

    async def settled() -> bool:
        failing = await parents_queue.getJob(parents["parent-failParentOnFailure"])
        running = await parents_queue.getJob(parents["parent-continueParentOnFailure"])
        return (
            failing is not None
            and running is not None
            and await failing.getState() == "failed"
            and await running.getState() == "completed"
        )

    await eventually(settled)
    await worker.close()
    assert processed == ["parent-continueParentOnFailure"]
    failed = await parents_queue.getJob(parents["parent-failParentOnFailure"])
    failing_child = next(k for k, v in states.items() if v["name"] == "failing-failParentOnFailure")
    assert failed is not None and failed.failedReason == f"child {prefix}:{failing_child} failed"
    for option in ("none", "ignoreDependencyOnFailure", "removeDependencyOnFailure"):
        job = await parents_queue.getJob(parents[f"parent-{option}"])
        assert job is not None and await job.getState() == "waiting-children", option
    for queue in queues.values():
        await queue.close()


async def test_paused_queues_schedulers_and_dedup_keys_of_the_5x_layouts(
    redis_url: str, pg_dsn: str, jobs: JobQueue, prefix: str
) -> None:
    """The layouts 5.x keeps its own way: a paused queue (its jobs stay waiting and
    prioritized, in order), job schedulers with their pending iterations, and deduplication
    keys, each read back through the facade as BullMQ reported it before the migration."""
    written = write_with_node("write_layouts.mjs", redis_url, prefix)
    report = await migrate(
        MigrationOptions(
            redis_url=redis_url, postgres_dsn=pg_dsn, schema=jobs.schema, prefixes=[prefix]
        )
    )
    assert report.exit_code is ExitCode.OK, report.render()

    def queue(name: str) -> bullmq_compat.Queue:
        return bullmq_compat.Queue(name, {"connection": jobs, "prefix": prefix})

    held = queue("held")
    assert await held.isPaused() is written["held"]["paused"] is True
    for job_id, expected in written["held"]["jobs"].items():
        job = await held.getJob(job_id)
        assert job is not None and job.name == expected["name"]
        assert await job.getState() == expected["state"], expected["name"]
    processed: list[str] = []

    async def process(job: Any, token: Any) -> None:
        processed.append(job.name)

    worker = bullmq_compat.Worker("held", process, {"connection": jobs, "prefix": prefix})
    await held.resume()  # BullMQ's order: the waiting list first, then by priority
    await eventually(lambda: _count(processed, 3))
    await worker.close()
    assert processed == ["first", "second", "urgent"]

    ticks = queue("ticks")
    schedulers = {s["key"]: s for s in await ticks.getJobSchedulers(0, -1, True)}
    assert set(schedulers) == set(written["ticks"]["schedulers"])
    for key, expected in written["ticks"]["schedulers"].items():
        assert schedulers[key]["next"] == expected["next"], key
        assert schedulers[key].get("every") == expected["every"], key
        assert schedulers[key].get("pattern") == expected["pattern"], key
    for job_id, expected in written["ticks"]["iterations"].items():
        job = await ticks.getJob(job_id)
        assert job is not None, job_id
        assert (job.name, job.data) == (expected["name"], expected["data"])
        assert await job.getState() == expected["state"], job_id

    dedup = queue("dedup")
    for key, expected in written["dedup"].items():
        assert await dedup.getDeduplicationJobId(key) == expected["holder"], key
    duplicate = await dedup.add("again", {"n": 9}, {"deduplication": {"id": "simple-key"}})
    assert duplicate.id == written["dedup"]["simple-key"]["id"]  # the key is still held
    for q in (held, ticks, dedup):
        await q.close()


async def _count(items: list[str], n: int) -> bool:
    return len(items) >= n
