"""The tracking API dashboards are built on: sub-state counts, job and flow listings, the flow
graph, per-queue stats and metrics. One query per call; everything derived in SQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import asyncpg

from pgjobs import jsonvalue, validation
from pgjobs.backoff import Backoff
from pgjobs.errors import InvalidOption
from pgjobs.executor import Database
from pgjobs.models import (
    FlowEdge,
    FlowFilter,
    FlowNode,
    FlowSummary,
    FlowView,
    JobFilter,
    JobRow,
    MetricsBucket,
    QueueStats,
    Status,
    SubState,
)
from pgjobs.sql import filters

Granularity = Literal["minute", "hour", "day"]
"""The bucket size of ``JobQueue.queue_metrics``."""
JobOrder = Literal["created", "claim", "due", "started", "finished"]
"""How ``JobQueue.list_jobs`` orders its page: by creation, in claim order, by due time, by
start or by finish; every order ends on the id, so a page is stable."""
ORDERS: dict[str, tuple[str, str]] = {
    # order: (first to last, last to first); every one ends on the id, so a page is stable
    "created": ("j.id", "j.id DESC"),
    "claim": ("j.priority DESC, j.run_at, j.id", "j.priority, j.run_at DESC, j.id DESC"),
    "due": ("j.run_at, j.id", "j.run_at DESC, j.id DESC"),
    "started": ("j.started_at NULLS LAST, j.id", "j.started_at DESC NULLS LAST, j.id DESC"),
    "finished": ("j.finished_at NULLS LAST, j.id", "j.finished_at DESC NULLS LAST, j.id DESC"),
}
MAX_PAGE = 1000
MAX_BUCKETS = 50_000
_STEP = {"minute": timedelta(minutes=1), "hour": timedelta(hours=1), "day": timedelta(days=1)}


def job_row(record: asyncpg.Record) -> JobRow:
    values = dict(record)
    for column in (
        "payload",
        "output",
        "metadata",
        "progress",
        "last_error",
        "backoff",
        "retention",
    ):
        values[column] = jsonvalue.loads(values[column])
    values["backoff"] = Backoff.from_json(values["backoff"]).to_json()  # stored without defaults
    values["errors"] = attempt_errors(jsonvalue.loads(values["errors"]), values["last_error"])
    values["status"] = Status(values["status"])
    values["sub_state"] = SubState(values["sub_state"])
    return JobRow(**values)


def attempt_errors(errors: Any, last_error: Any) -> list[Any]:
    """The attempts' errors; for a job whose attempts failed before the column existed
    (migration 0016), its last error, if that was an attempt's."""
    if isinstance(errors, list):
        return errors
    if isinstance(last_error, dict) and "attempt" in last_error:
        return [last_error]
    return []


def _zero_counts() -> dict[SubState, int]:
    return dict.fromkeys(SubState, 0)


def _summary(row: asyncpg.Record) -> FlowSummary:
    counts = {state: int(row[state.value]) for state in SubState}
    return FlowSummary(
        id=row["flow_id"],
        name=row["name"],
        outcome=row["outcome"],
        created_at=row["created_at"],
        finished_at=row["finished_at"],
        total=int(row["total"]),
        counts=counts,
    )


def _page(limit: int, offset: int) -> tuple[int, int]:
    return (
        validation.integer("limit", limit, 1, MAX_PAGE),
        validation.integer("offset", offset, 0, 10_000_000),
    )


