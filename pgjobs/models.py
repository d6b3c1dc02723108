"""Plain data types of the public API. Imports nothing from pgjobs."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol


class ClaimedRow(Protocol):
    """A claimed job's columns by name, as a worker reads them: an asyncpg Record of a claim,
    or the decoded row of a hand-off notification."""

    def __getitem__(self, key: str, /) -> Any: ...


class Status(StrEnum):
    """What is stored for a job: five values, no more."""

    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    DEAD = "dead"
    CANCELLED = "cancelled"


class Durability(StrEnum):
    """When an acknowledged write is safe. ``DURABLE``: the commit waits for the WAL flush, so
    an acknowledged enqueue or outcome survives a server crash. ``ASYNC``: the commit returns
    before the flush (``synchronous_commit = off`` for that transaction only): a server crash
    may lose the acknowledged writes of its last moments (at most about three times
    ``wal_writer_delay``, 600 ms by default), whole transactions only, never half of one; a
    lost outcome means the job runs again. Like Redis with ``appendfsync everysec``."""

    DURABLE = "durable"
    ASYNC = "async"


class SubState(StrEnum):
    """What dashboards show, derived in SQL from status and columns (never stored). Exactly one
    applies to every job; waiting_children wins over delayed and retry."""

    WAITING_CHILDREN = "waiting_children"  # pending, some prerequisite not done
    DELAYED = "delayed"  # pending, due later, never attempted
    RETRY = "retry"  # pending, due later, attempted before
    READY = "ready"  # pending, due, no open prerequisite
    ACTIVE = "active"  # running
    FAILED = "failed"  # dead
    COMPLETED = "completed"
    CANCELLED = "cancelled"


SUB_STATE_STATUS: dict[SubState, Status] = {
    SubState.WAITING_CHILDREN: Status.PENDING,
    SubState.DELAYED: Status.PENDING,
    SubState.RETRY: Status.PENDING,
    SubState.READY: Status.PENDING,
    SubState.ACTIVE: Status.RUNNING,
    SubState.FAILED: Status.DEAD,
    SubState.COMPLETED: Status.COMPLETED,
    SubState.CANCELLED: Status.CANCELLED,
}

IN_FLIGHT = (Status.PENDING, Status.RUNNING)
TERMINAL = (Status.COMPLETED, Status.DEAD, Status.CANCELLED)


@dataclass(frozen=True, slots=True)
class Keep:
    """How long a finished job stays: at most ``count`` of the newest finished jobs of its queue
    and status, and none older than ``age`` seconds. ``Keep(count=0)`` removes it at once
    (once no dependent needs its output; a dead job that only blocks its dependents goes at
    once and releases them, as its removal would); ``Keep()`` keeps it until the GC's global
    policy."""

    count: int | None = None
    age: float | None = None


@dataclass(frozen=True, slots=True)
class EnqueueResult:
    """The id of the job; ``duplicate`` is True when an in-flight job already held the dedup key
    and its id is returned instead of a new row."""

    id: int
    duplicate: bool = False
    kept: bool = False
    """With ``duplicate`` and ``dedup_keep_last``: the job was kept, to be enqueued when the
    running holder (``id``) finishes."""
    replaced: int | None = None
    """With ``dedup_replace``: the id of the delayed holder this new job replaced (removed)."""
    replaced_key: str | None = None
    """The job key of the replaced holder, if it had one."""


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
    stalls: int
    """Times the job's lease ended while it ran (its worker stopped heartbeating)."""
    errors: list[Any]
    """The error of each failed attempt (and lease expiry), oldest first, the last 20:
    ``type``, ``message``, ``traceback``, ``attempt``, ``at``, and ``worker`` (the name of the
    worker that ran it). ``last_error`` is the newest."""
    worker: str | None
    """The name of the worker that started the latest attempt (None: not started by a worker,
    or claimed by hand)."""
    sub_state: SubState


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """A running worker, as it reports itself with its heartbeats."""

    id: str
    name: str
    host: str
    pid: int
    queues: list[str]
    concurrency: int
    running: int
    """Jobs it held at its last heartbeat."""
    started_at: datetime
    last_seen: datetime


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
    finished_after: datetime | None = None
    sub_state: SubState | str | tuple[SubState | str, ...] | None = None
    priority: int | None = None
    min_priority: int | None = None
    max_priority: int | None = None
    job_key: str | None = None
    ids: tuple[int, ...] | None = None
    after_id: int | None = None
    """Only ids above it: keyset paging through list_jobs(oldest_first=True)."""
    before_id: int | None = None
    """Only ids below it: keyset paging newest first."""
    payload_equals: tuple[str, Any] | None = None
    """``(path, value)``: jobs whose payload holds the JSON ``value`` at the dotted ``path``
    (``"user.id"``, ``"items.0.sku"``: a number indexes an array), compared as JSON (42 is
    not "42"). Not indexed: narrow it with ``queue`` or another filter on a big table."""
    pending_run: bool | None = None
    """True: only jobs that are a materialized schedule's pending run (its next run); False:
    every job but those."""
    history_since: datetime | None = None
    """Every job in flight, and of the finished ones only those finished since then: bounds
    how much history a scan reads (the dashboard's payload filter)."""


