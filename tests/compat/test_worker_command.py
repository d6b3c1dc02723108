"""``pgjobs-bullmq-worker QUEUE MODULE:PROCESSOR``: a BullMQ processor run as a process, as a
deploy runs it. SIGTERM lets the running job finish and exits 0; past ``--shutdown-timeout``
the job goes back to waiting without using an attempt; a second signal gives it back at once
and exits 1; a bad target or database is one line and exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from bullmq_compat import Queue
from tests.helpers import eventually, spawn, stop

ROOT = Path(__file__).resolve().parents[2]

APP = textwrap.dedent(
    """
    import asyncio

    async def process(job, token):
        await asyncio.sleep(job.data["seconds"])
        return "slept"

    not_callable = 42
    """
)


@pytest.fixture
def app(tmp_path: Path) -> Path:
    (tmp_path / "bullmq_app.py").write_text(APP)
    return tmp_path


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "bullmq_compat.cli", *args]


def start(app: Path, pg_dsn: str, schema: str, *extra: str) -> subprocess.Popen[str]:
    args = ["deploys", "bullmq_app:process", "--dsn", pg_dsn, "--schema", schema, *extra]
    return spawn(command(*args), app)


async def active(queue: Queue, job_id: str, worker: subprocess.Popen[str]) -> None:
    async def running() -> bool:
        if worker.poll() is not None:
            raise AssertionError(f"the worker exited {worker.returncode}: {worker.communicate()}")
        return await queue.getJobState(job_id) == "active"

    await eventually(running, timeout=30)


async def test_sigterm_lets_the_running_job_finish_and_exits_0(
    app: Path, pg_dsn: str, opts: dict[str, Any]
) -> None:
    queue = Queue("deploys", opts)
    job = await queue.add("slow", {"seconds": 1.0})
    worker = start(app, pg_dsn, opts["connection"].schema)
    await active(queue, job.id, worker)
    err = stop(worker)
    assert worker.returncode == 0, err
    finished = await queue.getJob(job.id)
    assert finished is not None and await finished.getState() == "completed"
    assert finished.returnvalue == "slept" and finished.attemptsMade == 1
    assert "SIGTERM received, stopping" in err


async def test_past_the_shutdown_timeout_the_job_waits_again_with_no_attempt_used(
    app: Path, pg_dsn: str, opts: dict[str, Any]
) -> None:
    queue = Queue("deploys", opts)
    job = await queue.add("slow", {"seconds": 600})
    worker = start(app, pg_dsn, opts["connection"].schema, "--shutdown-timeout", "0.5")
    await active(queue, job.id, worker)
    err = stop(worker)
    assert worker.returncode == 0, err
    back = await queue.getJob(job.id)
    assert back is not None and await back.getState() == "waiting" and back.attemptsMade == 0


async def test_a_second_signal_gives_the_job_back_at_once_and_exits_1(
    app: Path, pg_dsn: str, opts: dict[str, Any]
) -> None:
    queue = Queue("deploys", opts)
    job = await queue.add("slow", {"seconds": 600})
    worker = start(app, pg_dsn, opts["connection"].schema, "--shutdown-timeout", "600")
    await active(queue, job.id, worker)
    err = stop(worker, twice=True)
    assert worker.returncode == 1, err
    back = await queue.getJob(job.id)
    assert back is not None and await back.getState() == "waiting" and back.attemptsMade == 0


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("bullmq_app", "expected MODULE:FUNCTION"),
        ("bullmq_app:missing", "has no attribute 'missing'"),
        ("bullmq_app:not_callable", "is not callable"),
        ("no_such_module:process", "importing 'no_such_module' failed"),
    ],
)
def test_a_bad_processor_is_one_line_and_exit_2(
    app: Path, pg_dsn: str, target: str, expected: str
) -> None:
    done = subprocess.run(
        command("deploys", target, "--dsn", pg_dsn), cwd=app,
        env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("pgjobs-bullmq-worker: ") and expected in line


def test_a_missing_schema_is_one_line_and_exit_2(app: Path, pg_dsn: str) -> None:
    done = subprocess.run(
        command("deploys", "bullmq_app:process", "--dsn", pg_dsn, "--schema", "never_made"),
        cwd=app, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert "pgjobs migrate" in line
