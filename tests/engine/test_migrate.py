"""Migrations: explicit, idempotent, serialised; a clear error when missing; safe names."""

from __future__ import annotations

import asyncio
import hashlib
import json
import uuid

import asyncpg
import pydantic
import pytest

from pgjobs import InvalidSchemaName, JobQueue, Registry, SchemaMissing
from pgjobs.cli import main as cli_main
from pgjobs.migrate import latest_version
from pgjobs.sql import migrations

RELEASED = {
    1: "6bc0eaeaf6ac3820",  # baseline (0.1.0)
}
"""sha256 prefix of each migration that has been released. A database migrated by an earlier
release has recorded these versions and never runs them again, so an edit to one would never
reach it: change the schema in a new migration, and add its digest here when it is released.
(The migrations before 0.1.0, never released, were squashed into 0001_baseline.)"""


class Task(pydantic.BaseModel):
    n: int = 0


def test_released_migrations_are_never_edited() -> None:
    found = {v: hashlib.sha256(text.encode()).hexdigest()[:16] for v, _, text in migrations()}
    assert {v: found.get(v) for v in RELEASED} == RELEASED


async def test_migrate_is_idempotent(jobs: JobQueue) -> None:
    assert await jobs.migrate() == []
    assert await jobs.db.schema_version() == latest_version()


async def test_concurrent_migrations_apply_once(pool: asyncpg.Pool, schema_name: str) -> None:
    queues = [await JobQueue.connect(pool=pool, schema=schema_name) for _ in range(5)]
    applied = await asyncio.gather(*(q.migrate() for q in queues))
    assert sorted(applied, key=len) == [[]] * 4 + [list(range(1, latest_version() + 1))]


async def test_missing_schema_is_a_clear_error(pool: asyncpg.Pool, schema_name: str) -> None:
    registry = Registry()
    registry.declare("task", input=Task)
    jobs = await JobQueue.connect(pool=pool, schema=schema_name, registry=registry)
    with pytest.raises(SchemaMissing) as info:
        await jobs.enqueue("task", {})
    assert "pgjobs migrate" in str(info.value) and schema_name in str(info.value)
    with pytest.raises(SchemaMissing):
        await jobs.check_schema()

    @registry.kind("runs", input=Task)
    async def runs(ctx, task: Task) -> None: ...

    with pytest.raises(SchemaMissing):
        await jobs.worker().run(until_drained=True)


@pytest.mark.parametrize("bad", ["", "Public", "x;drop", "a b", "1abc", "x" * 49, 'a"b', "ünï"])
async def test_invalid_schema_names_are_refused(pool: asyncpg.Pool, bad: str) -> None:
    with pytest.raises(InvalidSchemaName):
        await JobQueue.connect(pool=pool, schema=bad)


def test_cli_migrate(pg_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    schema = f"t_cli_{uuid.uuid4().hex[:8]}"
    try:
        assert cli_main(["migrate", "--dsn", pg_dsn, "--schema", schema]) == 0
        expected = list(range(1, latest_version() + 1))
        assert f"applied migrations {expected} to {schema}" in capsys.readouterr().out
        assert cli_main(["migrate", "--dsn", pg_dsn, "--schema", schema]) == 0
        assert "already up to date" in capsys.readouterr().out
        assert cli_main(["migrate", "--dsn", pg_dsn, "--schema", "Bad;Name"]) == 2
        assert "invalid schema name" in capsys.readouterr().err
    finally:

        async def drop() -> None:
            conn = await asyncpg.connect(pg_dsn)
            await conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
            await conn.close()

        asyncio.run(drop())


async def _claim_buffers(jobs: JobQueue, backlog: int, plan_mode: str) -> int:
    """Pages the claim touches with ``backlog`` pending jobs (EXPLAIN counts the function's own)."""
    await jobs.db.pool.execute(f"TRUNCATE {jobs.schema}.jobs CASCADE")
    await jobs.db.pool.execute(
        f"""INSERT INTO {jobs.schema}.jobs (queue, kind, name, payload, priority, max_attempts, backoff)
            SELECT 'q', 'k', 'k', '{{}}', g % 7, 1, '{{}}' FROM generate_series(1, $1::int) g""",
        backlog,
    )
    await jobs.db.pool.execute(f"ANALYZE {jobs.schema}.jobs")
    async with jobs.db.pool.acquire() as conn:
        tx = conn.transaction()
        await tx.start()
        await conn.execute(f"SET LOCAL plan_cache_mode = {plan_mode}")
        for _ in range(6):  # past the point where cached plans may turn generic
            await conn.fetch(jobs.db.statements["claim"], ["q"], ["k"], 10, 30.0, 0)
        plan = await conn.fetchval(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + jobs.db.statements["claim"],
            ["q", "r"],
            ["k"],
            10,
            30.0,
            0,
        )
        await tx.rollback()
    top = json.loads(plan)[0]["Plan"]
    return int(top["Shared Hit Blocks"] + top["Shared Read Blocks"])


@pytest.mark.parametrize("plan_mode", ["force_custom_plan", "force_generic_plan"])
async def test_claim_cost_does_not_grow_with_the_backlog(jobs: JobQueue, plan_mode: str) -> None:
    """The claim reads the claim index in order and stops: it neither scans nor sorts the
    backlog, so the pages it touches stay the same when the backlog is ten times larger."""
    small = await _claim_buffers(jobs, 2_000, plan_mode)
    large = await _claim_buffers(jobs, 20_000, plan_mode)
    assert large <= small + 40, (small, large)
