"""Job schedulers (BullMQ's upsertJobScheduler family) as pgjobs schedules. Pure mapping;
``Queue`` does the I/O."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from bullmq_compat.mapping import KIND, enqueue_options
from pgjobs import InvalidOption, Schedule


def _when(option: str, value: Any) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return datetime.fromtimestamp(value / 1000, UTC)
    if isinstance(value, str):
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    raise InvalidOption(option, f"must be milliseconds, a datetime or an ISO date, got {value!r}")


def schedule_name(qualified_queue: str, scheduler_id: str) -> str:
    return f"{qualified_queue}:{scheduler_id}"


def template(job_name: Any, job_data: Any, opts: Any) -> tuple[str, Any, dict[str, Any]]:
    """Python's (job_name, job_data, opts) or Node's ({name, data, opts}) template."""
    if isinstance(job_name, dict) and job_data is None and opts is None:
        node = job_name
        return node.get("name") or "", node.get("data"), dict(node.get("opts") or {})
    return job_name or "", job_data, dict(opts or {})


def upsert_arguments(
    prefix: str,
    queue_name: str,
    scheduler_id: str,
    repeat: dict[str, Any],
    name: str,
    data: Any,
    opts: dict[str, Any],
) -> dict[str, Any]:
    """Keyword arguments of ``JobQueue.upsert_schedule`` for a BullMQ scheduler."""
    if ("every" in repeat) == ("pattern" in repeat):
        raise InvalidOption("repeat", "give exactly one of every (ms) and pattern (cron)")
    for forbidden in ("jobId", "delay", "repeat"):
        if forbidden in opts:
            raise InvalidOption(forbidden, "a job scheduler's template cannot set it")
    job = enqueue_options(name or scheduler_id, opts, prefix, queue_name)
    backoff = job["backoff"]
    arguments: dict[str, Any] = {
        "queue": job["queue"],
        "job_name": job["name"],
        "priority": job["priority"],
        "max_attempts": job["max_attempts"],
        "metadata": {"opts": opts, "scheduler": scheduler_id},
        "timezone": repeat.get("tz") or "UTC",
        "start_at": _when("startDate", repeat.get("startDate")),
        "end_at": _when("endDate", repeat.get("endDate")),
        "limit": repeat.get("limit"),
        "immediately": bool(repeat.get("immediately")),
        "job_key_prefix": f"repeat:{scheduler_id}:",  # BullMQ's repeat:<id>:<ms> job ids
        "events": job["events"],
    }
    if backoff is not None:
        arguments["backoff"] = backoff.to_json()
    if "every" in repeat:
        arguments["every"] = repeat["every"] / 1000
    else:
        arguments["cron"] = repeat["pattern"]
    return {
        "name": schedule_name(job["queue"], scheduler_id),
        "kind": KIND,
        "input": data,
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
