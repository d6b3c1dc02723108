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
