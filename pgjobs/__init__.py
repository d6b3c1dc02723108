"""pgjobs: a durable, typed job queue in PostgreSQL for asyncio.

Everything public is imported from here (``__all__``): ``JobQueue`` (enqueue, flows,
operations, queue settings, schedules, tracking), ``Registry`` and ``Kind`` (typed job kinds),
``Worker``, ``JobContext`` (what a handler sees), the handler signals (``Retry``, ``Delayed``,
``Fatal``, ``WaitForPrerequisites``), ``Flow`` and ``EdgePolicy``, the row and filter types of
``models``, and one error tree under ``PgJobsError``. Submodules are the implementation; README's
layout section maps them.
"""

from pgjobs.backoff import Backoff
from pgjobs.client import JobQueue
from pgjobs.config import DEFAULT_SCHEMA, dsn_from_env, validate_schema
from pgjobs.context import JobContext
from pgjobs.enqueue import BatchOptions, EnqueueOptions, JobSpec
from pgjobs.errors import (
    DatabaseTimeout,
    DedupRaceError,
    DuplicateKind,
    FlowConflict,
    FlowCycle,
    FlowNotFound,
    FlowRunning,
    InvalidFlow,
    InvalidJobInput,
    InvalidOption,
    InvalidSchemaName,
    JobLost,
    MigrationFailed,
    PendingPrerequisites,
    PgJobsError,
    PoolClosed,
    PrerequisiteTaken,
    QueueRunning,
    ScheduleTickTaken,
    SchemaMissing,
    UnknownKind,
)
from pgjobs.events import EventStream
from pgjobs.executor import TRANSIENT_ERRORS, create_pool
from pgjobs.flows import EdgePolicy, Flow, SubmittedFlow
from pgjobs.groups import Group, GroupStatus
from pgjobs.imports import (
    EdgeState,
    ImportCheck,
    ImportedEdge,
    ImportedJob,
    ImportedStatus,
    ImportRecord,
)
from pgjobs.jsonvalue import JsonText, NotJson, jsonb_problem, jsonb_safe
from pgjobs.jsonvalue import strip_nul as text_safe
from pgjobs.kinds import Kind, Registry
from pgjobs.maintenance import schedule_maintenance
from pgjobs.models import (
    Durability,
    EnqueueResult,
    FlowEdge,
    FlowFilter,
    FlowNode,
    FlowSummary,
    FlowView,
    JobEvent,
    JobFilter,
    JobRow,
    Keep,
    LogLine,
    LogPage,
    MetricsBucket,
    PurgeResult,
    QueueDescription,
    QueueStats,
    Status,
    SubState,
    WorkerInfo,
)
from pgjobs.network import Timeouts
from pgjobs.ops import PriorityPlace, RunningPolicy
from pgjobs.outcomes import Delayed, Fatal, Retry, WaitForPrerequisites
from pgjobs.process import CONNECTION_ERRORS, CommandError, configure_logging, load_object
from pgjobs.process import serve as serve_with_signals
from pgjobs.queues import QueueSettings
from pgjobs.retrying import retry_delay
from pgjobs.schedules import SCHEDULE_RUN_KEY, RunNow, Schedule, Scheduler
from pgjobs.telemetry import Telemetry
from pgjobs.tracking import Granularity, JobOrder
from pgjobs.validation import MAX_QUEUE_BYTES
from pgjobs.validation import text as validate_text
from pgjobs.worker import Worker, WorkerOptions, WorkerStats

__all__ = [
    "CONNECTION_ERRORS",
    "DEFAULT_SCHEMA",
    "MAX_QUEUE_BYTES",
    "SCHEDULE_RUN_KEY",
    "TRANSIENT_ERRORS",
    "Backoff",
    "BatchOptions",
    "CommandError",
    "DatabaseTimeout",
    "DedupRaceError",
    "Delayed",
    "DuplicateKind",
    "Durability",
    "EdgePolicy",
    "EdgeState",
    "EnqueueOptions",
    "EnqueueResult",
    "EventStream",
    "Fatal",
    "Flow",
    "FlowConflict",
    "FlowCycle",
    "FlowEdge",
    "FlowFilter",
    "FlowNode",
    "FlowNotFound",
    "FlowRunning",
    "FlowSummary",
    "FlowView",
    "Granularity",
    "Group",
    "GroupStatus",
    "ImportCheck",
    "ImportRecord",
    "ImportedEdge",
    "ImportedJob",
    "ImportedStatus",
    "InvalidFlow",
    "InvalidJobInput",
    "InvalidOption",
    "InvalidSchemaName",
    "JobContext",
    "JobEvent",
    "JobFilter",
    "JobLost",
    "JobOrder",
    "JobQueue",
    "JobRow",
    "JobSpec",
    "JsonText",
    "Keep",
    "Kind",
    "LogLine",
    "LogPage",
    "MetricsBucket",
    "MigrationFailed",
    "NotJson",
    "PendingPrerequisites",
    "PgJobsError",
    "PoolClosed",
    "PrerequisiteTaken",
    "PriorityPlace",
    "PurgeResult",
    "QueueDescription",
    "QueueRunning",
    "QueueSettings",
    "QueueStats",
    "Registry",
    "Retry",
    "RunNow",
    "RunningPolicy",
    "Schedule",
    "ScheduleTickTaken",
    "Scheduler",
    "SchemaMissing",
    "Status",
    "SubState",
    "SubmittedFlow",
    "Telemetry",
    "Timeouts",
    "UnknownKind",
    "WaitForPrerequisites",
    "Worker",
    "WorkerInfo",
    "WorkerOptions",
    "WorkerStats",
    "configure_logging",
    "create_pool",
    "dsn_from_env",
    "jsonb_problem",
    "jsonb_safe",
    "load_object",
    "retry_delay",
    "schedule_maintenance",
    "serve_with_signals",
    "text_safe",
    "validate_schema",
    "validate_text",
]
