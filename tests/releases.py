"""A schema as an earlier release left it, for upgrade tests."""

from __future__ import annotations

import asyncpg

from pgjobs import sql


async def at_release(conn: asyncpg.Connection, schema: str, version: int) -> None:
    """Create ``schema`` with migrations 1 to ``version`` applied and recorded, nothing else
    (no function definitions: ``migrate`` applies them with the next migration)."""
    await conn.execute(f"CREATE SCHEMA {schema}")
    await conn.execute(
        f"CREATE TABLE {schema}.migrations (version integer PRIMARY KEY, name text NOT NULL,"
        " applied_at timestamptz NOT NULL DEFAULT now())"
    )
    for number, name, template in sql.migrations():
        if number > version:
            break
        await conn.execute(template.replace("{schema}", schema))
        await conn.execute(
            f"INSERT INTO {schema}.migrations (version, name) VALUES ($1, $2)", number, name
        )
