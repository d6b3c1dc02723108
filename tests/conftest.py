"""Test harness: one PostgreSQL per session (found or started by pgjobs.devserver), and a
freshly migrated schema of its own for every test, dropped afterwards."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from pgjobs import JobQueue, Registry, create_pool
from pgjobs.devserver import find_or_start_postgres
from tests.redis_server import find_or_start_redis


@pytest.fixture(scope="session")
def pg_dsn() -> str:
    return find_or_start_postgres()


@pytest.fixture(scope="session")
def redis_url() -> str:
    """A Redis for the BullMQ-side tests (migration): see tests/redis_server.py."""
    return find_or_start_redis()


@pytest.fixture
async def prefix(redis_url: str) -> AsyncIterator[str]:
    """A BullMQ key prefix of this test's own; its keys are deleted afterwards."""
    import redis.asyncio as aioredis

    name = f"mig{uuid.uuid4().hex[:8]}"
    yield name
    client = aioredis.from_url(redis_url)
    async for key in client.scan_iter(match=f"{name}:*", count=1000):
        await client.delete(key)
    await client.aclose()


@pytest.fixture
def schema_name() -> str:
    return f"t_{uuid.uuid4().hex[:16]}"


@pytest.fixture
def registry() -> Registry:
    return Registry()


@pytest.fixture
async def pool(pg_dsn: str, schema_name: str) -> AsyncIterator[asyncpg.Pool]:
    pool = await create_pool(pg_dsn, min_size=1, max_size=12)  # the engine's, spare lane included
    try:
        yield pool
    finally:
        # Close the pool before dropping the schema, so that nothing a test left running can
        # write into the schema while it is dropped; a test that failed may have left a worker
        # holding connections: do not hang on it.
        try:
            await asyncio.wait_for(pool.close(), 10)
        except TimeoutError:
            pool.terminate()
        dropper = await asyncpg.connect(pg_dsn)
        try:
            await asyncio.wait_for(
                dropper.execute(f"DROP SCHEMA IF EXISTS {schema_name} CASCADE"), 30
            )
        finally:
            await dropper.close()


@pytest.fixture
async def admin(pg_dsn: str, schema_name: str) -> AsyncIterator[asyncpg.Connection]:
    """A connection of its own, outside any pool under test (for tests that close their pool),
    to read the test's schema; it drops the schema afterwards."""
    conn = await asyncpg.connect(pg_dsn)
    try:
        yield conn
    finally:
        await conn.execute(f"DROP SCHEMA IF EXISTS {schema_name} CASCADE")
        await conn.close()


@pytest.fixture
async def jobs(pool: asyncpg.Pool, schema_name: str, registry: Registry) -> JobQueue:
    """A JobQueue on this test's own migrated schema; tests add kinds to ``registry``."""
    queue = await JobQueue.connect(pool=pool, schema=schema_name, registry=registry)
    await queue.migrate()
    return queue


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--reliability-report",
        action="store_true",
        help="write the reliability scenarios' figures into docs/guarantees.md's table",
    )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    from tests.reliability import figures

    if not session.config.getoption("--reliability-report") or not figures.RECORDED:
        return
    if exitstatus != 0:
        print("\nreliability figures NOT written: the run had failures")
        return

    async def server_version() -> str:
        conn = await asyncpg.connect(find_or_start_postgres())
        try:
            return str(await conn.fetchval("SHOW server_version"))
        finally:
            await conn.close()

    page = Path(__file__).resolve().parents[1] / "docs" / "guarantees.md"
    figures.write_into(page, figures.render(figures.RECORDED, asyncio.run(server_version())))
    print(f"\nreliability figures written into {page}")


@pytest.fixture
async def plain_conn(pg_dsn: str) -> AsyncIterator[asyncpg.Connection]:
    """A plain asyncpg connection, no pgjobs code: what a service in another language has."""
    connection = await asyncpg.connect(pg_dsn)
    yield connection
    await connection.close()
