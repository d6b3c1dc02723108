"""Cron and interval schedules: typed, upserted by name, emitted exactly once per tick by any
number of concurrent schedulers, with no burst of catch-up jobs after downtime.

A schedule is emitted in one of two ways. By default a scheduler loop (``Scheduler``, any
number of them) enqueues each tick's job when it is due. A *materialized* schedule (BullMQ's
job schedulers) instead keeps its next run as a pending job: created when the schedule is
upserted, and whenever a worker starts the current run it creates the next one. No loop is
needed, and the next run is a job one can read, promote or remove.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import asyncpg
from croniter import CroniterBadCronError, croniter

from pgjobs import jsonvalue, validation
from pgjobs.config import notify_channel
from pgjobs.enqueue import JobSpec, insert_one, prepare
from pgjobs.errors import InvalidOption, PoolClosed, ScheduleTickTaken
from pgjobs.executor import Database
from pgjobs.kinds import Registry
from pgjobs.models import Keep

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
    "keep_completed",  # a Keep, stored as a dict of its count and age
    "keep_dead",
}
_KEEP_OPTIONS = ("keep_completed", "keep_dead")

SCHEDULE_RUN_KEY = "schedule_run"
"""The key of the metadata each run of a schedule carries (when its metadata is a dict, or
none): ``{"iteration": n}``, the run's place in the schedule's count (``Schedule.emitted``
once it was made)."""


_KEY_PREFIX = "job_key_prefix"  # kept beside the job options, not passed to the job
MAX_KEY_COLLISIONS = 32
"""Runs of a materialized schedule whose tick's job key is taken (by a finished job of an
earlier schedule of that name) move to the next tick, this many times at most."""


@dataclass(frozen=True, slots=True)
class Schedule:
    """A stored schedule (``JobQueue.get_schedule``, ``list_schedules``): what it enqueues, on
    which cron expression or interval, its bounds, how many jobs it has emitted, and its next
    and last run."""

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
    materialized: bool = False
    pending_job_id: int | None = None
    """For a materialized schedule: the job of its next run (None once none is left)."""
    paused: bool = False
    """Paused (``pause_schedule``): it emits nothing until resumed or upserted again."""


@dataclass(frozen=True, slots=True)
class RunNow:
    """What ``JobQueue.run_schedule_now`` did: the job it added (a materialized schedule's
    copy of its pending run), or None (the schedulers emit the run), and the time the
    schedule's next run was due at before."""

    job_id: int | None
    was_due_at: datetime | None


def _zone(name: str) -> ZoneInfo:
    if not isinstance(name, str) or not name:
        raise InvalidOption("timezone", f"must be an IANA time zone name, got {name!r}")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidOption("timezone", f"unknown time zone {name!r}") from None


