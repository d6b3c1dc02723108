"""Cron and interval schedules: typed, upserted by name, emitted exactly once per tick by any
number of concurrent schedulers, with no burst of catch-up jobs after downtime."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadCronError, croniter

from pgjobs import jsonvalue, validation
from pgjobs.config import notify_channel
from pgjobs.enqueue import JobSpec, insert_one, prepare
from pgjobs.errors import InvalidOption
from pgjobs.executor import Database
from pgjobs.kinds import Registry

logger = logging.getLogger("pgjobs.schedules")

# Options a schedule may pass to each job it emits (a job key is derived from the tick).
_JOB_OPTIONS = {
    "queue",
    "priority",
    "max_attempts",
    "max_deferrals",
    "name",
    "dedup_key",
    "group_key",
    "tenant",
    "metadata",
    "delay",
    "backoff",  # as a dict ({"type", "delay", "max_delay", "jitter"}): stored as JSON
    "events",
}


_KEY_PREFIX = "job_key_prefix"  # kept beside the job options, not passed to the job


@dataclass(frozen=True, slots=True)
class Schedule:
    name: str
    kind: str
    input: Any
    cron: str | None
    every: float | None
    timezone: str
    start_at: datetime | None
    end_at: datetime | None
    limit: int | None
    emitted: int
    next_run_at: datetime | None
    last_run_at: datetime | None
    options: dict[str, Any]


def _zone(name: str) -> ZoneInfo:
    if not isinstance(name, str) or not name:
        raise InvalidOption("timezone", f"must be an IANA time zone name, got {name!r}")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidOption("timezone", f"unknown time zone {name!r}") from None


def _check_cron(expression: str) -> None:
    if not isinstance(expression, str) or not expression.strip():
        raise InvalidOption("cron", f"must be a cron expression, got {expression!r}")
    fields = len(expression.split())
    if fields not in (5, 6):
        raise InvalidOption(
            "cron", f"needs 5 fields (or 6 with seconds first), got {fields}: {expression!r}"
        )
    try:
        croniter(expression, datetime.now(UTC), second_at_beginning=fields == 6)
    except (CroniterBadCronError, ValueError, KeyError) as exc:
        raise InvalidOption(
            "cron", f"{expression!r} is not a valid cron expression: {exc}"
        ) from None


def next_tick(
    *,
    cron: str | None,
    every: float | None,
    timezone: str,
    after: datetime,
    start_at: datetime | None,
) -> datetime:
    """The first tick strictly after ``after`` (and not before ``start_at``)."""
    base = max(after, start_at - timedelta(microseconds=1)) if start_at else after
    if cron is not None:
        local = base.astimezone(_zone(timezone))
        it = croniter(cron, local, second_at_beginning=len(cron.split()) == 6)
        result: datetime = it.get_next(datetime)
        return result.astimezone(UTC)
    assert every is not None
    if start_at is None:
        return after + timedelta(seconds=every)
    # Interval ticks are anchored at start_at: start_at + k * every.
    if base < start_at:
        return start_at
    periods = math.floor((base - start_at).total_seconds() / every) + 1
    return start_at + timedelta(seconds=periods * every)


class Schedules:
    """Upsert, list and remove schedules; ``emit_due`` emits what is due."""

    def __init__(self, db: Database, registry: Registry) -> None:
        self._db = db
        self._registry = registry
        self._channel = notify_channel(db.schema)

    async def upsert(
        self,
        name: str,
        kind: str,
        input: Any,
        *,
        cron: str | None = None,
        every: float | timedelta | None = None,
        timezone: str = "UTC",
        start_at: datetime | None = None,
        end_at: datetime | None = None,
        limit: int | None = None,
        immediately: bool = False,
        job_name: str | None = None,
        job_key_prefix: str | None = None,
        first_run_at: datetime | None = None,
        emitted: int = 0,
        **job_options: Any,
    ) -> datetime | None:
        """Create or replace schedule ``name``; returns its next run (None if it has none left).

        Exactly one of ``cron`` (5 fields, or 6 with seconds first; in ``timezone``) and
        ``every`` (seconds). ``job_name`` labels each emitted job (default: the kind's
        ``name(input)``). Each emitted job's key is ``schedule:<name>:<tick ISO time>``, or
        ``<job_key_prefix><tick epoch ms>`` when a prefix is given. The kind and input are
        validated now, as are the job options. ``first_run_at`` sets the next run instead of
        computing it, and ``emitted`` the count of runs already made (a new schedule only): an
        import of a schedule from another system keeps its place and its ``limit``.
        """
        validation.text("name", name, optional=False)
        if (cron is None) == (every is None):
            raise InvalidOption("cron", "give exactly one of cron and every")
        _zone(timezone)
        every_seconds = None
        if every is not None:
            every_seconds = validation.delay_seconds(every, "every")
            if not every_seconds:
                raise InvalidOption("every", "must be more than 0 seconds")
        if cron is not None:
            _check_cron(cron)
        validation.timestamp("start_at", start_at)
        validation.timestamp("end_at", end_at)
        if start_at and end_at and end_at <= start_at:
            raise InvalidOption("end_at", "must be after start_at")
        if limit is not None:
            validation.integer("limit", limit, 1, 2**31 - 1)
        if job_name is not None:
            job_options["name"] = (
                job_name  # the label of each emitted job (``name`` is the schedule's)
            )
        unknown = set(job_options) - _JOB_OPTIONS
        if unknown:
            raise InvalidOption(
                sorted(unknown)[0],
                f"is not an option a schedule can pass to its jobs ({sorted(_JOB_OPTIONS)})",
            )
        if "backoff" in job_options and not isinstance(job_options["backoff"], dict | int | float):
            raise InvalidOption(
                "backoff", "a schedule stores its backoff as a dict or a number of seconds"
            )
        spec = JobSpec(kind, input, **job_options)
        prepared = prepare(spec, self._registry)  # validates kind, input and options now
        if job_key_prefix is not None:
            job_options[_KEY_PREFIX] = validation.text("job_key_prefix", job_key_prefix)
        now = datetime.now(UTC)
        if immediately and (start_at is None or start_at <= now):
            first = now
        else:
            first = next_tick(
                cron=cron, every=every_seconds, timezone=timezone, after=now, start_at=start_at
            )
        if first_run_at is not None:
            first = validation.timestamp("first_run_at", first_run_at) or first
        validation.integer("emitted", emitted, 0, 2**31 - 1)
        if end_at is not None and first > end_at:
            first = None  # type: ignore[assignment]
        row = await self._db.fetchrow(
            "upsert_schedule",
            name,
            prepared.kind,
            prepared.payload,
            jsonvalue.dumps(job_options),
            cron,
            every_seconds,
            timezone,
            start_at,
            end_at,
            limit,
            first,
            self._channel,
            emitted,
        )
        assert row is not None
        return row["next_run_at"]  # type: ignore[no-any-return]

    async def list(self) -> list[Schedule]:
        return [_schedule(row) for row in await self._db.fetch("list_schedules")]

    async def get(self, name: str) -> Schedule | None:
        row = await self._db.fetchrow("get_schedule", name)
        return None if row is None else _schedule(row)

    async def remove(self, name: str) -> bool:
        return await self._db.fetchrow("remove_schedule", name) is not None

    async def emit_due(self, *, catch_up: bool = False, batch: int = 100) -> int:
        """Emit one job for each due tick of each due schedule; returns the jobs emitted.

        Safe to run from many processes at once: each due schedule is locked by one of them
        and its next tick is advanced in the same transaction as the enqueue. After downtime
        only the latest missed tick is emitted, unless ``catch_up`` asks for each of them."""
        emitted = 0
        async with self._db.transaction() as conn:
            rows = await self._db.fetch("due_schedules", batch, self._registry.names(), conn=conn)
            for row in rows:
                emitted += await self._emit(conn, row, catch_up)
        return emitted

    async def _emit(self, conn: Any, row: Any, catch_up: bool) -> int:
        job_options = jsonvalue.loads(row["options"])
        key_prefix = job_options.pop(_KEY_PREFIX, None)
        tick: datetime = row["next_run_at"]
        now: datetime = row["db_now"]
        count = 0
        limit = row["emission_limit"]
        while True:
            spec = JobSpec(
                row["kind"],
                jsonvalue.loads(row["payload"]),
                **job_options,
                job_key=(
                    f"schedule:{row['name']}:{tick.isoformat()}"
                    if key_prefix is None
                    else f"{key_prefix}{int(tick.timestamp() * 1000)}"
                ),
            )
            try:
                await insert_one(self._db, prepare(spec, self._registry), conn)
                count += 1
            except Exception:
                logger.exception("schedule %r: could not emit its tick %s", row["name"], tick)
                raise
            nxt: datetime | None = next_tick(
                cron=row["cron"],
                every=row["every_seconds"],
                timezone=row["timezone"],
                after=tick if catch_up else max(tick, now),
                start_at=row["start_at"],
            )
            last = tick
            if limit is not None and row["emitted"] + count >= limit:
                nxt = None
            elif nxt is not None and row["end_at"] is not None and nxt > row["end_at"]:
                nxt = None
            if not catch_up or nxt is None or nxt > now:
                await self._db.fetch("advance_schedule", row["name"], nxt, last, count, conn=conn)
                return count
            tick = nxt

    async def seconds_until_due(self) -> float | None:
        value = await self._db.fetchval("next_schedule_due")
        return None if value is None else float(value)


def _schedule(row: Any) -> Schedule:
    return Schedule(
        name=row["name"],
        kind=row["kind"],
        input=jsonvalue.loads(row["payload"]),
        cron=row["cron"],
        every=row["every_seconds"],
        timezone=row["timezone"],
        start_at=row["start_at"],
        end_at=row["end_at"],
        limit=row["emission_limit"],
        emitted=row["emitted"],
        next_run_at=row["next_run_at"],
        last_run_at=row["last_run_at"],
        options=jsonvalue.loads(row["options"]),
    )


class Scheduler:
    """Runs ``Schedules.emit_due`` whenever a tick is due. Run one per process, or many: each
    tick is emitted once whatever the number of schedulers."""

    def __init__(
        self, schedules: Schedules, *, poll_interval: float = 1.0, catch_up: bool = False
    ) -> None:
        self._schedules = schedules
        self.poll_interval = poll_interval
        self.catch_up = catch_up
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def run(self) -> None:
        while not self._stop.is_set():
            try:
                await self._schedules.emit_due(catch_up=self.catch_up)
                until = await self._schedules.seconds_until_due()
            except Exception:
                # One bad schedule or a lost connection must not stop the loop.
                logger.exception("scheduler: emitting due schedules failed; retrying")
                until = None
            wait = self.poll_interval if until is None else min(self.poll_interval, max(until, 0.0))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), timeout=wait)

    def start(self) -> asyncio.Task[None]:
        self._task = asyncio.create_task(self.run(), name="pgjobs-scheduler")
        return self._task

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task
