"""Fixtures of the reliability suite: a private PostgreSQL cluster a test may crash and restart
(private_postgres.py), and a JobQueue migrated on it."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from pgjobs import JobQueue, Registry
from tests.reliability.private_postgres import PrivateServer


@pytest.fixture
def private_server() -> Iterator[PrivateServer]:
    root = Path(tempfile.mkdtemp(prefix="pgjobs-private-"))
    server = PrivateServer(root)
    server.start()
    try:
        yield server
    finally:
        try:
            with contextlib.suppress(subprocess.CalledProcessError):  # a test may leave it down
                server.stop("immediate")
        finally:
            shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
async def private_jobs(private_server: PrivateServer) -> AsyncIterator[JobQueue]:
    registry = Registry()
    jobs = await JobQueue.connect(private_server.dsn, schema="faults", registry=registry)
    await jobs.migrate()
    try:
        yield jobs
    finally:
        await jobs.close()
