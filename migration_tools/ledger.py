"""The migration ledger: which BullMQ job (prefix, queue, id) became which engine job. Written in
the same transaction as the jobs, so a rerun or a resume after a crash skips exactly what is
already done. Lives in its own schema (``<engine schema>_migration``), beside the engine's."""

from __future__ import annotations

from typing import Any

from pgjobs import validate_schema

_DDL = """
CREATE SCHEMA IF NOT EXISTS {s};
CREATE TABLE IF NOT EXISTS {s}.ledger (
    prefix      text NOT NULL,
    queue       text NOT NULL,
    job_id      text NOT NULL,
    engine_id   bigint NOT NULL,
    state       text NOT NULL,
    checksum    text NOT NULL,
    migrated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (prefix, queue, job_id)
);
"""


class Ledger:
    def __init__(self, engine_schema: str) -> None:
        self.schema = validate_schema(f"{engine_schema}_migration")

    async def create(self, conn: Any) -> None:
        await conn.execute(_DDL.format(s=self.schema))

    async def done(self, conn: Any, keys: list[tuple[str, str, str]]) -> set[tuple[str, str, str]]:
        if not keys:
            return set()
        rows = await conn.fetch(
            f"SELECT prefix, queue, job_id FROM {self.schema}.ledger"
            " WHERE (prefix, queue, job_id) IN"
            " (SELECT * FROM unnest($1::text[], $2::text[], $3::text[]))",
            [k[0] for k in keys],
            [k[1] for k in keys],
            [k[2] for k in keys],
        )
        return {(r["prefix"], r["queue"], r["job_id"]) for r in rows}

    async def record(self, conn: Any, rows: list[tuple[str, str, str, int, str, str]]) -> None:
        await conn.execute(
            f"INSERT INTO {self.schema}.ledger (prefix, queue, job_id, engine_id, state, checksum)"
            " SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[],"
            " $6::text[]) ON CONFLICT DO NOTHING",
            *zip(*rows, strict=True),
        )

    async def entries(self, conn: Any, prefix: str, queue: str) -> dict[str, dict[str, Any]]:
        rows = await conn.fetch(
            f"SELECT job_id, engine_id, state, checksum FROM {self.schema}.ledger"
            " WHERE prefix = $1 AND queue = $2",
            prefix,
            queue,
        )
        return {r["job_id"]: dict(r) for r in rows}

    async def engine_id(self, conn: Any, prefix: str, queue: str, job_id: str) -> int | None:
        value = await conn.fetchval(
            f"SELECT engine_id FROM {self.schema}.ledger"
            " WHERE prefix = $1 AND queue = $2 AND job_id = $3",
            prefix,
            queue,
            job_id,
        )
        return None if value is None else int(value)
