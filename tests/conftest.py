"""Test harness: one PostgreSQL per session (found or started by pgjobs.devserver), and a
freshly migrated schema of its own for every test, dropped afterwards."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

from pgjobs import JobQueue, Registry
from pgjobs.devserver import find_or_start_postgres


@pytest.fixture(scope="session")
def pg_dsn() -> str:
    return find_or_start_postgres()


@pytest.fixture
def schema_name() -> str:
    return f"t_{uuid.uuid4().hex[:16]}"


@pytest.fixture
def registry() -> Registry:
    return Registry()


@pytest.fixture
async def pool(pg_dsn: str, schema_name: str) -> AsyncIterator[asyncpg.Pool]:
    pool = await asyncpg.create_pool(pg_dsn, min_size=1, max_size=12)
    try:
        yield pool
    finally:
        try:
            # A test that failed may have left a worker holding connections: do not hang on it.
            await asyncio.wait_for(pool.execute(f"DROP SCHEMA IF EXISTS {schema_name} CASCADE"), 30)
            await asyncio.wait_for(pool.close(), 10)
        except TimeoutError:
            pool.terminate()


@pytest.fixture
async def jobs(pool: asyncpg.Pool, schema_name: str, registry: Registry) -> JobQueue:
    """A JobQueue on this test's own migrated schema; tests add kinds to ``registry``."""
    queue = await JobQueue.connect(pool=pool, schema=schema_name, registry=registry)
    await queue.migrate()
    return queue
