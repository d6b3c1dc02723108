"""The rules every job row obeys (its CHECK constraints): a value a column may not hold is
refused, and nothing is written. A migration PostgreSQL refuses (a synthetic later one here)
raises ``MigrationFailed`` naming it and the reason, leaves the schema as it was, and ``pgjobs
migrate`` says so in one line."""

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
from tests.releases import at_release, with_later_migration


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


_LATER = """
CREATE TABLE {schema}.example_audit (id bigint PRIMARY KEY);
CREATE TABLE {schema}.example_readers (reader uuid PRIMARY KEY);
"""
"""A later migration (synthetic): its second table takes a name the application already uses."""


@pytest.fixture
async def blocked_schema(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[asyncpg.Connection, str]]:
    """``schema`` as the release before a later migration left it, plus a table of the
    application's that takes the name that migration creates."""
    schema = f"t_rules_{uuid.uuid4().hex[:10]}"
    conn = await asyncpg.connect(pg_dsn)
    try:
        await at_release(conn, schema, sql.latest_version())
        await conn.execute(f"CREATE TABLE {schema}.example_readers (mine int)")
        with_later_migration(monkeypatch, "example_readers", _LATER)
        yield conn, schema
    finally:
        await conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        await conn.close()


async def test_a_refused_migration_names_itself_and_changes_nothing(
    blocked_schema: tuple[asyncpg.Connection, str],
) -> None:
    conn, schema = blocked_schema
    later = sql.latest_version()
    with pytest.raises(MigrationFailed) as failed:
        await apply_schema(conn, schema)
    assert (failed.value.version, failed.value.name) == (later, "example_readers")
    assert str(failed.value).startswith(
        f"migration {later:04d} (example_readers) of pgjobs schema {schema!r} failed and nothing"
        ' was changed: relation "example_readers" already exists'
    )
    assert await conn.fetchval(f"SELECT max(version) FROM {schema}.migrations") == later - 1
    assert await conn.fetchval("SELECT to_regclass($1)", f"{schema}.example_audit") is None

    await conn.execute(f"DROP TABLE {schema}.example_readers")
    assert (await apply_schema(conn, schema)).versions == [later]


async def test_the_cli_reports_a_refused_migration_in_one_line(
    blocked_schema: tuple[asyncpg.Connection, str],
    pg_dsn: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, schema = blocked_schema
    code = await asyncio.to_thread(cli_main, ["migrate", "--dsn", pg_dsn, "--schema", schema])
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"pgjobs migrate: migration {sql.latest_version():04d} (example_readers)")