@dataclass(frozen=True, slots=True)
class LogLine:
    """One line of a job's log (``JobQueue.append_log``), with when it was written."""

    line: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class LogPage:
    """One page of a job's log lines (oldest first, or newest first when asked: see
    ``JobQueue.read_logs``), and how many there are in all."""

    lines: list[LogLine]
    total: int


@dataclass(frozen=True, slots=True)
class PurgeResult:
    """``deleted`` rows, and running rows left alone (``skip`` policy), counted after cascades."""

    deleted: int
    skipped_running: int


@dataclass(frozen=True, slots=True)
class FlowFilter:
    """Which flows ``list_flows`` returns; fields are AND-ed. ``queue`` keeps a flow that has
    at least one job in that queue (with all its counts)."""

    queue: str | None = None
    outcome: str | tuple[str, ...] | None = None
    name_prefix: str | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    tenant: str | None = None


@dataclass(frozen=True, slots=True)
class FlowSummary:
    """One flow as ``JobQueue.list_flows`` lists it: its outcome (running, failed,
    completed_with_failures or completed), its times and its jobs' counts by sub-state."""

    id: int
    name: str | None
    outcome: str  # running | failed | completed_with_failures | completed
    created_at: datetime  # of its oldest job
    finished_at: datetime | None  # of its last job to finish; None while any runs
    total: int
    counts: dict[SubState, int]


@dataclass(frozen=True, slots=True)
class FlowNode:
    """One job of a flow, as ``JobQueue.flow_view`` shows it (``pending_deps``: its open
    prerequisites)."""

    id: int
    name: str
    kind: str
    queue: str
    status: Status
    sub_state: SubState
    priority: int
    attempts: int
    max_attempts: int
    pending_deps: int
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


@dataclass(frozen=True, slots=True)
class FlowEdge:
    """One edge of a flow: the ids of its prerequisite and dependent, its ``EdgePolicy`` and
    its ``EdgeState``."""

    prerequisite: int
    dependent: int
    policy: str
    state: str


@dataclass(frozen=True, slots=True)
class FlowView:
    """A flow's graph (``JobQueue.flow_view``): its ``list_flows`` row, its nodes and edges."""

    summary: FlowSummary
    nodes: list[FlowNode]
    edges: list[FlowEdge]


@dataclass(frozen=True, slots=True)
class QueueStats:
    """One queue as ``JobQueue.queue_stats`` reports it: counts by sub-state, the paused flag,
    its limits (None: no limit), and how its application names it."""

    queue: str
    counts: dict[SubState, int]
    paused: bool
    concurrency: int | None
    group_concurrency: int | None
    rate_limit: int | None
    rate_period: float | None
    label: str | None = None
    """The queue's name as its application gives it (``JobQueue.describe_queue``); None: the
    engine's name is the one to show."""
    dialect: str | None = None
    """``"bullmq"`` for a queue written through the BullMQ facade; None for a native queue."""

    @property
    def shown_name(self) -> str:
        """The name to show: the label, else the engine's name."""
        return self.label if self.label is not None else self.queue


@dataclass(frozen=True, slots=True)
class QueueDescription:
    """How a queue's application names it (``JobQueue.describe_queue``): its ``label`` (None:
    the engine's name) and ``dialect`` (``"bullmq"``, or None for a native queue)."""

    queue: str
    label: str | None
    dialect: str | None


@dataclass(frozen=True, slots=True)
class MetricsBucket:
    """How many jobs of a queue completed, died and were cancelled in one time bucket
    (``JobQueue.queue_metrics``)."""

    start: datetime
    completed: int
    dead: int
    cancelled: int


@dataclass(frozen=True, slots=True)
class JobEvent:
    """One entry of the event log. ``event`` is one of: added, active, progress, completed,
    failed (dead), retrying, deferred, waiting_children (back to wait for prerequisites added
    while it ran), stalled, released (prerequisites done), requeued,
    rescheduled (due time moved while pending), cancelled, removed (of a pending job, with its
    ``run_at``, ``pending_deps`` and ``priority``); or a queue event (paused, resumed, or any
    name given to ``publish_event``) with ``job_id`` None. ``prev`` is the status the job
    left; ``cursor`` resumes a stream just after this event."""

    cursor: str
    queue: str
    event: str
    job_id: int | None
    job_key: str | None
    tenant: str | None
    prev: str | None
    data: dict[str, Any]
    at: datetime
