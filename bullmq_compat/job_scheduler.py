"""Job schedulers (BullMQ's ``upsertJobScheduler`` family) as materialized engine schedules:
the scheduler's next iteration is always a job (``repeat:<id>:<ms>``), created when it is
upserted and each time a worker starts the current one. Pure mapping; ``Queue`` does the I/O.

A schedule's metadata, which each iteration job carries, holds what BullMQ keeps in the
scheduler's hash: ``opts`` (the template's options), ``scheduler`` (its id), ``repeat`` (the
repeat options an iteration's ``opts.repeat`` shows, but its count) and ``offset``; the engine
adds each iteration's number (``SCHEDULE_RUN_KEY``)."""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from croniter import croniter

from bullmq_compat.mapping import KIND, NO_PRIORITY, enqueue_options, facade_registry
from pgjobs import SCHEDULE_RUN_KEY, InvalidOption, JobQueue, Schedule, ScheduleTickTaken

if TYPE_CHECKING:
    from bullmq_compat.job import Job
    from bullmq_compat.queue import Queue


def _to_millis(value: Any) -> int | None:
    """Epoch milliseconds from a number, a datetime or an ISO 8601 string; None for none."""
    if value in (None, "") or isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return int(value)
    if isinstance(value, datetime):
        return int((value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp() * 1000)
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            pass
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise InvalidOption("startDate", f"not a date: {value!r}") from None
        return _to_millis(moment)
    raise InvalidOption("startDate", f"must be milliseconds, a datetime or an ISO date: {value!r}")


def _moment(millis: int | None) -> datetime | None:
    return None if millis is None else datetime.fromtimestamp(millis / 1000, UTC)


def default_repeat_strategy(millis: int, opts: dict[str, Any]) -> int | None:
    """The next run (epoch ms) of a cron ``pattern`` after ``millis``, as BullMQ computes it:
    ``immediately`` means now; ``startDate`` clamps the base forward; ``tz`` is the zone the
    pattern is read in; a 6-field pattern has seconds first. None without a pattern. Raises
    ``CroniterBadCronError`` for a bad pattern, ``ZoneInfoNotFoundError`` for an unknown zone."""
    pattern = opts.get("pattern")
    if not pattern:
        return None
    if opts.get("immediately"):
        return int(time.time() * 1000)
    base = max(millis, _to_millis(opts.get("startDate")) or millis)
    zone = ZoneInfo(opts["tz"]) if opts.get("tz") else UTC
    moment = datetime.fromtimestamp(base / 1000, tz=zone)
    following: datetime = croniter(pattern, moment, second_at_beginning=True).get_next(datetime)
    return int(following.timestamp() * 1000)


def schedule_name(qualified_queue: str, scheduler_id: str) -> str:
    return f"{qualified_queue}:{scheduler_id}"


def template(job_name: Any, job_data: Any, opts: Any) -> tuple[str, Any, dict[str, Any]]:
    """Python's (job_name, job_data, opts) or Node's ({name, data, opts}) template."""
    if isinstance(job_name, dict) and job_data is None and opts is None:
        node = job_name
        return node.get("name") or "", node.get("data"), dict(node.get("opts") or {})
    return job_name or "", job_data, dict(opts or {})


def first_run(
    repeat: dict[str, Any],
    previous: Schedule | None = None,
    template_opts: dict[str, Any] | None = None,
) -> tuple[int, int] | None:
    """When the scheduler's first iteration runs (epoch ms) and the scheduler's ``offset``, as
    BullMQ's upsert computes them; None when it has none left (its ``count`` reached its
    ``limit``, or its ``endDate`` has passed). ``every``: now, or ``startDate`` if later, or
    with an ``offset`` the next slot ``k * every + offset``; an upsert that replaces the
    pending iteration of the same ``every`` keeps its slot. ``pattern``: the pattern's next
    time. The template's ``prevMillis``, when later than now, stands for now. Raises
    ValueError for options BullMQ refuses, and the repeat strategy's errors for a bad pattern
    or zone."""
    if repeat.get("pattern") and repeat.get("every"):
        raise ValueError("Both .pattern and .every options are defined for this repeatable job")
    if not repeat.get("pattern") and not repeat.get("every"):
        raise ValueError(
            "Either .pattern or .every options must be defined for this repeatable job"
        )
    if repeat.get("immediately") and repeat.get("startDate"):
        raise ValueError(
            "Both .immediately and .startDate options are defined for this repeatable job"
        )
    limit = repeat.get("limit")
    if limit is not None and (repeat.get("count") or 0) + 1 > limit:
        return None
    now = int(time.time() * 1000)
    end = _to_millis(repeat.get("endDate"))
    if end is not None and now > end:
        return None
    prev_millis = (template_opts or {}).get("prevMillis")
    if isinstance(prev_millis, int | float) and not isinstance(prev_millis, bool):
        now = max(now, int(prev_millis))
    if repeat.get("pattern"):
        following = default_repeat_strategy(now, repeat)
        return None if following is None else (max(following, now), 0)
    every = repeat["every"]
    if isinstance(every, bool) or not isinstance(every, int | float) or every <= 0:
        raise InvalidOption("every", f"must be milliseconds > 0, got {every!r}")
    given = repeat.get("offset") or 0
    if isinstance(given, bool) or not isinstance(given, int | float) or given < 0:
        raise InvalidOption("offset", f"must be milliseconds >= 0, got {given!r}")
    if (
        previous is not None
        and previous.pending_job_id is not None
        and previous.next_run_at is not None
        and repeat_of(previous).get("every") == every
    ):
        kept = _ms(previous.next_run_at)
        offset = given or _metadata(previous).get("offset")
        return kept, int(offset if isinstance(offset, int | float) else _phase(kept, every))
    start = _to_millis(repeat.get("startDate"))
    first: float = now
    if start is not None:
        first = max(start, now)
    elif given:
        first = math.floor(now / every) * every + given
        if first <= now:
            first += every
    return int(first), int(given or _phase(int(first), every))


def _phase(millis: int, every: float) -> int:
    """Where ``millis`` falls in its slot of ``every`` (BullMQ's offset of an ``every``)."""
    return int(millis - math.floor(millis / every) * every)


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def _metadata(schedule: Schedule) -> dict[str, Any]:
    meta = schedule.options.get("metadata")
    return meta if isinstance(meta, dict) else {}


def repeat_of(schedule: Schedule) -> dict[str, Any]:
    """The repeat options of a scheduler, as an iteration's ``opts.repeat`` shows them (but
    its count); for a schedule written before the facade kept them, from its engine fields."""
    kept = _metadata(schedule).get("repeat")
    if isinstance(kept, dict):
        return kept
    repeat: dict[str, Any] = {}
    if schedule.every is not None:
        repeat["every"] = round(schedule.every * 1000)
    if schedule.cron is not None:
        repeat["pattern"] = schedule.cron
        if schedule.timezone != "UTC":
            repeat["tz"] = schedule.timezone
    if schedule.limit is not None:
        repeat["limit"] = schedule.limit
    if schedule.start_at is not None:
        repeat["startDate"] = _ms(schedule.start_at)
    if schedule.end_at is not None:
        repeat["endDate"] = _ms(schedule.end_at)
    return repeat


def iteration_opts(metadata: Any, job_key: str | None, created_ms: int) -> dict[str, Any] | None:
    """The ``opts`` BullMQ gives an iteration job of a scheduler: the template's options, and
    ``repeat`` (with the iteration's ``count``), ``jobId``, ``delay`` (from its creation to
    its slot), ``timestamp``, ``prevMillis`` (its slot) and ``repeatJobKey`` (the scheduler
    id). None for a job that is no scheduler's iteration."""
    if not isinstance(metadata, dict) or not isinstance(metadata.get("scheduler"), str):
        return None
    opts = metadata.get("opts")
    result: dict[str, Any] = dict(opts) if isinstance(opts, dict) else {}
    repeat = metadata.get("repeat")
    if isinstance(repeat, dict):
        run = metadata.get(SCHEDULE_RUN_KEY)
        iteration = run.get("iteration") if isinstance(run, dict) else None
        result["repeat"] = {**repeat, "count": iteration if iteration is not None else 1}
    slot = None
    if job_key is not None:
        try:
            slot = int(job_key.rsplit(":", 1)[1])
        except (IndexError, ValueError):
            slot = None
    if slot is not None:
        result["jobId"] = job_key
        result["delay"] = max(0, slot - created_ms)
        result["timestamp"] = created_ms
        result["prevMillis"] = slot
    result["repeatJobKey"] = metadata["scheduler"]
    return result


def tick_taken_message(repeat: dict[str, Any], error: ScheduleTickTaken) -> str:
    """BullMQ's error when a scheduler's iteration cannot be made (its job id is taken)."""
    if repeat.get("pattern") and error.tries <= 1:
        return "Cannot create job scheduler iteration - job ID already exists. addJobScheduler"
    return (
        "Cannot create job scheduler iteration - current and next time slots already have "
        "jobs. addJobScheduler"
    )


def upsert_arguments(
    prefix: str,
    queue_name: str,
    scheduler_id: str,
    repeat: dict[str, Any],
    name: str,
    data: Any,
    opts: dict[str, Any],
    previous: Schedule | None = None,
    next_millis: int | None = None,
) -> dict[str, Any]:
    """Keyword arguments of ``JobQueue.upsert_schedule`` for a BullMQ scheduler (its first run
    is ``first_run(repeat, previous, opts)``, which the caller checks first; ``previous``: the
    scheduler it replaces, if any; ``next_millis``: a next run already decided, as a scheduler
    read from Redis has it, which also fixes an ``every``'s offset). A pattern's ``tz`` is the
    zone the engine reads it in; an ``every`` ignores it (BullMQ keeps it, unchecked, and
    shows it)."""
    for forbidden in ("jobId", "delay", "repeat"):
        if forbidden in opts:
            raise InvalidOption(forbidden, "a job scheduler's template cannot set it")
    job = enqueue_options(name or scheduler_id, opts, prefix, queue_name)
    backoff = job["backoff"]
    if next_millis is not None:
        given = repeat.get("offset") or 0
        every = repeat.get("every")
        planned: tuple[int, int] | None = (
            next_millis,
            int(given or (_phase(next_millis, every) if every else 0)),
        )
    else:
        planned = first_run(repeat, previous, opts)
    first, offset = planned if planned is not None else (None, 0)
    shown = {k: v for k, v in repeat.items() if k not in ("immediately", "count", "offset")}
    for field in ("startDate", "endDate"):
        if shown.get(field) is not None:
            shown[field] = _to_millis(shown[field])
    if repeat.get("every") and repeat.get("offset"):
        shown["offset"] = repeat["offset"]
    arguments: dict[str, Any] = {
        "queue": job["queue"],
        "job_name": job["name"],
        "priority": job["priority"],
        "max_attempts": job["max_attempts"],
        "metadata": {
            "opts": opts,
            "scheduler": scheduler_id,
            "repeat": {k: v for k, v in shown.items() if v is not None},
            "offset": offset,
        },
        "timezone": (repeat.get("tz") or "UTC") if repeat.get("pattern") else "UTC",
        "start_at": _moment(_to_millis(repeat.get("startDate"))),
        "end_at": _moment(_to_millis(repeat.get("endDate"))),
        "limit": repeat.get("limit"),
        "emitted": int(repeat.get("count") or 0),
        "first_run_at": _moment(first),
        "job_key_prefix": f"repeat:{scheduler_id}:",  # BullMQ's repeat:<id>:<ms> job ids
        "events": job["events"],
        "keep_completed": job["keep_completed"],
        "keep_dead": job["keep_dead"],
        "materialize": True,
        # BullMQ refuses a pattern's iteration whose job id is taken (an every moves on),
        # unless the upsert replaced the next iteration: then it overwrites the job of that id,
        # here a started iteration of this scheduler, which gives the id up (addJobScheduler).
        # It leaves a waiting iteration of a paused queue where it is.
        "refuse_taken_tick": bool(repeat.get("pattern")),
        "take_started_tick": bool(repeat.get("pattern")),
        "keep_waiting_run": NO_PRIORITY,
    }
    if backoff is not None:
        arguments["backoff"] = backoff.to_json()
    if repeat.get("every"):
        arguments["every"] = repeat["every"] / 1000
    else:
        arguments["cron"] = repeat["pattern"]
    return {
        "name": schedule_name(job["queue"], scheduler_id),
        "kind": KIND,
        "input": data if data is not None else {},
        **arguments,
    }


async def store(
    jobs: JobQueue,
    arguments: dict[str, Any],
    repeat: dict[str, Any],
    connection: Any = None,
) -> None:
    """Write a scheduler (``upsert_arguments``); TypeError, as BullMQ raises it, when its
    pattern's next iteration's job id is taken."""
    try:
        await jobs.upsert_schedule(**arguments, connection=connection)
    except ScheduleTickTaken as exc:
        raise TypeError(tick_taken_message(repeat, exc)) from None


async def retime(
    jobs: JobQueue,
    name: str,
    *,
    cron: str | None,
    every: float | None,
    timezone: str,
) -> datetime | None:
    """A schedule's new timing, set from outside the application (the dashboard's "Edit
    timing", found as the ``pgjobs.retime_schedule`` entry point ``bullmq``). On a BullMQ job
    scheduler it is ``upsertJobScheduler`` of its id with ``every`` (given in seconds, kept in
    milliseconds) or ``pattern`` and ``tz``, its template, ``limit``, ``startDate``,
    ``endDate`` and iteration count kept, as is a pause; its next iteration is the job BullMQ's
    upsert would make. In one transaction, with the scheduler locked from the read to the
    write. Returns the next run; None when there is no such schedule. Raises InvalidOption
    naming BullMQ's repeat option at fault (``every``, ``pattern``, ``tz``, or ``repeat``
    when no iteration would be left), and then changes nothing."""
    if (cron is None) == (every is None):
        raise InvalidOption("repeat", "give one of every (milliseconds) and pattern (cron)")
    jobs = await JobQueue.connect(  # the caller's pool, with the facade's kind
        pool=jobs.pool, schema=jobs.schema, registry=facade_registry(), timeouts=jobs.timeouts
    )
    async with jobs.transaction() as conn:
        schedule = await jobs.get_schedule(name, connection=conn, lock=True)
        if schedule is None:
            return None
        meta = _metadata(schedule)
        scheduler_id = meta.get("scheduler")
        if not isinstance(scheduler_id, str):  # an engine schedule on a BullMQ queue
            return await jobs.retime_schedule(
                name, cron=cron, every=every, timezone=timezone, connection=conn
            )
        kept = {k: v for k, v in repeat_of(schedule).items() if k not in ("pattern", "tz")}
        repeat: dict[str, Any] = {**kept, "count": schedule.emitted}
        if every is not None:
            repeat["every"] = round(every * 1000) if every > 0 else every
        else:
            repeat.pop("every", None)
            repeat.pop("offset", None)
            repeat["pattern"] = cron
            if timezone != "UTC":
                repeat["tz"] = timezone
        opts = dict(meta.get("opts") or {})
        prefix, _, queue_name = str(schedule.options.get("queue")).rpartition(":")
        try:
            if first_run(repeat, schedule, opts) is None:
                raise InvalidOption(
                    "repeat", "no iteration would be left (limit reached or endDate past)"
                )
            arguments = upsert_arguments(
                prefix,
                queue_name,
                scheduler_id,
                repeat,
                schedule.options.get("name") or "",
                schedule.input,
                opts,
                previous=schedule,
            )
            await store(jobs, arguments, repeat, conn)
        except InvalidOption:
            raise
        except KeyError as exc:  # ZoneInfoNotFoundError
            raise InvalidOption("tz", f"not a time zone: {timezone!r}") from exc
        except (ValueError, TypeError) as exc:  # a bad pattern; its next id taken
            raise InvalidOption("every" if every is not None else "pattern", str(exc)) from exc
        if schedule.paused:
            await jobs.pause_schedule(name, connection=conn)
        stored = await jobs.get_schedule(name, connection=conn)
        return None if stored is None else stored.next_run_at


def as_json(scheduler_id: str, schedule: Schedule) -> dict[str, Any]:
    """BullMQ's JobSchedulerJson for one schedule: ``key``, ``name``, ``next``,
    ``iterationCount``, and those of ``limit``, ``startDate``, ``endDate``, ``tz``,
    ``pattern``, ``every``, ``offset`` and ``template`` (its ``data`` unless ``{}``, its
    ``opts`` unless empty) that it has."""
    meta = _metadata(schedule)
    repeat = repeat_of(schedule)
    result: dict[str, Any] = {
        "key": scheduler_id,
        "name": schedule.options.get("name"),  # the emitted jobs' name
        "next": None if schedule.next_run_at is None else _ms(schedule.next_run_at),
        "iterationCount": schedule.emitted,
    }
    for field in ("limit", "startDate", "endDate", "tz", "pattern", "every"):
        if repeat.get(field) not in (None, ""):
            result[field] = repeat[field]
    offset = meta.get("offset")
    if offset is None and "repeat" not in meta:  # written before the facade kept it
        offset = 0 if schedule.cron is not None or "every" not in result else None
    if offset is not None:
        result["offset"] = offset
    template: dict[str, Any] = {}
    if schedule.input != {}:
        template["data"] = schedule.input
    if meta.get("opts"):
        template["opts"] = meta["opts"]
    if template:
        result["template"] = template
    return result


class JobScheduler:
    """BullMQ's ``JobScheduler``: the scheduler API of one queue (``Queue`` exposes the same
    methods)."""

    def __init__(self, queue: Queue) -> None:
        self.queue = queue

    async def upsertJobScheduler(
        self,
        job_scheduler_id: str,
        repeat_opts: dict[str, Any],
        job_name: Any = None,
        job_data: Any = None,
        opts: dict[str, Any] | None = None,
        override: bool = True,
        producer_id: str | None = None,
    ) -> Job | None:
        """``Queue.upsertJobScheduler``: create or replace a job scheduler; returns its next job."""
        return await self.queue.upsertJobScheduler(
            job_scheduler_id, repeat_opts, job_name, job_data, opts, override, producer_id
        )

    async def removeJobScheduler(self, job_scheduler_id: str) -> int:
        """``Queue.removeJobScheduler``: 0 when removed, 1 when there was none."""
        return await self.queue.removeJobScheduler(job_scheduler_id)

    async def isJobScheduler(self, job_scheduler_id: str) -> bool:
        """Whether a job scheduler of this id exists."""
        return await self.queue.isJobScheduler(job_scheduler_id)

    async def getScheduler(self, job_scheduler_id: str) -> dict[str, Any] | None:
        """The job scheduler of this id as BullMQ describes it, or None."""
        return await self.queue.getJobScheduler(job_scheduler_id)

    async def getJobSchedulers(
        self, start: int = 0, end: int = -1, asc: bool = False
    ) -> list[dict[str, Any]]:
        """``Queue.getJobSchedulers``: the queue's job schedulers by next run, from ``start`` to
        ``end`` (inclusive; -1: the last)."""
        return await self.queue.getJobSchedulers(start, end, asc)
