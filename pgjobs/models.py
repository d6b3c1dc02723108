"""Plain data types of the public API. Imports nothing from pgjobs."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any


class Status(StrEnum):
    """What is stored for a job: five values, no more."""

    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    DEAD = "dead"
    CANCELLED = "cancelled"


IN_FLIGHT = (Status.PENDING, Status.RUNNING)
TERMINAL = (Status.COMPLETED, Status.DEAD, Status.CANCELLED)


@dataclass(frozen=True, slots=True)
class Keep:
    """How long a finished job stays: at most ``count`` of the newest finished jobs of its queue
    and status, and none older than ``age`` seconds. ``Keep(count=0)`` removes it at once
    (once no dependent needs its output); ``Keep()`` keeps it until the GC's global policy."""

    count: int | None = None
    age: float | None = None


@dataclass(frozen=True, slots=True)
class EnqueueResult:
    """The id of the job; ``duplicate`` is True when an in-flight job already held the dedup key
    and its id is returned instead of a new row."""

    id: int
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class JobRow:
    """One job as stored; its JSON columns (payload, output, progress, ...) come decoded."""

    id: int
    queue: str
    kind: str
    name: str
    payload: Any
    output: Any
    status: Status
    priority: int
    run_at: datetime
    attempts: int
    max_attempts: int
    deferrals: int
    max_deferrals: int
    backoff: dict[str, Any]
    dedup_key: str | None
    group_key: str | None
    flow_id: int | None
    pending_deps: int
    tenant: str | None
    metadata: Any
    progress: Any
    last_error: Any
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    heartbeat_at: datetime | None
    job_key: str | None
    retention: Any


@dataclass(frozen=True, slots=True)
class JobFilter:
    """Which jobs an operation or a listing applies to. Every field given is AND-ed; an empty
    filter matches every job. ``tenant`` restricts to one tenant (a tenant-scoped API must set
    it); ``name_prefix`` is a literal prefix (``%`` and ``_`` match themselves)."""

    queue: str | None = None
    kind: str | None = None
    status: Status | str | tuple[Status | str, ...] | None = None
    flow_id: int | None = None
    group_key: str | None = None
    dedup_key: str | None = None
    tenant: str | None = None
    name_prefix: str | None = None
    min_deferrals: int | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    finished_before: datetime | None = None
    ids: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class PurgeResult:
    """``deleted`` rows, and running rows left alone (``skip`` policy), counted after cascades."""

    deleted: int
    skipped_running: int
