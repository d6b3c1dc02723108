"""Queue settings: pause, a fleet-wide rate limit and concurrency caps, enforced in the claim."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pgjobs import events, validation
from pgjobs.config import notify_channel
from pgjobs.errors import InvalidOption
from pgjobs.executor import Database
from pgjobs.models import QueueDescription


@dataclass(frozen=True, slots=True)
class QueueSettings:
    """A queue's stored settings (``JobQueue.queue_settings``): the paused flag, the
    concurrency and group caps, the rate limit and its current window, the stall budget."""

    queue: str
    paused: bool = False
    concurrency: int | None = None
    group_concurrency: int | None = None
    rate_limit: int | None = None
    rate_period: float | None = None
    limited_until: datetime | None = None
    max_stalls: int | None = None
    """Stall budget: None, a stalled job's attempt counts; n, stalls give their attempt back and
    the job fails once it has stalled more than n times."""
    window_start: datetime | None = None
    """When the rate limit's current window began (None before the first job it admitted);
    the window ends ``rate_period`` seconds later."""
    window_count: int = 0
    """Jobs the rate limit admitted in the current window: once it reaches ``rate_limit``,
    the queue hands out nothing more until the window ends."""
    worker_window_end: datetime | None = None
    """When the window shared by the workers with a rate limit of their own (``Worker``'s
    ``rate_limit``) ends; None before any such worker claimed here. Not a setting: no limit is
    stored, each worker's goes with its claims."""
    worker_window_count: int = 0
    """Jobs those workers started in that window (meaningful until ``worker_window_end``)."""


DIALECTS = frozenset({None, "bullmq"})
"""The words a queue is shown in: None, the engine's; ``"bullmq"``, BullMQ's."""


def _cap(option: str, value: Any) -> int | None:
    return None if value is None else validation.integer(option, value, 1, 1_000_000)


class QueueControl:
    def __init__(self, db: Database) -> None:
        self._db = db
        self._channel = notify_channel(db.schema)

    async def _set(self, queue: str, fields: list[str], conn: Any = None, **values: Any) -> None:
        await self._db.fetchrow(
            "upsert_queue_setting",
            validation.queue(queue),
            fields,
            values.get("paused"),
            values.get("concurrency"),
            values.get("group_concurrency"),
            values.get("rate_limit"),
            values.get("rate_period"),
            values.get("limited_until"),
            self._channel,
            values.get("max_stalls"),
            conn=conn,
        )

    async def pause(self, queue: str) -> None:
        """Stop handing out the queue's jobs; a ``paused`` event is logged with the change."""
        async with self._db.transaction() as conn:
            await self._set(queue, ["paused"], conn, paused=True)
            await events.publish(self._db, queue, "paused", conn=conn)

    async def resume(self, queue: str) -> None:
        async with self._db.transaction() as conn:
            await self._set(queue, ["paused"], conn, paused=False)
            await events.publish(self._db, queue, "resumed", conn=conn)

    async def set_concurrency(self, queue: str, limit: int | None) -> None:
        await self._set(queue, ["concurrency"], concurrency=_cap("concurrency", limit))

    async def set_group_concurrency(self, queue: str, limit: int | None) -> None:
        await self._set(
            queue, ["group_concurrency"], group_concurrency=_cap("group_concurrency", limit)
        )

    async def set_rate_limit(
        self, queue: str, max_jobs: int | None, per_seconds: float | None = None
    ) -> None:
        if max_jobs is None:
            await self._set(queue, ["rate"])
            return
        max_jobs, period = validation.rate_limit(max_jobs, per_seconds)
        await self._set(queue, ["rate"], rate_limit=max_jobs, rate_period=period)

    async def set_max_stalls(self, queue: str, limit: int | None) -> None:
        stalls = None if limit is None else validation.integer("max_stalls", limit, 0, 1_000_000)
        await self._set(queue, ["max_stalls"], max_stalls=stalls)

    async def clear_limit(self, queue: str) -> None:
        """End a ``limit_for`` now."""
        await self._set(queue, ["limited_until"], limited_until=None)

    async def limit_for(self, queue: str, seconds: float) -> None:
        """Hand out nothing from ``queue`` for ``seconds`` (BullMQ's ``rateLimit(ms)``)."""
        delay = validation.delay_seconds(seconds, "seconds")
        await self._db.fetchval("limit_queue_for", validation.queue(queue), delay)

    async def settings(self, queue: str) -> QueueSettings:
        rows = await self._db.fetch("queue_settings", [validation.queue(queue)])
        if not rows:
            return QueueSettings(queue)
        row = rows[0]
        return QueueSettings(
            queue=row["queue"],
            paused=row["paused"],
            concurrency=row["concurrency"],
            group_concurrency=row["group_concurrency"],
            rate_limit=row["rate_limit"],
            rate_period=row["rate_period"],
            limited_until=row["limited_until"],
            max_stalls=row["max_stalls"],
            window_start=row["window_start"],
            window_count=row["window_count"],
            worker_window_end=row["worker_window_end"],
            worker_window_count=row["worker_window_count"],
        )

    async def describe(self, queue: str, label: str | None, dialect: str | None) -> None:
        """Record ``queue``'s label and dialect; nothing is written when they are already so
        (a producer or worker describes its queue each time it starts)."""
        queue = validation.queue(queue)
        if dialect not in DIALECTS:
            raise InvalidOption(
                "dialect", f"must be one of {sorted(DIALECTS, key=str)}, got {dialect!r}"
            )
        if label is not None and not isinstance(label, str):
            raise InvalidOption("label", f"must be a string or None, got {label!r}")
        row = await self._db.fetchrow("queue_description", queue)
        if row is None or (row["label"], row["dialect"]) != (label, dialect):
            await self._db.execute("describe_queue", queue, label, dialect)

    async def descriptions(self) -> list[QueueDescription]:
        rows = await self._db.fetch("queue_descriptions")
        return [QueueDescription(r["queue"], r["label"], r["dialect"]) for r in rows]
