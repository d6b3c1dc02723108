"""Schema migrations, applied explicitly (never on import) under an advisory lock.

Two kinds of SQL make the schema (see ``pgjobs.sql``): the numbered migrations, each applied
once and recorded, and the definitions of ``sql/schema/`` (functions, trigger functions,
triggers), re-applied whenever their digest differs from the one recorded. Both happen in one
transaction, so a database is never left half-migrated.
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from pgjobs import network, sql
from pgjobs.config import validate_schema
from pgjobs.errors import MigrationFailed
from pgjobs.executor import Connection

latest_version = sql.latest_version


@dataclass(frozen=True, slots=True)
class MigrationReport:
    """What one ``apply_schema`` call changed: the numbered migrations it applied, and whether
    it (re)applied the function and trigger definitions."""

    versions: list[int]
    definitions_applied: bool


async def apply_schema(conn: Connection, schema: str) -> MigrationReport:
    """Bring ``schema`` up to date in one transaction: the pending numbered migrations, then the
    definitions of ``sql/schema/`` when any migration ran or their digest changed.

    Idempotent; concurrent callers serialise on an advisory lock derived from the schema name,
    so the second finds nothing left to do.
    """
    statements = sql.queries(validate_schema(schema))
    applied: list[int] = []
    async with conn.transaction():
        await conn.execute(statements["migrate_lock"], schema)
        await conn.execute(statements["create_schema"])
        await conn.execute(statements["create_ledger"])
        done = {
            row["version"]: row["name"] for row in await conn.fetch(statements["applied_versions"])
        }
        for version, name, template in sql.migrations():
            if version in done:
                _check_recorded(schema, version, name, done[version])
                continue
            try:
                await conn.execute(template.replace("{schema}", schema))
            except asyncpg.PostgresError as exc:
                raise MigrationFailed(schema, version, name, _reason(exc)) from exc
            await conn.execute(statements["record_version"], version, name)
            applied.append(version)
        digest = sql.definitions_digest()
        stale = applied or await conn.fetchval(statements["recorded_digest"]) != digest
        if stale:
            for _, template in sql.definitions():
                await conn.execute(template.replace("{schema}", schema))
            await conn.execute(statements["record_digest"], digest)
    return MigrationReport(applied, bool(stale))


def _check_recorded(schema: str, version: int, name: str, recorded: str) -> None:
    """Refuse a ledger that records another migration under this version: the schema was
    migrated by a pre-release pgjobs (whose 24 migrations 0.1.0 squashed into
    ``0001_baseline``, recorded as ``init``, ``flows_operations``, ...), so skipping the version
    would leave it short of what this code expects."""
    if recorded == name:
        return
    reason = f"the schema records migration {version:04d} as {recorded!r}, not {name!r}"
    if version == 1 and recorded == "init":
        reason += (
            ": it was migrated by a pre-release pgjobs, whose migrations 0.1.0 squashed into"
            " 0001_baseline. A pre-release schema is not upgraded: drop it"
            f" (DROP SCHEMA {schema} CASCADE) and migrate again"
        )
    else:
        reason += ": it was migrated by another pgjobs whose migrations differ from this code's"
    raise MigrationFailed(schema, version, name, reason)


def _reason(exc: asyncpg.PostgresError) -> str:
    """What PostgreSQL refused, with its detail and hint when it gave them."""
    text = exc.message or str(exc)
    if exc.detail:
        text += f" ({exc.detail})"
    if exc.hint:
        text += f". {exc.hint}"
    return " ".join(text.split())


async def apply_migrations(conn: Connection, schema: str) -> list[int]:
    """``apply_schema``, returning only the numbered migrations applied."""
    return (await apply_schema(conn, schema)).versions


async def migrate(dsn: str, schema: str) -> MigrationReport:
    """Connect to ``dsn`` and bring ``schema`` up to date (see ``apply_schema``)."""
    conn = await network.connect(dsn)
    try:
        return await apply_schema(conn, schema)
    finally:
        await conn.close()
