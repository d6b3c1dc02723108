"""Groups of a queue: the jobs that share a ``group_key``. A queue whose jobs have groups is
served group by group in turn (the claim's rotation, ``sql/schema/groups.sql``); each group can
be paused, capped and rate-limited on its own. Every change here first locks the queue's
settings row, as each claim of a grouped queue does, so a claim sees a change whole or not at
all."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from pgjobs import validation
from pgjobs.config import notify_channel
from pgjobs.errors import InvalidOption
from pgjobs.executor import Database

GroupStatus = Literal["waiting", "limited", "maxed", "paused"]
"""BullMQ Pro's group states: ``waiting`` (has ready jobs and may start one), ``limited`` (its
rate limit's window is full, or it is limited by hand), ``maxed`` (its running jobs reach its
cap), ``paused``."""


@dataclass(frozen=True, slots=True)
class Group:
    """A group of a queue (``JobQueue.list_groups``): its settings, its jobs in flight, and
    its status (None: nothing to run, nothing held)."""

    queue: str
    key: str
    status: GroupStatus | None
    ready: int
    """Pending jobs that are due and held by no prerequisite."""
    delayed: int
    running: int
    paused: bool
    concurrency: int | None
    """Its own cap (``set_group_limits``), before the claim's and the queue's."""
    rate_limit: tuple[int, float] | None
    """Its own limit, (max starts, per seconds), before the claim's."""
    limited_until: datetime | None
    """Set by ``limit_group``: it starts nothing before then."""
    window_count: int
    """Starts in its current window."""
    window_ends: datetime | None
    """When its current window ends (None: no limit applied when it was last served)."""


UNCHANGED: Any = object()
"""The default of a setting left as it is."""


class Groups:
    """The group operations of ``JobQueue`` (pause, limits, listing)."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._channel = notify_channel(db.schema)

    async def pause(self, queue: str, group: str) -> bool:
        """Pause ``group`` (also one with no job yet): its jobs wait, its running ones finish.
        False when it was paused already."""
        async with self._db.transaction() as conn:
            await self._lock(conn, queue)
            return await self._db.fetchrow("pause_group", queue, _key(group), conn=conn) is not None

    async def resume(self, queue: str, group: str) -> bool:
        """Resume ``group``; False when it was not paused (or has never been seen)."""
        async with self._db.transaction() as conn:
            await self._lock(conn, queue)
            row = await self._db.fetchrow("resume_group", queue, _key(group), self._channel,
                                          conn=conn)  # fmt: skip
            return row is not None

    async def set_limits(
        self,
        queue: str,
        group: str,
        *,
        concurrency: int | None = UNCHANGED,
        rate_limit: tuple[int, float] | None = UNCHANGED,
    ) -> None:
        """Set what is given of ``group``'s own cap on running jobs and own rate limit ((max
        starts, per seconds); None clears either). A group's own setting comes before a
        worker's ``group_concurrency`` / ``group_rate_limit`` and the queue's group cap."""
        fields: list[str] = []
        cap = limit = period = None
        if concurrency is not UNCHANGED:
            fields.append("concurrency")
            if concurrency is not None:
                cap = validation.integer("concurrency", concurrency, 1, 2**31 - 1)
        if rate_limit is not UNCHANGED:
            fields.append("rate")
            if rate_limit is not None:
                if not isinstance(rate_limit, tuple) or len(rate_limit) != 2:
                    raise InvalidOption(
                        "rate_limit", f"must be (max starts, per seconds), got {rate_limit!r}"
                    )
                limit, period = validation.rate_limit(*rate_limit, ("rate_limit", "rate_limit"))
        await self._set(queue, group, fields, cap, limit, period, None)

    async def limit_for(self, queue: str, group: str, seconds: float) -> None:
        """Start nothing of ``group`` for ``seconds`` (BullMQ Pro's ``rateLimitGroup``)."""
        delay = validation.delay_seconds(seconds, "seconds")
        if delay is None or not delay > 0:
            raise InvalidOption("seconds", f"must be more than 0, got {seconds!r}")
        await self._set(queue, group, ["limited_until"], None, None, None, delay)

    async def reset(self, queue: str, group: str) -> bool:
        """Clear ``group``'s pause and limits; False when it has never been seen."""
        async with self._db.transaction() as conn:
            await self._lock(conn, queue)
            return await self._db.fetchrow("reset_group", queue, _key(group), conn=conn) is not None

    async def lock(self, queue: str, group: str, connection: Any) -> int:
        """Lock ``group`` until ``connection``'s transaction ends and count its ready jobs:
        a bound on its size checked, then an enqueue in the same transaction, is race-free
        (every other such check waits, then counts what this one added)."""
        key = _key(group)
        await self._db.fetchrow("lock_group", validation.queue(queue), key, conn=connection)
        return int(await self._db.fetchval("group_ready_count", queue, key, conn=connection))

    async def all(
        self, queue: str, group: str | None = None, limit: int | None = None
    ) -> list[Group]:
        """The groups of ``queue`` (or only ``group``; the first ``limit``) in rotation order,
        the next served first."""
        key = None if group is None else _key(group)
        if limit is not None:
            validation.integer("limit", limit, 1, 1_000_000)
        rows = await self._db.fetch("list_groups", validation.queue(queue), key, limit)
        return [_group(queue, row) for row in rows]

    async def _set(
        self,
        queue: str,
        group: str,
        fields: list[str],
        cap: int | None,
        limit: int | None,
        period: float | None,
        delay: float | None,
    ) -> None:
        async with self._db.transaction() as conn:
            await self._lock(conn, queue)
            await self._db.fetchrow(
                "set_group_limits",
                queue,
                _key(group),
                fields,
                cap,
                limit,
                period,
                delay,
                self._channel,
                conn=conn,
            )

    async def _lock(self, conn: Any, queue: str) -> None:
        await self._db.fetchrow("lock_grouped_queue", validation.queue(queue), conn=conn)


def _key(group: Any) -> str:
    text = validation.text("group", group, optional=False)
    assert text is not None
    return text


def _group(queue: str, row: Any) -> Group:
    now: datetime = row["db_now"]
    window_ends = None
    if row["window_start"] is not None and row["window_period"] is not None:
        window_ends = row["window_start"] + timedelta(seconds=row["window_period"])
    status: GroupStatus | None = None
    cap = row["concurrency"] if row["concurrency"] is not None else row["seen_cap"]
    full = (
        window_ends is not None
        and now < window_ends
        and row["window_limit"] is not None
        and row["window_count"] >= row["window_limit"]
    )
    if row["paused_at"] is not None:
        status = "paused"
    elif (row["limited_until"] is not None and row["limited_until"] > now) or full:
        status = "limited"
    elif cap is not None and row["running"] >= cap and row["ready"]:
        status = "maxed"
    elif row["ready"]:
        status = "waiting"
    rate = None
    if row["rate_limit"] is not None:
        rate = (row["rate_limit"], row["rate_period"])
    return Group(
        queue=queue,
        key=row["group_key"],
        status=status,
        ready=row["ready"],
        delayed=row["delayed"],
        running=row["running"],
        paused=row["paused_at"] is not None,
        concurrency=row["concurrency"],
        rate_limit=rate,
        limited_until=row["limited_until"],
        window_count=row["window_count"] if window_ends is not None and now < window_ends else 0,
        window_ends=window_ends if window_ends is not None and now < window_ends else None,
    )
