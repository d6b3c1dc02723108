"""Job schedulers (BullMQ's ``upsertJobScheduler`` family) as materialized engine schedules:
the scheduler's next iteration is always a job (``repeat:<id>:<ms>``), created when it is
upserted and each time a worker starts the current one. Pure mapping; ``Queue`` does the I/O."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from croniter import croniter

from bullmq_compat.mapping import KIND, enqueue_options
from pgjobs import InvalidOption, Schedule

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


def first_run(repeat: dict[str, Any]) -> int | None:
    """When the scheduler's first iteration runs (epoch ms), or None when it has none left
    (its ``count`` reached its ``limit``, or its ``endDate`` has passed). Raises ValueError
    for options BullMQ refuses, and the repeat strategy's errors for a bad pattern or zone."""
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
    if repeat.get("pattern"):
        following = default_repeat_strategy(now, repeat)
        return None if following is None else max(following, now)
    start = _to_millis(repeat.get("startDate"))
    return max(start, now) if start is not None else now


def upsert_arguments(
    prefix: str,
    queue_name: str,
    scheduler_id: str,
    repeat: dict[str, Any],
    name: str,
    data: Any,
    opts: dict[str, Any],
) -> dict[str, Any]:
    """Keyword arguments of ``JobQueue.upsert_schedule`` for a BullMQ scheduler (its first run
    is ``first_run(repeat)``, which the caller checks first)."""
    for forbidden in ("jobId", "delay", "repeat"):
        if forbidden in opts:
            raise InvalidOption(forbidden, "a job scheduler's template cannot set it")
    job = enqueue_options(name or scheduler_id, opts, prefix, queue_name)
    backoff = job["backoff"]
    first = first_run(repeat)
    arguments: dict[str, Any] = {
        "queue": job["queue"],
        "job_name": job["name"],
        "priority": job["priority"],
        "max_attempts": job["max_attempts"],
        "metadata": {"opts": opts, "scheduler": scheduler_id},
        "timezone": repeat.get("tz") or "UTC",
        "start_at": _moment(_to_millis(repeat.get("startDate"))),
        "end_at": _moment(_to_millis(repeat.get("endDate"))),
        "limit": repeat.get("limit"),
        "emitted": int(repeat.get("count") or 0),
        "first_run_at": _moment(first),
        "job_key_prefix": f"repeat:{scheduler_id}:",  # BullMQ's repeat:<id>:<ms> job ids
        "events": job["events"],
        "materialize": True,
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


def as_json(scheduler_id: str, schedule: Schedule) -> dict[str, Any]:
    """BullMQ's JobSchedulerJson for one schedule."""
    meta = schedule.options.get("metadata") or {}
    result: dict[str, Any] = {
        "key": scheduler_id,
        "id": scheduler_id,
        "name": schedule.options.get("name"),  # the emitted jobs' name
        "iterationCount": schedule.emitted,
        "tz": schedule.timezone,
        "next": None
        if schedule.next_run_at is None
        else int(schedule.next_run_at.timestamp() * 1000),
        "template": {"data": schedule.input, "opts": meta.get("opts", {})},
    }
    if schedule.every is not None:
        result["every"] = int(schedule.every * 1000)
    if schedule.cron is not None:
        result["pattern"] = schedule.cron
    if schedule.limit is not None:
        result["limit"] = schedule.limit
    if schedule.start_at is not None:
        result["startDate"] = int(schedule.start_at.timestamp() * 1000)
    if schedule.end_at is not None:
        result["endDate"] = int(schedule.end_at.timestamp() * 1000)
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
        return await self.queue.upsertJobScheduler(
            job_scheduler_id, repeat_opts, job_name, job_data, opts, override, producer_id
        )

    async def removeJobScheduler(self, job_scheduler_id: str) -> int:
        return await self.queue.removeJobScheduler(job_scheduler_id)

    async def isJobScheduler(self, job_scheduler_id: str) -> bool:
        return await self.queue.isJobScheduler(job_scheduler_id)

    async def getScheduler(self, job_scheduler_id: str) -> dict[str, Any] | None:
        return await self.queue.getJobScheduler(job_scheduler_id)

    async def getJobSchedulers(
        self, start: int = 0, end: int = -1, asc: bool = False
    ) -> list[dict[str, Any]]:
        return await self.queue.getJobSchedulers(start, end, asc)
