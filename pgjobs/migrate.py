"""Versioned schema migrations, applied explicitly (never on import) under an advisory lock."""

from __future__ import annotations

import asyncpg

from pgjobs import sql
from pgjobs.config import validate_schema
from pgjobs.executor import Connection

latest_version = sql.latest_version


async def apply_migrations(conn: Connection, schema: str) -> list[int]:
    """Bring ``schema`` up to the latest version in one transaction; return the versions applied.

    Idempotent: versions already recorded are skipped. Concurrent callers serialise on an
    advisory lock derived from the schema name, so the second finds nothing left to do.
    """
    schema = validate_schema(schema)
    applied: list[int] = []
    async with conn.transaction():
        await conn.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended('pgjobs:migrate:' || $1::text, 0))",
            schema,
        )
        await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
        await conn.execute(
            f"CREATE TABLE IF NOT EXISTS {schema}.migrations ("
            " version integer PRIMARY KEY, name text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        done = {r["version"] for r in await conn.fetch(f"SELECT version FROM {schema}.migrations")}
        for version, name, template in sql.migrations():
            if version in done:
                continue
            await conn.execute(template.replace("{schema}", schema))
            await conn.execute(
                f"INSERT INTO {schema}.migrations (version, name) VALUES ($1, $2)", version, name
            )
            applied.append(version)
    return applied


async def migrate(dsn: str, schema: str) -> list[int]:
    """Connect to ``dsn`` and apply pending migrations to ``schema``."""
    conn = await asyncpg.connect(dsn)
    try:
        return await apply_migrations(conn, schema)
    finally:
        await conn.close()
