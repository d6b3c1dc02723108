"""The schema as source: a schema migrated from scratch and one brought from the last release
before the definitions moved to sql/schema/ (migration 0009) end up with the same catalog, and
that catalog holds exactly the functions and triggers that sql/schema/ defines."""

from __future__ import annotations

import re
import uuid

import asyncpg
import pytest

from pgjobs import JobQueue, SchemaMissing, sql
from pgjobs.migrate import apply_schema
from tests.releases import at_release

_FUNCTION = re.compile(r"CREATE OR REPLACE FUNCTION \{schema\}\.([a-z_]+)\(")
_TRIGGER = re.compile(r"CREATE OR REPLACE TRIGGER ([a-z_]+) ")


async def _catalog(conn: asyncpg.Connection, schema: str) -> dict[str, list[tuple[str, ...]]]:
    """Functions (by pg_get_functiondef), tables and columns, indexes, constraints and
    triggers of ``schema``, with its name replaced by ``{schema}``."""
    queries = {
        "functions": """
            SELECT p.proname, pg_get_function_identity_arguments(p.oid), pg_get_functiondef(p.oid)
            FROM pg_proc p WHERE p.pronamespace = $1::regnamespace ORDER BY 1, 2""",
        "columns": """
            SELECT table_name, ordinal_position::text, column_name, data_type, is_nullable,
                   coalesce(column_default, ''), is_identity
            FROM information_schema.columns WHERE table_schema = $1 ORDER BY 1, 2""",
        "indexes": """
            SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = $1 ORDER BY 1""",
        "constraints": """
            SELECT c.conrelid::regclass::text, c.conname, pg_get_constraintdef(c.oid)
            FROM pg_constraint c WHERE c.connamespace = $1::regnamespace ORDER BY 1, 2""",
        "triggers": """
            SELECT t.tgrelid::regclass::text, t.tgname, pg_get_triggerdef(t.oid)
            FROM pg_trigger t JOIN pg_class r ON r.oid = t.tgrelid
            WHERE r.relnamespace = $1::regnamespace AND NOT t.tgisinternal ORDER BY 1, 2""",
    }
    catalog = {}
    for part, query in queries.items():
        rows = await conn.fetch(query, schema)
        catalog[part] = [
            tuple(str(value).replace(schema, "{schema}") for value in row) for row in rows
        ]
    return catalog


async def _at_release_0009(conn: asyncpg.Connection, schema: str) -> None:
    """What the code of the 0009 release left: migrations 1-9 applied and recorded, nothing
    else."""
    await at_release(conn, schema, 9)


@pytest.fixture
async def two_schemas(pg_dsn: str):
    conn = await asyncpg.connect(pg_dsn)
    names = [f"t_cat_{uuid.uuid4().hex[:10]}" for _ in range(2)]
    try:
        yield conn, names
    finally:
        for name in names:
            await conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
        await conn.close()


async def test_fresh_and_upgraded_schemas_have_the_same_catalog(two_schemas) -> None:
    conn, (fresh, upgraded) = two_schemas
    report = await apply_schema(conn, fresh)
    assert report.versions == list(range(1, sql.latest_version() + 1))
    assert report.definitions_applied

    await _at_release_0009(conn, upgraded)
    # Rows written by the old release survive the upgrade untouched.
    await conn.execute(
        f"INSERT INTO {upgraded}.jobs (queue, kind, name, payload, max_attempts, backoff)"
        " VALUES ('q', 'k', 'k', '{}', 1, '{}')"
    )
    report = await apply_schema(conn, upgraded)
    assert report.versions == list(range(10, sql.latest_version() + 1))
    assert report.definitions_applied
    assert await conn.fetchval(f"SELECT count(*) FROM {upgraded}.jobs") == 1

    assert await _catalog(conn, upgraded) == await _catalog(conn, fresh)


async def test_the_catalog_holds_exactly_what_sql_schema_defines(two_schemas) -> None:
    conn, (schema, _) = two_schemas
    await apply_schema(conn, schema)
    catalog = await _catalog(conn, schema)
    defined_functions = set()
    defined_triggers = set()
    bodies: dict[str, str] = {}
    for _, template in sql.definitions():
        for name in _FUNCTION.findall(template):
            defined_functions.add(name)
        defined_triggers.update(_TRIGGER.findall(template))
        for match in re.finditer(
            r"FUNCTION \{schema\}\.([a-z_]+)\(.*?AS \$fn\$(.*?)\$fn\$", template, re.S
        ):
            bodies[match.group(1)] = match.group(2)
    # No stale overload or leftover function from an earlier migration.
    assert sorted(name for name, _, _ in catalog["functions"]) == sorted(defined_functions)
    assert {name for _, name, _ in catalog["triggers"]} == defined_triggers
    for name, _, definition in catalog["functions"]:
        assert bodies[name] in definition, name


async def test_check_schema_notices_definitions_that_are_not_this_codes(
    jobs: JobQueue, schema_name: str
) -> None:
    await jobs.check_schema()
    await jobs.pool.execute(f"UPDATE {schema_name}.schema_definitions SET digest = 'older'")
    with pytest.raises(SchemaMissing, match="functions are not this code's") as info:
        await jobs.check_schema()
    assert info.value.stale_definitions
    async with jobs.pool.acquire() as conn:
        report = await apply_schema(conn, schema_name)
    assert report.versions == [] and report.definitions_applied
    await jobs.check_schema()
    async with jobs.pool.acquire() as conn:
        again = await apply_schema(conn, schema_name)
    assert again.versions == [] and not again.definitions_applied
