"""The ``pgjobs`` commands as a deploy runs them: ``worker`` stops gracefully on SIGTERM
(running jobs finish, or are given back without using an attempt), a second signal forces;
outcomes are logged (JSON lines on request); ``healthcheck``; one-line errors, exit 2."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from pgjobs import JobQueue, Registry, Status
from tests.helpers import eventually, spawn, stop, with_dsns

ROOT = Path(__file__).resolve().parents[2]

APP = textwrap.dedent(
    """
    import asyncio
    from typing import Any
    from pgjobs import JobContext, Registry

    registry = Registry()

    @registry.kind("slow", input=dict, queue="deploy", max_attempts=2)
    async def slow(ctx: JobContext, data: dict) -> str:
        await asyncio.sleep(data["seconds"])
        return "slept"

    @registry.kind("broken", input=dict, queue="deploy", max_attempts=2,
                   backoff={"type": "fixed", "delay": 0})
    async def broken(ctx: JobContext, data: dict) -> None:
        raise ValueError("always broken")

    def make() -> Registry:
        return registry

    not_a_registry = 42
    """
)


@pytest.fixture
def app(tmp_path: Path) -> Path:
    (tmp_path / "deploy_app.py").write_text(APP)
    return tmp_path


def pgjobs_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "pgjobs", *args]


def environment() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def start_worker(app: Path, pg_dsn: str, schema: str, *extra: str) -> subprocess.Popen[str]:
    args = ["worker", "deploy_app:registry", "--dsn", pg_dsn, "--schema", schema, *extra]
    return spawn(pgjobs_command(*args), app)


@pytest.fixture
def deploy_kinds(registry: Registry) -> Registry:
    # the producer side only needs the kinds' names and queues
    registry.declare("slow", input=dict, queue="deploy", max_attempts=2)
    registry.declare("broken", input=dict, queue="deploy", max_attempts=2)
    return registry


async def started(jobs: JobQueue, job_id: int, worker: subprocess.Popen[str]) -> None:
    """Until the job runs; fails at once, with its stderr, if the worker process ended."""

    async def running() -> bool:
        if worker.poll() is not None:
            raise AssertionError(f"the worker exited {worker.returncode}: {worker.communicate()}")
        row = await jobs.get(job_id)
        return row is not None and row.status is Status.RUNNING

    await eventually(running)


async def test_sigterm_lets_the_running_job_finish_and_exits_0(
    app: Path, pg_dsn: str, jobs: JobQueue, deploy_kinds: Registry
) -> None:
    job = await jobs.enqueue("slow", {"seconds": 1.0})
    worker = start_worker(app, pg_dsn, jobs.schema)
    await started(jobs, job.id, worker)
    err = stop(worker)
    assert worker.returncode == 0, err
    row = await jobs.get(job.id)
    assert row is not None and row.status is Status.COMPLETED and row.attempts == 1
    assert "SIGTERM received, stopping" in err


async def test_a_job_past_the_shutdown_timeout_goes_back_without_using_an_attempt(
    app: Path, pg_dsn: str, jobs: JobQueue, deploy_kinds: Registry
) -> None:
    job = await jobs.enqueue("slow", {"seconds": 600})
    worker = start_worker(app, pg_dsn, jobs.schema, "--shutdown-timeout", "0.5")
    await started(jobs, job.id, worker)
    err = stop(worker)
    assert worker.returncode == 0, err
    row = await jobs.get(job.id)
    assert row is not None and row.status is Status.PENDING and row.attempts == 0


async def test_a_second_signal_gives_running_jobs_back_at_once_and_exits_1(
    app: Path, pg_dsn: str, jobs: JobQueue, deploy_kinds: Registry
) -> None:
    job = await jobs.enqueue("slow", {"seconds": 600})
    worker = start_worker(app, pg_dsn, jobs.schema, "--shutdown-timeout", "600")
    await started(jobs, job.id, worker)
    err = stop(worker, twice=True)
    assert worker.returncode == 1, err
    row = await jobs.get(job.id)
    assert row is not None and row.status is Status.PENDING and row.attempts == 0


async def test_failed_attempts_and_dead_jobs_are_logged_as_json_lines(
    app: Path, pg_dsn: str, jobs: JobQueue, deploy_kinds: Registry
) -> None:
    job = await jobs.enqueue("broken", {})
    worker = start_worker(app, pg_dsn, jobs.schema, "--log-format", "json")

    async def dead() -> bool:
        row = await jobs.get(job.id)
        return row is not None and row.status is Status.DEAD

    await eventually(dead)
    err = stop(worker)
    assert worker.returncode == 0, err
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    about_job = [line for line in lines if line.get("job_id") == job.id]
    assert [(line["level"], line["outcome"], line["attempt"]) for line in about_job] == [
        ("WARNING", "pending", 1),
        ("ERROR", "dead", 2),
    ]
    for line in about_job:
        assert line["kind"] == "broken" and line["queue"] == "deploy"
        assert line["max_attempts"] == 2 and line["error"] == "ValueError: always broken"


async def test_healthcheck_reports_database_schema_and_workers(
    pg_dsn: str, jobs: JobQueue, registry: Registry, schema_name: str
) -> None:
    def healthcheck(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            pgjobs_command("healthcheck", "--dsn", pg_dsn, *extra, "--json"),
            env=environment(), capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    idle = healthcheck("--schema", schema_name)
    assert idle.returncode == 1
    assert json.loads(idle.stdout)["failed"] == ["workers"]
    assert healthcheck("--schema", schema_name, "--min-workers", "0").returncode == 0
    missing = healthcheck("--schema", "no_such_schema_here")
    assert missing.returncode == 1 and json.loads(missing.stdout)["failed"] == ["schema"]

    @registry.kind("noop", input=dict, queue="health")
    async def noop(ctx, data) -> None:
        return None

    worker = jobs.worker(queues=["health"])
    running = asyncio.create_task(worker.run())

    async def listed() -> bool:
        return bool(await jobs.list_workers("health"))

    await eventually(listed)
    healthy = healthcheck("--schema", schema_name, "--queue", "health")
    await worker.stop()
    await running
    assert healthy.returncode == 0, healthy.stdout
    assert json.loads(healthy.stdout)["checks"]["workers"].startswith("1 heartbeating")


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["migrate", "--dsn", "{database:no_such_database}"], "InvalidCatalogNameError"),
        (["migrate", "--dsn", "{user:no_such_role}"], "no_such_role"),
        (["migrate", "--dsn", "postgresql://postgres@127.0.0.1:1/postgres"], "cannot use PostgreSQL"),
        (["worker", "no_such_module:registry"], "importing 'no_such_module' failed"),
        (["worker", "deploy_app"], "expected MODULE:REGISTRY"),
        (["worker", "deploy_app:missing"], "has no attribute 'missing'"),
        (["worker", "deploy_app:not_a_registry"], "is a int, not a pgjobs.Registry"),
        (["worker", "deploy_app:registry", "--schema", "no_such_schema_here"], "pgjobs migrate"),
        (["dashboard", "--dsn", "postgresql://postgres@127.0.0.1:1/postgres"], "cannot use"),
    ],
    ids=["unknown-database", "unknown-role", "refused", "no-module", "no-colon",
         "no-attribute", "not-a-registry", "no-schema", "dashboard-refused"],
)  # fmt: skip
def test_every_command_error_is_one_line_and_exit_2(
    app: Path, pg_dsn: str, args: list[str], named: str
) -> None:
    if args[0] == "worker" and "--dsn" not in args:
        args = [*args, "--dsn", pg_dsn]
    args = with_dsns(args, pg_dsn)
    done = subprocess.run(
        pgjobs_command(*args), cwd=app, env=environment(), capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and named in lines[0] and lines[0].startswith("pgjobs "), lines


def test_version_and_a_factory_registry(app: Path, pg_dsn: str) -> None:
    shown = subprocess.run(pgjobs_command("--version"), env=environment(), capture_output=True,
                           text=True, timeout=60)  # fmt: skip
    assert shown.returncode == 0 and shown.stdout.startswith("pgjobs 0.")
    from pgjobs.process import load_registry

    sys.path.insert(0, str(app))
    try:
        assert isinstance(load_registry("deploy_app:make"), Registry)
    finally:
        sys.path.remove(str(app))
        sys.modules.pop("deploy_app", None)


async def test_jobs_and_queues_from_the_shell(
    pg_dsn: str, jobs: JobQueue, deploy_kinds: Registry, schema_name: str
) -> None:
    def pgjobs_json(*args: str) -> Any:
        done = subprocess.run(
            pgjobs_command(*args, "--dsn", pg_dsn, "--schema", schema_name, "--json"),
            env=environment(), capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode in (0, 1), done.stderr
        return done.returncode, json.loads(done.stdout)

    pending = await jobs.enqueue("slow", {"seconds": 0})
    later = await jobs.enqueue("slow", {"seconds": 0}, delay=3600)
    _, queues = pgjobs_json("queues")
    assert queues == [
        {"queue": "deploy", "paused": False,
         "counts": {**{s: 0 for s in queues[0]["counts"]}, "ready": 1, "delayed": 1}}
    ]  # fmt: skip
    _, listed = pgjobs_json("jobs", "list", "--queue", "deploy", "--sub-state", "delayed")
    assert [row["id"] for row in listed] == [later.id]
    code, cancelled = pgjobs_json("jobs", "cancel", str(pending.id), str(later.id))
    assert code == 0 and cancelled == {str(pending.id): True, str(later.id): True}
    code, retried = pgjobs_json("jobs", "retry", str(pending.id), "999999")
    assert code == 1 and retried == {str(pending.id): True, "999999": False}
    row = await jobs.get(pending.id)
    assert row is not None and row.status is Status.PENDING
