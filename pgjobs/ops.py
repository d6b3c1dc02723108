"""Operator actions: cancel, requeue, promote, edit, logs and purge. Each decides in one
transaction; ids-based actions are scoped to a tenant unless ``any_tenant`` is set."""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from pgjobs import jsonvalue, validation
from pgjobs.config import notify_channel
from pgjobs.errors import InvalidOption
from pgjobs.executor import Connection, Database
from pgjobs.kinds import Registry
from pgjobs.models import JobFilter, LogLine, LogPage, PurgeResult
from pgjobs.schedules import SCHEDULE_RUN_KEY
from pgjobs.sql import filters

T = TypeVar("T")
PriorityPlace = Literal["keep", "first", "last"]
"""Where ``change_priority`` puts a job waiting its turn among the jobs of its new priority:
where its due time puts it (``keep``), before them all (``first``), after them all (``last``)."""
RunningPolicy = Literal["skip", "expired", "cancel"]
"""What a purge does with running jobs: ``skip`` them, delete those whose lease has run out
(``expired``: their worker stopped heartbeating, or never renews a job it took by hand), or
delete them all (``cancel``)."""
MAX_LOG_LINE_BYTES = 64 * 1024


class Operations:
    """The operator API over one Database; JobQueue exposes these methods."""

    def __init__(self, db: Database, registry: Registry) -> None:
        self._db = db
        self._registry = registry
        self._channel = notify_channel(db.schema)

    # -- cancel -----------------------------------------------------------------------------

    async def cancel(
        self,
        job_ids: list[int],
        *,
        tenant: str | None,
        any_tenant: bool,
        connection: Connection | None = None,
    ) -> list[int]:
        async def work(conn: Connection) -> list[int]:
            rows = await self._db.fetch(
                "cancel_jobs", job_ids, tenant, any_tenant, self._channel, conn=conn
            )
            return [row["id"] for row in rows]

        return await self._db.in_transaction(work, connection)

    async def cancel_where(
        self, where: JobFilter, connection: Connection | None = None
    ) -> list[int]:
        """Cancel every pending or running job matching ``where`` (as it stands when the call
        reads it), in one transaction; returns the ids cancelled."""
        sql, params = filters.where(where, 1, "j", self._db.schema)

        async def work(conn: Connection) -> list[int]:
            ids = [
                row["id"]
                for row in await self._db.fetch(
                    "in_flight_ids_where", *params, conn=conn, parts={"where": sql}
                )
            ]
            if not ids:
                return []
            rows = await self._db.fetch(
                "cancel_jobs", ids, where.tenant, where.tenant is None, self._channel, conn=conn
            )
            return [row["id"] for row in rows]

        return await self._db.in_transaction(work, connection)

    async def cancel_flow(self, flow_id: int, *, tenant: str | None, any_tenant: bool) -> list[int]:
        async def work(conn: Connection) -> list[int]:
            ids = [
                row["id"]
                for row in await self._db.fetch(
                    "flow_job_ids", flow_id, ["pending", "running"], tenant, any_tenant, conn=conn
                )
            ]
            rows = await self._db.fetch(
                "cancel_jobs", ids, tenant, any_tenant, self._channel, conn=conn
            )
            return [row["id"] for row in rows]

        return await self._db.in_transaction(work)

    # -- re-drive ---------------------------------------------------------------------------

    async def requeue(
        self,
        where: JobFilter,
        connection: Connection | None = None,
        *,
        reset: bool = True,
        clear_outcome: bool = False,
    ) -> list[int]:
        sql, params = filters.where(where, 3, "j", self._db.schema)

        async def work(conn: Connection) -> list[int]:
            rows = await self._db.fetch(
                "requeue_where", reset, clear_outcome, *params, conn=conn, parts={"where": sql}
            )
            queues = sorted({row["queue"] for row in rows})
            if queues:
                await self._db.fetch("notify_queues", queues, self._channel, conn=conn)
            return [row["id"] for row in rows]

        return await self._db.in_transaction(work, connection)

    async def promote(self, job_id: int, *, tenant: str | None, any_tenant: bool) -> bool:
        row = await self._db.fetchrow("promote", job_id, tenant, any_tenant, self._channel)
        return row is not None

    async def duplicate(self, job_id: int, *, tenant: str | None, any_tenant: bool) -> int | None:
        return await self._db.fetchval(  # type: ignore[no-any-return]
            "duplicate_job", job_id, tenant, any_tenant, self._channel, SCHEDULE_RUN_KEY
        )

    # -- edits ------------------------------------------------------------------------------

    async def update_payload(
        self, job_id: int, data: Any, *, tenant: str | None, any_tenant: bool
    ) -> bool:
        kind_name = await self._db.fetchval("job_kind", job_id, tenant, any_tenant)
        if kind_name is None:
            return False
        if kind_name in self._registry:
            kind = self._registry.get(kind_name)
            payload = kind.encode(kind.validate(data))
        else:  # a process that does not run this kind (the dashboard): any storable JSON
            payload = jsonvalue.dumps(data)
        return (
            await self._db.fetchrow("update_payload", job_id, tenant, any_tenant, payload)
            is not None
        )

    async def change_priority(
        self,
        job_id: int,
        priority: int,
        *,
        place: PriorityPlace,
        tenant: str | None,
        any_tenant: bool,
    ) -> bool:
        value = validation.priority(priority)
        if place not in ("keep", "first", "last"):
            raise InvalidOption("place", f"must be 'keep', 'first' or 'last', got {place!r}")
        row = await self._db.fetchrow("change_priority", job_id, tenant, any_tenant, value, place)
        return row is not None

    # -- logs -------------------------------------------------------------------------------

    async def append_log(
        self, job_id: int, line: str, *, keep_last: int | None, tenant: str | None, any_tenant: bool
    ) -> int:
        text = _log_line(line)
        if keep_last is not None:
            validation.integer("keep_last", keep_last, 1, 1_000_000)
        lines = await self._db.fetchval("append_log", job_id, tenant, any_tenant, text, keep_last)
        return int(lines or 0)

    async def update_progress(
        self, job_id: int, value: Any, *, tenant: str | None, any_tenant: bool
    ) -> bool:
        try:
            encoded = jsonvalue.dumps(value)
        except jsonvalue.NotJson as exc:
            raise InvalidOption("progress", str(exc)) from None
        row = await self._db.fetchrow("set_progress_unfenced", job_id, tenant, any_tenant, encoded)
        return row is not None

    async def read_logs(
        self,
        job_id: int,
        *,
        offset: int,
        limit: int,
        newest_first: bool = False,
        tenant: str | None,
        any_tenant: bool,
    ) -> LogPage:
        validation.integer("offset", offset, 0, 2**31 - 1)
        validation.integer("limit", limit, 1, 10_000)
        query = "read_logs_newest_first" if newest_first else "read_logs"
        rows = await self._db.fetch(query, job_id, tenant, any_tenant, offset, limit)
        lines = [LogLine(row["line"], row["created_at"]) for row in rows]
        return LogPage(lines, rows[0]["total"] if rows else 0)

    # -- purge ------------------------------------------------------------------------------

    async def purge(
        self,
        where: JobFilter,
        running: RunningPolicy,
        connection: Connection | None = None,
        removed_events: bool = True,
        take_dependents: bool = False,
    ) -> PurgeResult:
        if running not in ("skip", "expired", "cancel"):
            raise InvalidOption(
                "running", f"must be 'skip', 'expired' or 'cancel', got {running!r}"
            )
        sql, params = filters.where(where, 2, "j", self._db.schema)
        count_sql, count_params = filters.where(where, 1, "j", self._db.schema)

        async def work(conn: Connection) -> PurgeResult:
            locked = await self._db.fetch(
                "purge_lock", running, *params, conn=conn, parts={"where": sql}
            )
            ids = [row["id"] for row in locked]
            deleted = await self._db.fetchval(
                "remove_jobs", ids, self._channel, not removed_events, take_dependents, conn=conn
            )
            # Counted after the cascades: a running row this purge cancelled is not "skipped".
            skipped = 0
            if running != "cancel":
                skipped = await self._db.fetchval(
                    "count_running_where", *count_params, conn=conn, parts={"where": count_sql}
                )
            return PurgeResult(int(deleted), int(skipped))

        return await self._db.in_transaction(work, connection)


def _log_line(line: Any) -> str:
    if not isinstance(line, str):
        raise InvalidOption("line", f"must be a string, got {type(line).__name__}")
    text = jsonvalue.strip_nul(line)
    if len(text.encode("utf-8", "replace")) > MAX_LOG_LINE_BYTES:
        raise InvalidOption("line", f"must be at most {MAX_LOG_LINE_BYTES} bytes")
    return text