class Tracking:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def substate_counts(self, where: JobFilter) -> dict[SubState, int]:
        """How many jobs matching ``where`` are in each sub-state (every sub-state present)."""
        sql, params = filters.where(where, 1, "j", self._db.schema)
        rows = await self._db.fetch("substate_counts", *params, parts={"where": sql})
        counts = _zero_counts()
        for row in rows:
            counts[SubState(row["sub_state"])] += int(row["n"])
        return counts

    async def list_jobs(
        self,
        where: JobFilter,
        *,
        limit: int = 50,
        offset: int = 0,
        oldest_first: bool = False,
        order: JobOrder = "created",
    ) -> list[JobRow]:
        """A page of jobs matching ``where``: by ``order``, newest (or last) first unless
        ``oldest_first``. Orders: ``created`` (insertion), ``claim`` (the order workers take
        them: priority, due time, id; ``oldest_first`` is the next to run first), ``due`` (run
        time), ``started``, ``finished``."""
        limit, offset = _page(limit, offset)
        if order not in ORDERS:
            raise InvalidOption("order", f"must be one of {sorted(ORDERS)}, got {order!r}")
        sql, params = filters.where(where, 3, "j", self._db.schema)
        ordering = ORDERS[order][0 if oldest_first else 1]
        rows = await self._db.fetch(
            "list_jobs", offset, limit, *params, parts={"where": sql, "order": ordering}
        )
        return [job_row(row) for row in rows]

    async def list_flows(
        self, where: FlowFilter, *, limit: int = 50, offset: int = 0
    ) -> list[FlowSummary]:
        """A page of flow summaries, newest first (by their oldest job)."""
        limit, offset = _page(limit, offset)
        sql, params = filters.flow_where(where, 3, self._db.schema)
        rows = await self._db.fetch("list_flows", offset, limit, *params, parts={"where": sql})
        return [_summary(row) for row in rows]

    async def flow_view(
        self, flow_id: int, *, tenant: str | None = None, any_tenant: bool = False
    ) -> FlowView | None:
        """The flow's summary (the same as its list_flows row) and its graph; None if unknown
        (or any of its jobs belongs to another tenant)."""
        if isinstance(flow_id, bool) or not isinstance(flow_id, int):
            return None
        async with self._db.transaction(isolation="repeatable_read", readonly=True) as conn:
            summary = await self._db.fetchrow(
                "flow_summary", flow_id, tenant, any_tenant, conn=conn
            )
            if summary is None:
                return None
            nodes = await self._db.fetch("flow_graph_nodes", flow_id, conn=conn)
            edges = await self._db.fetch("flow_graph_edges", flow_id, conn=conn)
        return FlowView(
            _summary(summary),
            [
                FlowNode(
                    id=n["id"],
                    name=n["name"],
                    kind=n["kind"],
                    queue=n["queue"],
                    status=Status(n["status"]),
                    sub_state=SubState(n["sub_state"]),
                    priority=n["priority"],
                    attempts=n["attempts"],
                    max_attempts=n["max_attempts"],
                    pending_deps=n["pending_deps"],
                    created_at=n["created_at"],
                    started_at=n["started_at"],
                    finished_at=n["finished_at"],
                )
                for n in nodes
            ],
            [
                FlowEdge(e["prerequisite_id"], e["dependent_id"], e["policy"], e["state"])
                for e in edges
            ],
        )

    async def queue_stats(self) -> list[QueueStats]:
        """Every queue that has jobs or settings: its sub-state counts and settings."""
        stats = []
        for row in await self._db.fetch("queue_stats"):
            counts = _zero_counts()
            for state, n in jsonvalue.loads(row["counts"]).items():
                counts[SubState(state)] += int(n)
            stats.append(
                QueueStats(
                    queue=row["queue"],
                    counts=counts,
                    paused=row["paused"],
                    concurrency=row["concurrency"],
                    group_concurrency=row["group_concurrency"],
                    rate_limit=row["rate_limit"],
                    rate_period=row["rate_period"],
                )
            )
        return stats

    async def queue_metrics(
        self, queue: str, granularity: Granularity, start: datetime, end: datetime | None = None
    ) -> list[MetricsBucket]:
        """Completed/dead/cancelled counts of ``queue`` per UTC bucket over [start, end),
        zero-filled, oldest first. Exact across the rollup/live seam; survives GC. Below a
        day, resolution is only kept for the sweep's minute-retention period."""
        if granularity not in _STEP:
            raise InvalidOption(
                "granularity", f"must be 'minute', 'hour' or 'day', got {granularity!r}"
            )
        begin = validation.timestamp("start", start)
        finish = validation.timestamp("end", end) or datetime.now(UTC)
        assert begin is not None
        if finish <= begin:
            raise InvalidOption("end", "must be after start")
        if (finish - begin) / _STEP[granularity] > MAX_BUCKETS:
            raise InvalidOption(
                "start", f"the window holds more than {MAX_BUCKETS} {granularity} buckets"
            )
        rows = await self._db.fetch(
            "queue_metrics", validation.queue(queue), granularity, begin, finish
        )
        return [MetricsBucket(r["bucket"], r["completed"], r["dead"], r["cancelled"]) for r in rows]


__all__ = ["Tracking", "job_row"]
