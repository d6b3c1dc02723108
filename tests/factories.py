"""Insert job rows in any state directly, for tests of reads (tracking, GC)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import asyncpg


async def insert_job(
    conn: asyncpg.Connection | asyncpg.Pool,
    schema: str,
    *,
    queue: str = "q",
    kind: str = "k",
    name: str | None = None,
    status: str = "pending",
    pending_deps: int = 0,
    run_at: datetime | None = None,
    attempts: int = 0,
    deferrals: int = 0,
    finished_at: datetime | None = None,
    created_at: datetime | None = None,
    **columns: Any,
) -> int:
    """One row in exactly the state given (running rows get a lock token; terminal ones a
    finished_at unless one is given)."""
    fields: dict[str, Any] = {
        "queue": queue,
        "kind": kind,
        "name": name or kind,
        "status": status,
        "pending_deps": pending_deps,
        "attempts": attempts,
        "deferrals": deferrals,
        "max_attempts": max(attempts, 1),
        **columns,
    }
    sql_values = ["'{}'::jsonb"]  # backoff; payload too unless given (as JSON text)
    extra = ["backoff"]
    if "payload" not in fields:
        sql_values.append("'{}'::jsonb")
        extra.append("payload")
    if run_at is not None:
        fields["run_at"] = run_at
    if created_at is not None:
        fields["created_at"] = created_at
    if status in ("completed", "dead", "cancelled"):
        extra.append("finished_at")
        sql_values.append(f"${len(fields) + 1}" if finished_at else "now()")
    if status == "running":
        extra.append("lock_token")
        sql_values.append("gen_random_uuid()")
    names = list(fields) + extra
    placeholders = [f"${i}" for i in range(1, len(fields) + 1)] + sql_values
    args = list(fields.values()) + (
        [finished_at] if finished_at and status in ("completed", "dead", "cancelled") else []
    )
    insert = f"INSERT INTO {schema}.jobs ({', '.join(names)}) VALUES ({', '.join(placeholders)})"
    # A finished row counts itself, as the engine's inserts of finished jobs (import_jobs) do.
    return await conn.fetchval(
        f"WITH ins AS ({insert} RETURNING id, queue, status, finished_at),"
        f" counted AS (INSERT INTO {schema}.finished_counts (queue, status, n)"
        "  SELECT queue, status, 1 FROM ins WHERE finished_at IS NOT NULL)"
        " SELECT id FROM ins",
        *args,
    )
