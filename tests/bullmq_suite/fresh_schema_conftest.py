"""Copied as conftest.py beside BullMQ's tests: every test starts on a freshly migrated schema
(the suite flushes Redis between tests; job ids restart as they do there)."""

import asyncio
import os

import asyncpg
import pytest

import pgjobs

DSN = os.environ["PGJOBS_DSN"]

# Files about Redis connections and clusters, the real package's lock manager, SQL loader and
# PostgreSQL backend, worker disconnects and a flow test that mocks the Redis backend.
collect_ignore = [
    "redis_connection_test.py",
    "redis_connection_cluster_test.py",
    "queue_getters_cluster_test.py",
    "postgres_backend_test.py",
    "lock_manager_test.py",
    "sql_loader_test.py",
    "worker_disconnect_test.py",
    "flow_producer_test.py",
]


async def _fresh() -> None:
    conn = await asyncpg.connect(DSN)
    try:
        await conn.execute("DROP SCHEMA IF EXISTS pgjobs CASCADE")
    finally:
        await conn.close()
    jobs = await pgjobs.JobQueue.connect(DSN)
    try:
        await jobs.migrate()
    finally:
        await jobs.close()


@pytest.fixture(autouse=True)
def fresh_schema() -> None:
    asyncio.run(_fresh())
