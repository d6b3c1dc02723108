"""The rules every job row obeys (its CHECK constraints): a value a column may not hold is
refused, and nothing is written. A migration PostgreSQL refuses raises ``MigrationFailed``
naming it and the reason, leaves the schema as it was, and ``pgjobs migrate`` says so in one
line."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pydantic
import pytest

from pgjobs import JobContext, JobQueue, MigrationFailed, Registry, sql
from pgjobs.cli import main as cli_main
from pgjobs.migrate import apply_schema
from tests.releases import at_release


class Task(pydantic.BaseModel):
    n: int = 0


@pytest.fixture
def kinds(registry: Registry) -> None:
    @registry.kind("task", input=Task, queue="q")
    async def task(ctx: JobContext, data: Task) -> None:
        return None


@pytest.mark.parametrize(
    ("assignment", "rule"),
    [
        ("status = 'finished'", "jobs_status_check"),
        ("attempts = -1", "jobs_attempts_check"),
        ("max_attempts = 0", "jobs_max_attempts_check"),
        ("deferrals = -1", "jobs_deferrals_check"),
        ("max_deferrals = -1", "jobs_max_deferrals_check"),
        ("pending_deps = -1", "jobs_pending_deps_check"),
        ("stalls = -1", "jobs_stalls_check"),
        ("status = 'running'", "jobs_running_has_token"),  # running needs its lease's token
        ("finished_at = now()", "jobs_finished_iff_terminal"),  # a pending job is not finished
        ("status = 'completed'", "jobs_finished_iff_terminal"),  # a finished one has its time
    ],
)
async def test_a_job_row_refuses_what_its_rules_forbid(
    jobs: JobQueue, kinds: None, assignment: str, rule: str
) -> None:
    job = await jobs.enqueue("task", {"n": 1})
    with pytest.raises(asyncpg.CheckViolationError) as refused:
        await jobs.db.pool.execute(
            f"UPDATE {jobs.schema}.jobs SET {assignment} WHERE id = $1", job.id
        )
    assert refused.value.constraint_name == rule
    row = await jobs.db.pool.fetchrow(
        f"SELECT status, attempts, max_attempts, finished_at FROM {jobs.schema}.jobs WHERE id = $1",
        job.id,
    )
    assert tuple(row) == ("pending", 0, 3, None)


async def _at_version_20(conn: asyncpg.Connection, schema: str) -> None:
    """``schema`` as a release at migration 0020 left it, plus a table of the application's
    that takes the name migration 0021 creates."""
    await at_release(conn, schema, 20)
    await conn.execute(f"CREATE TABLE {schema}.event_readers (mine int)")


@pytest.fixture
async def blocked_schema(pg_dsn: str) -> AsyncIterator[tuple[asyncpg.Connection, str]]:
    schema = f"t_rules_{uuid.uuid4().hex[:10]}"
    conn = await asyncpg.connect(pg_dsn)
    try:
        await _at_version_20(conn, schema)
        yield conn, schema
    finally:
        await conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        await conn.close()


async def test_a_refused_migration_names_itself_and_changes_nothing(
    blocked_schema: tuple[asyncpg.Connection, str],
) -> None:
    conn, schema = blocked_schema
    with pytest.raises(MigrationFailed) as failed:
        await apply_schema(conn, schema)
    assert (failed.value.version, failed.value.name) == (21, "event_readers")
    assert str(failed.value).startswith(
        f"migration 0021 (event_readers) of pgjobs schema {schema!r} failed and nothing was"
        ' changed: relation "event_readers" already exists'
    )
    assert await conn.fetchval(f"SELECT max(version) FROM {schema}.migrations") == 20
    assert await conn.fetchval("SELECT to_regclass($1)", f"{schema}.incarnation") is None

    await conn.execute(f"DROP TABLE {schema}.event_readers")
    assert (await apply_schema(conn, schema)).versions == list(range(21, sql.latest_version() + 1))


def test_the_cli_reports_a_refused_migration_in_one_line(
    pg_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    schema = f"t_rules_{uuid.uuid4().hex[:10]}"

    async def prepare() -> None:
        conn = await asyncpg.connect(pg_dsn)
        await _at_version_20(conn, schema)
        await conn.close()

    async def drop() -> None:
        conn = await asyncpg.connect(pg_dsn)
        await conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        await conn.close()

    asyncio.run(prepare())
    try:
        assert cli_main(["migrate", "--dsn", pg_dsn, "--schema", schema]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1
        assert err.startswith("pgjobs migrate: migration 0021 (event_readers)")
    finally:
        asyncio.run(drop())
