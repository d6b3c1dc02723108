"""The tracking API dashboards are built on: sub-state counts, job and flow listings, the flow
graph, per-queue stats and metrics. One query per call; everything derived in SQL."""

from __future__ import annotations

import heapq
import itertools
from dataclasses import replace
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
JobOrder = Literal["created", "claim", "due", "started", "finished", "recent"]
"""How ``JobQueue.list_jobs`` orders its page: by creation, in claim order, by due time, by
start or by finish; every order ends on the id, so a page is stable."""
ORDERS: dict[str, tuple[str, str]] = {
    # order: (first to last, last to first); every one ends on the id, so a page is stable
    "created": ("j.id", "j.id DESC"),
    "claim": ("j.priority DESC, j.run_at, j.id", "j.priority, j.run_at DESC, j.id DESC"),
    "due": ("j.run_at, j.id", "j.run_at DESC, j.id DESC"),
    "started": ("j.started_at NULLS LAST, j.id", "j.started_at DESC NULLS LAST, j.id DESC"),
    # for finished jobs (a job not yet finished sorts after them first to last, before them
    # last to first), in the order of the index of finished jobs, read either way
    "finished": ("j.finished_at, j.id", "j.finished_at DESC, j.id DESC"),
    # the jobs in flight newest first, then the finished ones by finish time, newest first
    # (list_jobs composes it; newest first only)
    "recent": ("", ""),
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


_NO_FILTER = JobFilter()


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


MERGED_ROWS = 20_000
"""A page of several finished sub-states by finish time ending within this many rows is read
one sub-state at a time and merged (list_jobs); a deeper one by one query."""
_FINISHED = (SubState.COMPLETED, SubState.FAILED, SubState.CANCELLED)
_IN_FLIGHT = tuple(s for s in SubState if s not in _FINISHED)


def _finished_states(sub_state: Any) -> tuple[SubState, ...]:
    """The sub-states of a filter's ``sub_state`` when all are finished ones; () otherwise."""
    if not isinstance(sub_state, tuple):
        return ()
    try:
        states = tuple(dict.fromkeys(SubState(s) for s in sub_state))
    except ValueError:
        return ()
    return states if all(s in _FINISHED for s in states) else ()


def _states(sub_state: Any) -> tuple[Any, ...]:
    """A filter's ``sub_state`` as a tuple (None: no sub-state named)."""
    if sub_state is None:
        return ()
    return tuple(sub_state) if isinstance(sub_state, tuple | list) else (sub_state,)


def _in_flight_only(where: JobFilter) -> bool:
    """Whether ``where`` names only jobs in flight (by sub-state or status)."""
    states = _states(where.sub_state)
    if states:
        try:
            return all(SubState(s) in _IN_FLIGHT for s in states)
        except ValueError:
            return False
    if where.status is None:
        return False
    statuses = where.status if isinstance(where.status, tuple) else (where.status,)
    try:
        return all(Status(s) in (Status.PENDING, Status.RUNNING) for s in statuses)
    except ValueError:
        return False


BY_ID_IN_FLIGHT = ("j.id + 0", "j.id + 0 DESC")
"""Order ``created`` for jobs in flight: never by walking the primary key, which reads the
whole history of a queue that has few or none in flight (the plan the statistics choose once
many jobs were in flight somewhere), but from the partial indexes, then sorted."""


def _finish_key(row: JobRow) -> tuple[datetime, int]:
    assert row.finished_at is not None  # a finished sub-state's rows
    return (row.finished_at, row.id)


def _page(limit: int, offset: int) -> tuple[int, int]:
    return (
        validation.integer("limit", limit, 1, MAX_PAGE),
        validation.integer("offset", offset, 0, 10_000_000),
    )


class Tracking:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def substate_counts(self, where: JobFilter) -> dict[SubState, int]:
        """How many jobs matching ``where`` are in each sub-state (every sub-state present).
        A filter on the queue alone, or none, reads the finished counts (``queue_counts``):
        its time does not grow with the history."""
        if replace(where, queue=None) == _NO_FILTER:
            if where.queue is not None:
                return await self.queue_counts(where.queue)
            counts = _zero_counts()
            for row in await self._db.fetch("all_counts"):
                counts[SubState(row["sub_state"])] += int(row["n"])
            return counts
        sql, params = filters.where(where, 1, "j", self._db.schema)
        rows = await self._db.fetch("substate_counts", *params, parts={"where": sql})
        counts = _zero_counts()
        for row in rows:
            counts[SubState(row["sub_state"])] += int(row["n"])
        return counts

    async def queue_counts(self, queue: str) -> dict[SubState, int]:
        """How many jobs of ``queue`` are in each sub-state: in time proportional to its jobs
        in flight (finished ones are counted as they finish), exact."""
        counts = _zero_counts()
        for row in await self._db.fetch("queue_counts", queue):
            counts[SubState(row["sub_state"])] += int(row["n"])
        return counts

    async def fold_finished_counts(self) -> int:
        """Fold the finished counts into one row per queue and status (what workers do every
        FOLD_SECONDS); how many rows were folded (0 when another session is folding)."""
        return int(await self._db.fetchval("fold_finished_counts"))

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
        time), ``started``, ``finished``, ``recent`` (in flight newest first, then finished
        newest first: a queue's latest jobs without reading its history, see ``_recent``)."""
        limit, offset = _page(limit, offset)
        if order not in ORDERS:
            raise InvalidOption("order", f"must be one of {sorted(ORDERS)}, got {order!r}")
        if order == "recent":
            return await self._recent(where, offset, limit, oldest_first)
        ordering = ORDERS[order][0 if oldest_first else 1]
        if order == "created" and _in_flight_only(where):
            ordering = BY_ID_IN_FLIGHT[0 if oldest_first else 1]
        states = _finished_states(where.sub_state)
        if order == "finished" and len(states) > 1 and offset + limit <= MERGED_ROWS:
            # Several finished sub-states by finish time: each read in order from the index of
            # finished jobs and merged here, rather than all of them gathered and sorted.
            parts = [await self._fetch(replace(where, sub_state=s), 0, offset + limit, ordering)
                     for s in states]  # fmt: skip
            merged = heapq.merge(*parts, key=_finish_key, reverse=not oldest_first)
            return list(itertools.islice(merged, offset, offset + limit))
        return await self._fetch(where, offset, limit, ordering)

    async def _recent(
        self, where: JobFilter, offset: int, limit: int, oldest_first: bool
    ) -> list[JobRow]:
        """Order ``recent``: what a queue holds now, newest first (its jobs in flight by id,
        read from the partial indexes that hold them), then its history by finish time (read
        from the index of finished jobs): time proportional to the jobs in flight and the
        page, not to the history, where ``created`` walks every newer job of every queue."""
        if oldest_first:
            raise InvalidOption("oldest_first", "order 'recent' lists newest first only")
        if where.sub_state is not None or where.status is not None:
            raise InvalidOption("order", "'recent' lists every state: no status or sub_state")
        live = await self._fetch(
            replace(where, sub_state=_IN_FLIGHT), offset, limit, BY_ID_IN_FLIGHT[1]
        )
        if len(live) == limit:
            return live
        if live or offset == 0:
            in_flight = offset + len(live)
        else:  # the page starts past the jobs in flight: how many there are
            counts = await self.substate_counts(replace(where, sub_state=_IN_FLIGHT))
            in_flight = sum(counts.values())
        history = await self.list_jobs(
            replace(where, sub_state=tuple(_FINISHED)), limit=limit - len(live),
            offset=max(offset - in_flight, 0), order="finished",
        )  # fmt: skip
        return live + history

    async def _fetch(
        self, where: JobFilter, offset: int, limit: int, ordering: str
    ) -> list[JobRow]:
        if where.history_since is not None and _finished_states(_states(where.sub_state)):
            # finished jobs only: the bound as a range the index of finished jobs stops at
            since = where.history_since
            if where.finished_after is not None:
                since = max(since, where.finished_after)
            where = replace(where, history_since=None, finished_after=since)
        sql, params = filters.where(where, 3, "j", self._db.schema)
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
                    label=row["label"],
                    dialect=row["dialect"],
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
