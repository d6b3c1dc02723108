"""The migration's view of the engine's import ledger: which BullMQ job (prefix, queue, id)
became which engine job. Written in the same transaction as the jobs, so a rerun or a resume
after a crash skips exactly what is already done. The ledger itself is the engine's
(``JobQueue.imported`` / ``record_imports`` / ``imports_of``); a BullMQ queue is the source
``bullmq:<prefix>:<queue>``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pgjobs import ImportRecord, JobQueue

JobRef = tuple[str, str, str]
"""(prefix, queue, BullMQ job id)."""


def source(prefix: str, queue: str) -> str:
    """The ledger's source name of a BullMQ queue (queue names cannot hold ':')."""
    return f"bullmq:{prefix}:{queue}"


class Ledger:
    def __init__(self, jobs: JobQueue) -> None:
        self.jobs = jobs

    async def records(self, conn: Any, refs: Sequence[JobRef]) -> dict[JobRef, ImportRecord]:
        """The records of those of ``refs`` already migrated (read in ``conn``'s transaction)."""
        keys = {
            (source(prefix, queue), job_id): (prefix, queue, job_id)
            for prefix, queue, job_id in refs
        }
        found = await self.jobs.imported(list(keys), connection=conn)
        return {keys[key]: record for key, record in found.items()}

    async def record(self, conn: Any, rows: Sequence[tuple[str, str, str, int, str, str]]) -> None:
        """Rows of (prefix, queue, job id, engine id, state, checksum), in the jobs' transaction."""
        await self.jobs.record_imports(
            [
                ImportRecord(source(prefix, queue), job_id, engine_id, state, checksum)
                for prefix, queue, job_id, engine_id, state, checksum in rows
            ],
            connection=conn,
        )

    async def entries(self, prefix: str, queue: str) -> dict[str, ImportRecord]:
        """Every migrated job of one queue, by BullMQ id."""
        return {r.source_id: r for r in await self.jobs.imports_of(source(prefix, queue))}

    async def engine_ids(self, refs: Sequence[JobRef]) -> dict[JobRef, int]:
        """The engine ids of those of ``refs`` already migrated, in one read."""
        keys = {
            (source(prefix, queue), job_id): (prefix, queue, job_id)
            for prefix, queue, job_id in refs
        }
        found = await self.jobs.imported(list(keys))
        return {keys[key]: record.job_id for key, record in found.items()}
