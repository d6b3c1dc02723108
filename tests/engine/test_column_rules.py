"""The rules every job row obeys (migration 0024): a value a column may not hold is refused,
whether a column's own rule (a domain) or a rule that relates columns (a table CHECK) forbids
it, and a schema upgraded with rows in it keeps them and enforces the same rules."""

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
        ("status = 'finished'", "job_status_known"),
        ("attempts = -1", "non_negative"),
        ("max_attempts = 0", "positive"),
        ("deferrals = -1", "non_negative"),
        ("max_deferrals = -1", "non_negative"),
        ("pending_deps = -1", "non_negative"),
        ("stalls = -1", "non_negative"),
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


async def test_a_registration_never_offers_fewer_than_no_slots(jobs: JobQueue) -> None:
    with pytest.raises(asyncpg.CheckViolationError) as refused:
        await jobs.db.pool.execute(
            f"INSERT INTO {jobs.schema}.idle_workers (worker, queues, kinds, free, lease,"
            " channel, expires_at) VALUES ($1, '{{q}}', '{{k}}', -1, 30, 'c', now())",
            uuid.uuid4(),
        )
    assert refused.value.constraint_name == "non_negative"


async def _before_0024(conn: asyncpg.Connection, schema: str) -> None:
    """``schema`` as the release before migration 0024 left it: migrations 1-23 applied."""
    await conn.execute(f"CREATE SCHEMA {schema}")
    await conn.execute(
        f"CREATE TABLE {schema}.migrations (version integer PRIMARY KEY, name text NOT NULL,"
        " applied_at timestamptz NOT NULL DEFAULT now())"
    )
    for version, name, template in sql.migrations():
        if version >= 24:
            break
        await conn.execute(template.replace("{schema}", schema))
        await conn.execute(
            f"INSERT INTO {schema}.migrations (version, name) VALUES ($1, $2)", version, name
        )


@pytest.fixture
async def old_schema(pg_dsn: str) -> AsyncIterator[tuple[asyncpg.Connection, str]]:
    schema = f"t_rules_{uuid.uuid4().hex[:10]}"
    conn = await asyncpg.connect(pg_dsn)
    try:
        await _before_0024(conn, schema)
        yield conn, schema
    finally:
        await conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        await conn.close()


async def test_an_upgraded_schema_keeps_its_rows_and_enforces_the_same_rules(
    old_schema: tuple[asyncpg.Connection, str],
) -> None:
    conn, schema = old_schema
    await conn.execute(
        f"""INSERT INTO {schema}.jobs (queue, kind, name, payload, max_attempts, backoff,
                                       status, attempts, lock_token, finished_at, stalls)
            VALUES ('q', 'k', 'a', '{{}}', 1, '{{}}', 'pending', 0, NULL, NULL, 0),
                   ('q', 'k', 'b', '{{}}', 2, '{{}}', 'running', 1, gen_random_uuid(), NULL, 1),
                   ('q', 'k', 'c', '{{}}', 3, '{{}}', 'dead', 3, NULL, now(), 0)"""
    )
    report = await apply_schema(conn, schema)
    assert report.versions == [24]
    rows = await conn.fetch(
        f"SELECT name, status, attempts, max_attempts, stalls FROM {schema}.jobs ORDER BY name"
    )
    assert [tuple(r) for r in rows] == [
        ("a", "pending", 0, 1, 0),
        ("b", "running", 1, 2, 1),
        ("c", "dead", 3, 3, 0),
    ]
    with pytest.raises(asyncpg.CheckViolationError) as refused:
        await conn.execute(f"UPDATE {schema}.jobs SET attempts = -1 WHERE name = 'a'")
    assert refused.value.constraint_name == "non_negative"
    validated = await conn.fetch(
        "SELECT conname, convalidated FROM pg_constraint"
        " WHERE contypid IN ($1::regtype, $2::regtype, $3::regtype) ORDER BY 1",
        f"{schema}.job_status",
        f"{schema}.non_negative",
        f"{schema}.positive",
    )
    assert [tuple(r) for r in validated] == [
        ("job_status_known", True),
        ("non_negative", True),
        ("positive", True),
    ]


async def test_an_application_view_of_a_retyped_column_stops_the_upgrade_with_what_to_do(
    old_schema: tuple[asyncpg.Connection, str],
) -> None:
    """PostgreSQL cannot retype a column a view reads: the upgrade names every such view and
    SQL-bodied function of the application at once, says what to do, and changes nothing."""
    conn, schema = old_schema
    await conn.execute(
        f"CREATE VIEW {schema}.app_report AS"
        f" SELECT queue, status, count(*) AS n FROM {schema}.jobs GROUP BY 1, 2"
    )
    await conn.execute(
        f"CREATE FUNCTION {schema}.app_retries() RETURNS bigint LANGUAGE sql"
        f" BEGIN ATOMIC SELECT sum(attempts) FROM {schema}.jobs; END"
    )
    with pytest.raises(MigrationFailed) as failed:
        await apply_schema(conn, schema)
    message = str(failed.value)
    assert failed.value.version == 24
    assert f"{schema}.app_report" in message and f"{schema}.app_retries()" in message
    assert "Drop them, migrate, then create them again" in message
    assert await conn.fetchval(f"SELECT max(version) FROM {schema}.migrations") == 23
    assert (
        await conn.fetchval(
            "SELECT count(*) FROM pg_type WHERE typnamespace = $1::regnamespace AND typtype = 'd'",
            schema,
        )
        == 0
    )
    assert await conn.fetch(f"SELECT * FROM {schema}.app_report") == []

    await conn.execute(f"DROP VIEW {schema}.app_report; DROP FUNCTION {schema}.app_retries()")
    assert (await apply_schema(conn, schema)).versions == [24]


def test_the_cli_reports_a_failed_migration_in_one_line(
    pg_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    schema = f"t_rules_{uuid.uuid4().hex[:10]}"

    async def prepare() -> None:
        conn = await asyncpg.connect(pg_dsn)
        await _before_0024(conn, schema)
        await conn.execute(f"CREATE VIEW {schema}.app_report AS SELECT status FROM {schema}.jobs")
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
        assert err.startswith("pgjobs migrate: migration 0024 (column_rules_as_domains)")
        assert f"{schema}.app_report" in err
    finally:
        asyncio.run(drop())
