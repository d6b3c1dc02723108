"""The schema as source. A schema migrated from scratch has exactly the catalog recorded in
``schema_catalog.txt`` beside this file: its tables, columns, defaults, constraints, indexes,
sequences, types, views, comments, functions and triggers, and no rows but the ledger's. Any
change to ``sql/migrations/`` or ``sql/schema/`` that changes the catalog must update that
snapshot, on purpose; regenerate it with

    PGJOBS_REGENERATE=1 .venv/bin/python -m pytest tests/engine/test_schema_catalog.py -k snapshot

and review its diff. A schema at an earlier release brought up by a later migration ends up
with the same catalog as one migrated from scratch, and that catalog holds exactly the
functions and triggers that ``sql/schema/`` defines."""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

import asyncpg
import pytest

from pgjobs import JobQueue, MigrationFailed, SchemaMissing, sql
from pgjobs.migrate import apply_schema
from tests.releases import at_release, with_later_migration

SNAPSHOT = Path(__file__).with_name("schema_catalog.txt")

_FUNCTION = re.compile(r"CREATE OR REPLACE FUNCTION \{schema\}\.([a-z_]+)\(")
_TRIGGER = re.compile(r"CREATE OR REPLACE TRIGGER ([a-z_]+) ")

_CATALOG_QUERIES = {
    "relation": """
        SELECT c.relname, c.relkind::text, c.relpersistence::text, coalesce(c.reloptions::text, '')
        FROM pg_class c WHERE c.relnamespace = $1::regnamespace""",
    "column": """
        SELECT c.relname, lpad((row_number() OVER (PARTITION BY c.oid ORDER BY a.attnum))::text, 3, '0'),
               a.attname, format_type(a.atttypid, a.atttypmod),
               CASE WHEN a.attnotnull THEN 'not null' ELSE 'null' END,
               coalesce(pg_get_expr(d.adbin, d.adrelid), ''), a.attidentity::text,
               a.attgenerated::text
        FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
        LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        WHERE c.relnamespace = $1::regnamespace AND c.relkind IN ('r', 'v', 'm', 'c', 'p')
          AND a.attnum > 0 AND NOT a.attisdropped""",
    # contype 'n': NOT NULL as a constraint (PostgreSQL 18); the columns already say it.
    "constraint": """
        SELECT c.conrelid::regclass::text, c.conname, pg_get_constraintdef(c.oid)
        FROM pg_constraint c WHERE c.connamespace = $1::regnamespace AND c.contype <> 'n'""",
    "index": """
        SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = $1""",
    "sequence": """
        SELECT c.relname, format_type(s.seqtypid, NULL), s.seqstart::text,
               s.seqincrement::text, s.seqmin::text, s.seqmax::text, s.seqcache::text,
               s.seqcycle::text
        FROM pg_sequence s JOIN pg_class c ON c.oid = s.seqrelid
        WHERE c.relnamespace = $1::regnamespace""",
    "type": """
        SELECT t.typname, t.typtype::text,
               coalesce(format_type(t.typbasetype, t.typtypmod), '')
        FROM pg_type t LEFT JOIN pg_class c ON c.oid = t.typrelid
        WHERE t.typnamespace = $1::regnamespace AND t.typelem = 0
          AND (c.relkind IS NULL OR c.relkind = 'c')""",
    "view": """
        SELECT c.relname, pg_get_viewdef(c.oid)
        FROM pg_class c WHERE c.relnamespace = $1::regnamespace AND c.relkind IN ('v', 'm')""",
    # The body of each function is checked against sql/schema/ below; the snapshot keeps
    # what else makes it (its signature, result, language and settings).
    "function": """
        SELECT p.proname, pg_get_function_identity_arguments(p.oid),
               pg_get_function_result(p.oid), l.lanname, p.provolatile::text,
               p.prosecdef::text, p.proisstrict::text, coalesce(p.proconfig::text, '')
        FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
        WHERE p.pronamespace = $1::regnamespace""",
    "trigger": """
        SELECT t.tgrelid::regclass::text, t.tgname, pg_get_triggerdef(t.oid)
        FROM pg_trigger t JOIN pg_class r ON r.oid = t.tgrelid
        WHERE r.relnamespace = $1::regnamespace AND NOT t.tgisinternal""",
    "comment": """
        SELECT d.classoid::regclass::text, coalesce(c.relname, p.proname, t.typname),
               d.objsubid::text, d.description
        FROM pg_description d
        LEFT JOIN pg_class c ON d.classoid = 'pg_class'::regclass AND c.oid = d.objoid
        LEFT JOIN pg_proc p ON d.classoid = 'pg_proc'::regclass AND p.oid = d.objoid
        LEFT JOIN pg_type t ON d.classoid = 'pg_type'::regclass AND t.oid = d.objoid
        WHERE coalesce(c.relnamespace, p.pronamespace, t.typnamespace) = $1::regnamespace""",
}


