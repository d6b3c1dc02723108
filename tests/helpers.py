"""Test helpers: wait for a condition to a deadline instead of sleeping a guessed time."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from pgjobs.claimer import Claimer

T = TypeVar("T")


async def eventually(
    probe: Callable[[], Awaitable[T]], *, timeout: float = 20.0, interval: float = 0.01
) -> T:
    """Call ``probe`` until it returns a truthy value; fail with the last value at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = await probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s (last value: {value!r})")
        await asyncio.sleep(interval)


async def expire_lease(jobs: Any, job_id: int) -> None:
    """What a worker that stopped heartbeating looks like to the others: the job's lease is
    over."""
    await jobs.db.pool.execute(
        f"UPDATE {jobs.schema}.jobs SET locked_until = now() - interval '1 second' WHERE id = $1",
        job_id,
    )


def dsn_with(dsn: str, *, database: str | None = None, user: str | None = None) -> str:
    """``dsn`` (a postgresql:// URL) with another database or user: for tests of what a
    wrong one does, on whichever server the suite found or started."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(dsn)
    netloc = parts.netloc
    if user is not None:
        host = netloc.rsplit("@", 1)[-1]
        netloc = f"{user}@{host}"
    path = f"/{database}" if database is not None else parts.path
    return urlunsplit((parts.scheme, netloc, path, parts.query, parts.fragment))


def with_dsns(args: list[str], dsn: str) -> list[str]:
    """Command arguments with ``{database:NAME}`` / ``{user:NAME}`` replaced by ``dsn`` naming
    that database or user (parametrized CLI tests are written before the server is known)."""
    return [
        dsn_with(dsn, database=a[10:-1]) if a.startswith("{database:")
        else dsn_with(dsn, user=a[6:-1]) if a.startswith("{user:")
        else a
        for a in args
    ]  # fmt: skip


ROOT = Path(__file__).resolve().parents[1]


def spawn(args: list[str], cwd: Path) -> subprocess.Popen[str]:
    """A command of this project (``python -m ...``) as a child process, the project on its
    path, its output captured as text."""
    return subprocess.Popen(
        args, cwd=cwd, env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def stop(process: subprocess.Popen[str], *, twice: bool = False) -> str:
    """SIGTERM ``process`` (with ``twice``, SIGINT once it said it heard the first) and wait
    for it to exit; its stderr."""
    process.send_signal(signal.SIGTERM)
    if twice:
        assert process.stderr is not None
        for line in process.stderr:  # the first signal was heard: now force
            if "SIGTERM received, stopping" in line:
                break
        process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    return str(err)


def listening_claimer(
    jobs: Any, *, worker: uuid.UUID | None = None, hand_offs: bool = False, poll: float = 60.0
) -> Claimer:
    """The claimer of a worker of queue "default" and kind "x" with one slot, whose LISTEN is
    up as far as it knows (so it registers when it looks idle); with ``hand_offs``, one that
    takes hand-offs (a notification has reached it)."""
    claimer = Claimer(
        jobs.db,
        ["default"],
        ["x"],
        lease=30.0,
        claim_ahead=0,
        slots=1,
        poll_interval=poll,
        worker_id=worker or uuid.uuid4(),
    )
    claimer.listening = lambda: True
    claimer.hand_offs = claimer.notified = hand_offs
    return claimer


PER_JOB_COLUMNS = {"id", "created_at", "run_at", "lock_token", "heartbeat_at", "locked_until"}
"""Columns that differ between any two jobs, however they were enqueued."""


async def stored_row(jobs: Any, job_id: int) -> dict[str, Any]:
    """Every column of job ``job_id`` as stored (JSON columns as their text)."""
    record = await jobs.pool.fetchrow(f"SELECT * FROM {jobs.schema}.jobs WHERE id = $1", job_id)
    assert record is not None, f"no job {job_id}"
    return dict(record)


def shared_columns(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` without the columns that differ between any two jobs (PER_JOB_COLUMNS)."""
    return {k: v for k, v in row.items() if k not in PER_JOB_COLUMNS}
