"""``python -m tests.bullmq_suite.run REPO [--tag TAG] [-- PYTEST ARGS]``: BullMQ's Python suite
(``python/tests`` of REPO, a clone or bare mirror of ``taskforcesh/bullmq``, at TAG) through the
facade. Prints how many of the applicable tests pass and exits 1 if any of them fails; the
excluded ones are listed in EXCLUDED with the reason. Needs PostgreSQL (found or started as by
``./run test``) and Redis on localhost (the suite flushes it between tests)."""

from __future__ import annotations

import argparse
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

from tests.helpers import dsn_with

HERE = Path(__file__).resolve().parent
RELEASE = "v6.2.0"
DATABASE = "bullmq_suite"

EXCLUDED = {
    # they read Redis keys or the Redis event stream
    "test_get_jobs_skips_missing_hash_and_backfills_waiting_range": "reads Redis keys",
    "test_trim_events_manually": "reads the Redis event stream (XLEN)",
    "test_trim_events_manually_with_custom_prefix": "reads the Redis event stream (XLEN)",
    "test_obliterate_with_force_true_should_succeed_with_active_jobs": "reads Redis keys",
    "test_drain_count_added_unprocessed_jobs": "reads Redis keys",
    "test_reusable_redis": "passes a Redis client as the connection",
    # they call the real package's private helpers
    "test_worker_lazily_creates_job_scheduler": "Worker._job_scheduler",
    "test_legacy_repeatable_key_decoded": "_transform_scheduler_data",
    "test_non_legacy_key_returns_none": "_transform_scheduler_data",
    "test_get_completed_handles_empty_task_set": "worker.getCompleted",
    # the real package fails it too: it expects a quoted failedReason ('"Failed"')
    "test_process_jobs_fail": "fails on the real package as well",
}


def _database(base_dsn: str) -> str:
    import asyncio

    import asyncpg

    async def create() -> None:
        conn = await asyncpg.connect(base_dsn)
        try:
            if not await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", DATABASE):
                await conn.execute(f'CREATE DATABASE "{DATABASE}"')
        finally:
            await conn.close()

    asyncio.run(create())
    return dsn_with(base_dsn, database=DATABASE)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bullmq-suite")
    parser.add_argument("repo", help="a clone or bare mirror of taskforcesh/bullmq")
    parser.add_argument("--tag", default=RELEASE)
    parser.add_argument("pytest_args", nargs="*")
    args = parser.parse_args(argv)
    from pgjobs.devserver import find_or_start_postgres

    dsn = _database(find_or_start_postgres())
    work = Path(tempfile.mkdtemp(prefix="bullmq-suite-"))
    try:
        archive = subprocess.run(
            ["git", "-C", args.repo, "archive", args.tag, "python/tests"],
            check=True,
            capture_output=True,
        ).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(work, filter="data")
        suite = work / "python"
        shutil.copy(HERE / "fresh_schema_conftest.py", suite / "tests" / "conftest.py")
        report = work / "report.xml"
        env = {**os.environ, "PGJOBS_DSN": dsn, "PYTHONPATH": str(HERE / "shim")}
        subprocess.run(
            [sys.executable, "-m", "pytest", "tests", "-q", "-p", "no:cacheprovider",
             f"--junitxml={report}", *args.pytest_args],
            cwd=suite, env=env, check=False,
        )  # fmt: skip
        cases = ET.parse(report).getroot().iter("testcase")
        outcome: dict[tuple[str, str], str] = {}
        for case in cases:
            failed = case.find("failure") is not None or case.find("error") is not None
            skipped = case.find("skipped") is not None
            key = (case.get("classname", ""), case.get("name", ""))
            outcome[key] = "failed" if failed else "skipped" if skipped else "ok"
    finally:
        shutil.rmtree(work, ignore_errors=True)
    applicable = {key: o for key, o in outcome.items() if key[1] not in EXCLUDED}
    passed = sum(o == "ok" for o in applicable.values())
    unexpected = sorted(".".join(key) for key, o in applicable.items() if o != "ok")
    excluded_passing = sorted(
        ".".join(key) for key, o in outcome.items() if key[1] in EXCLUDED and o == "ok"
    )
    print(f"\nBullMQ {args.tag} python/tests through bullmq_compat: {len(outcome)} collected, "
          f"{passed} of {len(applicable)} applicable pass; {len(outcome) - len(applicable)} "
          "excluded (see EXCLUDED)")  # fmt: skip
    for name in unexpected:
        print(f"  FAILED (applicable): {name}")
    for name in excluded_passing:
        print(f"  passes although excluded: {name}")
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
