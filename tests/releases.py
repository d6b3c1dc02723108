"""A schema as an earlier release left it, and a later migration, for upgrade tests.

pgjobs 0.1.0 starts from one baseline migration, so the tests of upgrading add a synthetic
migration after it (``with_later_migration``) and bring a schema left at the baseline
(``at_release``) up to it.
"""

from __future__ import annotations

import asyncpg
import pytest

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


def with_later_migration(monkeypatch: pytest.MonkeyPatch, name: str, template: str) -> int:
    """Make the code's migrations the real ones plus ``template`` as the next version, named
    ``name`` (as a later release would add it); returns that version. ``migrate``,
    ``latest_version`` and ``check_schema`` all see it."""
    real = sql.migrations()
    version = len(real) + 1
    monkeypatch.setattr(sql, "migrations", lambda: [*real, (version, name, template)])
    return version