async def catalog(conn: asyncpg.Connection, schema: str) -> list[str]:
    """The catalog of ``schema``, one sorted line per object (``kind: field | field ...``),
    its name replaced by ``{schema}``; with the number of rows of each table but the ledger's
    (``migrations``, ``schema_definitions``), which a fresh schema must hold with none."""
    lines = []
    for kind, query in _CATALOG_QUERIES.items():
        for row in await conn.fetch(query, schema):
            lines.append((f"{kind}: " + " | ".join(str(value) for value in row)).rstrip())
    tables = await conn.fetch(
        "SELECT relname FROM pg_class WHERE relnamespace = $1::regnamespace AND relkind = 'r'"
        " AND relname NOT IN ('migrations', 'schema_definitions')",
        schema,
    )
    for (table,) in tables:
        count = await conn.fetchval(f"SELECT count(*) FROM {schema}.{table}")
        lines.append(f"rows: {table} | {count}")
    return sorted(line.replace(schema, "{schema}") for line in lines)


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


async def test_a_fresh_schema_matches_the_snapshot(two_schemas) -> None:
    conn, (schema, _) = two_schemas
    report = await apply_schema(conn, schema)
    assert report.versions == list(range(1, sql.latest_version() + 1))
    found = await catalog(conn, schema)
    text = "\n".join(found) + "\n"
    if os.environ.get("PGJOBS_REGENERATE"):
        SNAPSHOT.write_text(text, encoding="utf-8")
        pytest.skip(f"regenerated {SNAPSHOT}: review its diff")
    expected = SNAPSHOT.read_text(encoding="utf-8").splitlines()
    missing = sorted(set(expected) - set(found))
    extra = sorted(set(found) - set(expected))
    assert (missing, extra) == ([], []), (
        "the migrated catalog differs from tests/engine/schema_catalog.txt (missing: lines of"
        " the snapshot not found; extra: lines found but not in it). If the change is meant,"
        " regenerate the snapshot (see this module's docstring)."
    )


_LATER = """
ALTER TABLE {schema}.jobs ADD COLUMN note text;
CREATE INDEX jobs_note_idx ON {schema}.jobs (note) WHERE note IS NOT NULL;
UPDATE {schema}.jobs SET note = 'before';
"""


async def test_an_older_schema_and_a_fresh_one_have_the_same_catalog(
    two_schemas, monkeypatch: pytest.MonkeyPatch
) -> None:
    conn, (fresh, upgraded) = two_schemas
    baseline = sql.latest_version()
    await at_release(conn, upgraded, baseline)
    assert (await apply_schema(conn, upgraded)).versions == []  # the definitions only
    # Rows written by the older release survive the upgrade.
    await conn.execute(
        f"INSERT INTO {upgraded}.jobs (queue, kind, name, payload, max_attempts, backoff)"
        " VALUES ('q', 'k', 'k', '{}', 1, '{}')"
    )
    later = with_later_migration(monkeypatch, "notes", _LATER)

    report = await apply_schema(conn, upgraded)
    assert report.versions == [later]
    assert report.definitions_applied  # re-applied with every migration
    assert await conn.fetchval(f"SELECT note FROM {upgraded}.jobs") == "before"

    report = await apply_schema(conn, fresh)
    assert report.versions == list(range(1, later + 1))
    await conn.execute(f"DELETE FROM {upgraded}.jobs")
    assert await catalog(conn, upgraded) == await catalog(conn, fresh)
    assert "index: jobs_note_idx" in "\n".join(await catalog(conn, fresh))


async def test_a_pre_release_schema_is_refused_by_name(two_schemas) -> None:
    """A schema migrated before 0.1.0 recorded migrations 0001 (init) to 0024; 0.1.0 squashed
    them into 0001_baseline. Its ledger is refused with what to do, and nothing changes."""
    conn, (schema, _) = two_schemas
    await conn.execute(f"CREATE SCHEMA {schema}")
    await conn.execute(
        f"CREATE TABLE {schema}.migrations (version integer PRIMARY KEY, name text NOT NULL,"
        " applied_at timestamptz NOT NULL DEFAULT now())"
    )
    await conn.execute(
        f"INSERT INTO {schema}.migrations (version, name)"
        " VALUES (1, 'init'), (2, 'flows_operations'), (24, 'dedup_keep_last')"
    )
    with pytest.raises(MigrationFailed) as refused:
        await apply_schema(conn, schema)
    assert (refused.value.version, refused.value.name) == (1, "baseline")
    assert "records migration 0001 as 'init', not 'baseline'" in str(refused.value)
    assert "pre-release pgjobs" in str(refused.value)
    assert f"DROP SCHEMA {schema} CASCADE" in str(refused.value)
    assert await conn.fetchval("SELECT to_regclass($1)", f"{schema}.jobs") is None


async def test_the_catalog_holds_exactly_what_sql_schema_defines(two_schemas) -> None:
    conn, (schema, _) = two_schemas
    await apply_schema(conn, schema)
    functions = await conn.fetch(
        "SELECT p.proname, pg_get_functiondef(p.oid) FROM pg_proc p"
        " WHERE p.pronamespace = $1::regnamespace",
        schema,
    )
    triggers = await conn.fetch(
        "SELECT t.tgname FROM pg_trigger t JOIN pg_class r ON r.oid = t.tgrelid"
        " WHERE r.relnamespace = $1::regnamespace AND NOT t.tgisinternal",
        schema,
    )
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
            bodies[match.group(1)] = match.group(2).replace("{schema}", schema)
    # No stale overload, and no function or trigger the migrations made on their own.
    assert sorted(name for name, _ in functions) == sorted(defined_functions)
    assert {name for (name,) in triggers} == defined_triggers
    for name, definition in functions:
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