def _timing(cron: str | None, every: float | timedelta | None, timezone: str) -> float | None:
    """Check a schedule's timing: exactly one of ``cron`` (valid, read in ``timezone``) and
    ``every`` (more than 0 seconds); ``every`` in seconds, None for a cron schedule."""
    if (cron is None) == (every is None):
        raise InvalidOption("cron", "give exactly one of cron and every")
    _zone(timezone)
    if cron is not None:
        _check_cron(cron)
        return None
    seconds = validation.delay_seconds(every, "every")
    if not seconds:
        raise InvalidOption("every", "must be more than 0 seconds")
    return seconds


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
        materialize: bool = False,
        pending_job_id: int | None = None,
        refuse_taken_tick: bool = False,
        take_started_tick: bool = False,
        keep_waiting_run: int | None = None,
        connection: Any = None,
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

        With ``materialize``, the next run is enqueued now as a pending job (due at its tick),
        in the same transaction, replacing a pending run of an earlier upsert that has not
        started; ``get_schedule(name).pending_job_id`` names it. ``pending_job_id`` adopts an
        existing job as that run instead (an import of a schedule whose next run came across
        as a job), its tick being ``first_run_at``. A run whose tick's job key is taken (by a
        job of an earlier schedule of that name) moves to the next tick, up to
        ``MAX_KEY_COLLISIONS`` times, then ``ScheduleTickTaken`` is raised; with
        ``refuse_taken_tick`` it is raised at once when this upsert replaced no pending run
        (BullMQ refuses so a pattern scheduler whose tick's job exists). With
        ``take_started_tick``, when this upsert replaced a pending run, a run of this schedule
        that has started (running or finished) and holds the tick's job key gives it up to the
        new run: it keeps its status and its writes, without a key (BullMQ's pattern scheduler
        overwrites the job of that id). With
        ``keep_waiting_run`` (a priority), a pending run that is due, of that priority, in a
        queue that is paused, is not replaced: it stays, no longer the schedule's run, and runs
        once the queue resumes (as BullMQ's upsert leaves a waiting iteration of a paused
        queue). Nothing is written when it raises.

        ``keep_completed`` and ``keep_dead`` (a ``Keep``, or a dict of its count and age) apply
        to every run. Each run's metadata (a dict, or none) carries ``SCHEDULE_RUN_KEY``.
        ``connection``: in that connection's transaction (a savepoint of it).
        """
        validation.text("name", name, optional=False)
        every_seconds = _timing(cron, every, timezone)
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
        for option in _KEEP_OPTIONS:
            if option in job_options:
                job_options[option] = _stored_keep(option, job_options[option])
        spec = JobSpec(kind, input, **_spec_options(job_options))
        prepared = prepare(spec, self._registry)  # validates kind, input and options now
        if keep_waiting_run is not None:
            validation.priority(keep_waiting_run)
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
        arguments = (
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
            materialize,
        )
        if not materialize:
            row = await self._db.fetchrow("upsert_schedule", *arguments, conn=connection)
            assert row is not None
            return row["next_run_at"]  # type: ignore[no-any-return]

        async def materialized(conn: Any) -> datetime | None:
            row = await self._db.fetchrow("upsert_schedule", *arguments, conn=conn)
            assert row is not None
            locked = await self._db.fetchrow("lock_schedule", name, conn=conn)
            assert locked is not None
            replaced = 0
            if row["pending_job_id"] is not None and row["pending_job_id"] != pending_job_id:
                gone = await self._db.fetch(
                    "remove_unstarted_job", row["pending_job_id"], keep_waiting_run, conn=conn
                )
                replaced = len(gone)
            if pending_job_id is not None:
                await self._db.fetch("mark_schedule_run", pending_job_id, name, conn=conn)
                await self._db.fetch(
                    "set_pending_run", name, pending_job_id, first, -replaced, None, conn=conn
                )
                return first
            if row["next_run_at"] is None:
                await self._db.fetch(
                    "set_pending_run", name, None, None, -replaced, None, conn=conn
                )
                return None
            job_id, tick = await self._enqueue_run(
                conn,
                locked,
                row["next_run_at"],
                iteration=locked["emitted"] + 1 - replaced,
                refuse_taken=refuse_taken_tick and not replaced,
                take_started=take_started_tick and replaced > 0,
            )
            await self._db.fetch(
                "set_pending_run", name, job_id, tick, 1 - replaced, None, conn=conn
            )
            return tick

        return await self._db.in_transaction(materialized, connection)

    async def list(self) -> list[Schedule]:
        return [_schedule(row) for row in await self._db.fetch("list_schedules")]

    async def get(
        self, name: str, connection: Any = None, *, lock: bool = False
    ) -> Schedule | None:
        if lock and connection is None:
            raise InvalidOption("lock", "locks a schedule in a transaction: give its connection")
        query = "lock_schedule" if lock else "get_schedule"
        row = await self._db.fetchrow(query, name, conn=connection)
        return None if row is None else _schedule(row)

    async def remove(self, name: str, connection: Any = None) -> bool:
        """Remove the schedule (and a materialized one's pending run, unless it has started);
        False if there was none. ``connection``: in that connection's transaction."""
        return await self.remove_counting_runs(name, connection) is not None

    async def remove_counting_runs(self, name: str, connection: Any = None) -> int | None:
        """``remove``, returning how many pending runs went with the schedule (0 or 1); None
        if there was no such schedule."""
        row = await self._db.fetchrow("remove_schedule", name, conn=connection)
        return None if row is None else int(row["runs_removed"])

    async def pause(self, name: str, connection: Any = None) -> bool:
        """Stop emitting runs of ``name`` until ``resume`` (or an upsert, which redefines it);
        a materialized schedule's pending run is removed unless it has started. False when
        there is no such schedule or it is paused already. Under the schedule's row lock, as a
        run's start making the next run is, so the two never cross: whichever comes second
        sees what the first did (no pending run is left either way)."""
        return await self._db.in_transaction(lambda conn: self._pause(name, conn), connection)

    async def _pause(self, name: str, conn: Any) -> bool:
        row = await self._db.fetchrow("lock_schedule", name, conn=conn)
        if row is None or row["paused_at"] is not None:
            return False
        removed = 0
        if row["materialized"] and row["pending_job_id"] is not None:
            gone = await self._db.fetch(
                "remove_unstarted_job", row["pending_job_id"], None, conn=conn
            )
            removed = len(gone)
        await self._db.fetch("pause_schedule", name, removed, conn=conn)
        return True

    async def run_now(self, name: str) -> RunNow | None:
        """Run schedule ``name`` once now, outside its ticks. A materialized schedule's pending
        run is copied (``duplicate_job``): one job with the same kind, input and options, due
        now, keyless and counted as no run of the schedule, whose pending run keeps its time
        (as bull-board's "Run now" adds a job from a BullMQ scheduler's template). Another
        schedule's next tick moves to now: the schedulers emit it as a run of the schedule and
        go on from the tick after now, so no later run is skipped. None when the schedule does
        not exist, is paused or has no run left."""
        row = await self._db.fetchrow("get_schedule", name)
        if row is None:
            return None
        schedule = _schedule(row)
        if schedule.paused:
            return None
        if not schedule.materialized:
            moved = await self._db.fetchrow("run_schedule_now", name, self._channel)
            return None if moved is None else RunNow(None, moved["replaced"])
        if schedule.pending_job_id is None:
            return None
        copy = await self._db.fetchval(
            "duplicate_job", schedule.pending_job_id, None, True, self._channel, SCHEDULE_RUN_KEY
        )
        return None if copy is None else RunNow(copy, schedule.next_run_at)

    async def retime(
        self,
        name: str,
        *,
        cron: str | None = None,
        every: float | timedelta | None = None,
        timezone: str = "UTC",
        connection: Any = None,
    ) -> datetime | None:
        """Repeat schedule ``name`` on ``cron`` (in ``timezone``) or ``every`` seconds from now
        on, keeping its kind, input, job options, bounds and count; returns its next run (None:
        none left, or no such schedule). A materialized schedule's pending run, not started, is
        the same job moved to the new next run, under that run's job key, in the same
        transaction; nothing is written when it raises (``InvalidOption`` naming ``cron`` or
        ``every``, ``ScheduleTickTaken`` when the new run's job key is another job's). Needs no
        registry. A BullMQ job scheduler keeps the repeat options it was upserted with in its
        metadata, which the facade reports: re-time it with ``upsertJobScheduler``.

        Under the schedule's row lock, as a run's start making the next run is. A pending run
        that a claim starts first keeps its time and key (the move finds it running and
        leaves it); the run its start makes then follows the new timing. A claim after the
        move finds the run not yet due. ``connection``: in that connection's transaction."""
        every_seconds = _timing(cron, every, timezone)
        if cron is None:
            timezone = "UTC"  # an interval has no zone

        async def work(conn: Any) -> datetime | None:
            row = await self._db.fetchrow("lock_schedule", name, conn=conn)
            if row is None:
                return None
            tick: datetime | None = next_tick(
                cron=cron, every=every_seconds, timezone=timezone, after=row["db_now"],
                start_at=row["start_at"],
            )  # fmt: skip
            limit = row["emission_limit"]
            if (limit is not None and row["emitted"] >= limit) or (
                tick is not None and row["end_at"] is not None and tick > row["end_at"]
            ):
                tick = None
            await self._db.fetch(
                "retime_schedule", name, cron, every_seconds, timezone, tick, conn=conn
            )
            pending = row["pending_job_id"]
            if row["materialized"] and pending is not None and tick is None:  # none left
                gone = await self._db.fetch("remove_unstarted_job", pending, None, conn=conn)
                await self._db.fetch(
                    "set_pending_run", name, None, None, -len(gone), None, conn=conn
                )
            elif row["materialized"] and pending is not None and tick is not None:
                options = jsonvalue.loads(row["options"])
                key = _run_key(name, options.get(_KEY_PREFIX), tick)
                try:  # the transaction rolls back: nothing is written
                    await self._db.fetch("retime_pending_run", pending, tick, key, conn=conn)
                except asyncpg.UniqueViolationError:
                    raise ScheduleTickTaken(name, key, 1) from None
            await self._db.fetch("notify_schedules", self._channel, conn=conn)
            return tick

        return await self._db.in_transaction(work, connection)

    async def resume(self, name: str) -> datetime | None:
        """Emit runs of a paused ``name`` again, from its next time not yet past (the runs
        missed while paused are skipped); returns that time (None: none left, or not paused)."""
        async with self._db.transaction() as conn:
            row = await self._db.fetchrow("lock_schedule", name, conn=conn)
            if row is None or row["paused_at"] is None:
                return None
            tick: datetime | None = row["next_run_at"]
            if tick is not None and tick <= row["db_now"]:
                tick = self._after(row, tick, now=row["db_now"])
            await self._db.fetch("resume_schedule", name, tick, conn=conn)
            if row["materialized"] and tick is not None:
                job_id, tick = await self._enqueue_run(
                    conn, row, tick, iteration=row["emitted"] + 1
                )
                await self._db.fetch("set_pending_run", name, job_id, tick, 1, None, conn=conn)
            if tick is not None:
                await self._db.fetch("notify_schedules", self._channel, conn=conn)
            return tick

    async def advance(self, name: str, job_id: int) -> None:
        """Run ``job_id`` of materialized schedule ``name`` counts as started: make the next
        run, if ``job_id`` is still its pending run (``started`` does it for claimed jobs; this,
        for a run someone handles another way). The run itself is left as it is."""
        await self._advance(name, job_id)

    async def started(self, rows: Sequence[Any]) -> None:
        """Claimed jobs have started: for each that is the pending run of a materialized
        schedule, enqueue that schedule's next run. Safe under retries and concurrency: done
        under the schedule's row lock, only while the job is still its pending run."""
        for row in rows:
            if row["schedule"] is not None:
                await self._advance(row["schedule"], row["id"])

    async def _advance(self, name: str, job_id: int, connection: Any = None) -> None:
        await self._db.in_transaction(lambda conn: self._advance_in(name, job_id, conn), connection)

    async def _advance_in(self, name: str, job_id: int, conn: Any) -> None:
        row = await self._db.fetchrow("lock_schedule", name, conn=conn)
        if row is None or not row["materialized"] or row["pending_job_id"] != job_id:
            return  # removed, replaced, or already advanced by an earlier start
        current: datetime = row["next_run_at"]
        nxt = self._after(row, current, now=row["db_now"])
        if nxt is None:
            await self._db.fetch("set_pending_run", name, None, None, 0, current, conn=conn)
            return
        next_id, tick = await self._enqueue_run(conn, row, nxt, iteration=row["emitted"] + 1)
        await self._db.fetch("set_pending_run", name, next_id, tick, 1, current, conn=conn)

    def _after(self, row: Any, tick: datetime, *, now: datetime | None = None) -> datetime | None:
        """The run that follows the one at ``tick`` (none before ``now``), or None when the
        limit or the end date stops it. An interval keeps its phase: ``tick + k * every``."""
        limit = row["emission_limit"]
        if limit is not None and row["emitted"] >= limit:
            return None
        every = row["every_seconds"]
        if every is not None:
            behind = 0.0 if now is None else (now - tick).total_seconds()
            nxt = tick + timedelta(seconds=every * max(1, math.ceil(behind / every)))
        else:
            nxt = next_tick(
                cron=row["cron"],
                every=None,
                timezone=row["timezone"],
                after=tick if now is None else max(tick, now),
                start_at=row["start_at"],
            )
        if row["end_at"] is not None and nxt > row["end_at"]:
            return None
        return nxt

    async def _enqueue_run(
        self,
        conn: Any,
        row: Any,
        tick: datetime,
        *,
        iteration: int,
        refuse_taken: bool = False,
        take_started: bool = False,
    ) -> tuple[int, datetime]:
        """Enqueue run ``iteration`` of materialized schedule ``row`` at ``tick`` (the first
        free tick: one whose job key names no job yet; with ``refuse_taken``, ``tick`` or
        ScheduleTickTaken). With ``take_started``, ``tick``'s key held by a started run of
        this schedule passes to the new run (``release_run_key``, under the holder's row
        lock: a holder put back to pending meanwhile keeps it, and the run moves on)."""
        job_options = _spec_options(jsonvalue.loads(row["options"]))
        key_prefix = job_options.pop(_KEY_PREFIX, None)
        job_options.pop("delay", None)
        job_options["metadata"] = _run_metadata(job_options.get("metadata"), iteration)
        tries = 0
        key = _run_key(row["name"], key_prefix, tick)
        while tries < MAX_KEY_COLLISIONS:
            tries += 1
            key = _run_key(row["name"], key_prefix, tick)
            payload = jsonvalue.loads(row["payload"])
            spec = JobSpec(row["kind"], payload, **job_options, run_at=tick, job_key=key)
            result = await insert_one(self._db, prepare(spec, self._registry), conn)
            if result.duplicate and take_started:
                take_started = False  # the first tick only: the one BullMQ overwrites
                if await self._db.fetchrow(
                    "release_run_key", result.id, row["name"], key, conn=conn
                ):
                    tries -= 1  # the same tick again, now free
                    continue
            if not result.duplicate:
                await self._db.fetch("mark_schedule_run", result.id, row["name"], conn=conn)
                return result.id, tick
            later = None if refuse_taken else self._after(row, tick)
            if later is None:
                break
            tick = later
        raise ScheduleTickTaken(row["name"], key, tries)

    async def emit_due(self, *, catch_up: bool = False, batch: int = 100) -> int:
        """Emit one job for each due tick of each due schedule; returns the jobs emitted.

        Safe to run from many processes at once: each due schedule is locked by one of them
        and its next tick is advanced in the same transaction as the enqueue. After downtime
        only the latest missed tick is emitted, unless ``catch_up`` asks for each of them.
        Materialized schedules are their workers' business; this only repairs one whose run
        started without its next run being made."""
        emitted = 0
        async with self._db.transaction() as conn:
            rows = await self._db.fetch("due_schedules", batch, self._registry.names(), conn=conn)
            for row in rows:
                emitted += await self._emit(conn, row, catch_up)
        # Materialized schedules whose run started (or vanished) without its next run made, by
        # a worker that died or lost the database at that moment: make it now.
        for row in await self._db.fetch("stranded_schedules", self._registry.names()):
            await self._advance(row["name"], row["pending_job_id"])
        return emitted

    async def _emit(self, conn: Any, row: Any, catch_up: bool) -> int:
        job_options = _spec_options(jsonvalue.loads(row["options"]))
        key_prefix = job_options.pop(_KEY_PREFIX, None)
        metadata = job_options.pop("metadata", None)
        tick: datetime = row["next_run_at"]
        now: datetime = row["db_now"]
        count = 0
        limit = row["emission_limit"]
        while True:
            spec = JobSpec(
                row["kind"],
                jsonvalue.loads(row["payload"]),
                **job_options,
                metadata=_run_metadata(metadata, row["emitted"] + count + 1),
                job_key=_run_key(row["name"], key_prefix, tick),
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


def _stored_keep(option: str, value: Any) -> dict[str, Any] | None:
    """A retention option as a schedule stores it: a dict of the Keep's count and age."""
    if value is None:
        return None
    if isinstance(value, Keep):
        return {"count": value.count, "age": value.age}
    if isinstance(value, dict) and set(value) <= {"count", "age"}:
        return {"count": value.get("count"), "age": value.get("age")}
    raise InvalidOption(option, f"must be a Keep or a dict of its count and age, got {value!r}")


def _spec_options(stored: dict[str, Any]) -> dict[str, Any]:
    """A schedule's stored job options as JobSpec takes them (retention as Keep)."""
    options = dict(stored)
    for option in _KEEP_OPTIONS:
        if options.get(option) is not None:
            options[option] = Keep(**options[option])
    return options


def _run_metadata(metadata: Any, iteration: int) -> Any:
    """A run's metadata: the schedule's, with the run's iteration (not when it is no object)."""
    if metadata is None:
        return {SCHEDULE_RUN_KEY: {"iteration": iteration}}
    if isinstance(metadata, dict):
        return {**metadata, SCHEDULE_RUN_KEY: {"iteration": iteration}}
    return metadata


def _run_key(name: str, key_prefix: str | None, tick: datetime) -> str:
    """The job key of a schedule's run at ``tick``: one job per tick, whoever emits it."""
    if key_prefix is None:
        return f"schedule:{name}:{tick.isoformat()}"
    return f"{key_prefix}{int(tick.timestamp() * 1000)}"


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
        materialized=row["materialized"],
        pending_job_id=row["pending_job_id"],
        paused=row["paused_at"] is not None,
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
        """Emit due schedules until ``stop``: each tick's job once, whatever the number of
        schedulers. A failing schedule or a lost connection is logged and retried; a closed pool
        raises ``PoolClosed``."""
        while not self._stop.is_set():
            try:
                await self._schedules.emit_due(catch_up=self.catch_up)
                until = await self._schedules.seconds_until_due()
            except Exception as exc:
                if self._schedules._db.closed:
                    raise PoolClosed("the scheduler", "it stopped") from exc
                # One bad schedule or a lost connection must not stop the loop.
                logger.exception("scheduler: emitting due schedules failed; retrying")
                until = None
            wait = self.poll_interval if until is None else min(self.poll_interval, max(until, 0.0))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), timeout=wait)

    def start(self) -> asyncio.Task[None]:
        """Run ``run`` in a background task and return it."""
        self._task = asyncio.create_task(self.run(), name="pgjobs-scheduler")
        return self._task

    async def stop(self) -> None:
        """Stop the loop and wait for a started one to end."""
        self._stop.set()
        if self._task is not None:
            await self._task
