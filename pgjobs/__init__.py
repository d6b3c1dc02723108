"""pgjobs: a durable, typed job queue in PostgreSQL for asyncio."""

from pgjobs.backoff import Backoff
from pgjobs.client import JobQueue
from pgjobs.config import DEFAULT_SCHEMA, dsn_from_env
from pgjobs.context import JobContext
from pgjobs.enqueue import JobSpec
from pgjobs.errors import (
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
    PgJobsError,
    SchemaMissing,
    UnknownKind,
)
from pgjobs.events import EventStream
from pgjobs.executor import TRANSIENT_ERRORS, create_pool
from pgjobs.flows import EdgePolicy, Flow, SubmittedFlow
from pgjobs.imports import ImportedEdge, ImportedJob
from pgjobs.kinds import Kind, Registry
from pgjobs.models import (
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
    MetricsBucket,
    PurgeResult,
    QueueStats,
    Status,
    SubState,
)
from pgjobs.outcomes import Delayed, Fatal, Retry, WaitForPrerequisites
from pgjobs.queues import QueueSettings
from pgjobs.retrying import retry_delay
from pgjobs.schedules import Schedule, Scheduler
from pgjobs.worker import Worker, WorkerStats

__all__ = [
    "DEFAULT_SCHEMA",
    "TRANSIENT_ERRORS",
    "Backoff",
    "DedupRaceError",
    "Delayed",
    "DuplicateKind",
    "EdgePolicy",
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
    "ImportedEdge",
    "ImportedJob",
    "InvalidFlow",
    "InvalidJobInput",
    "InvalidOption",
    "InvalidSchemaName",
    "JobContext",
    "JobEvent",
    "JobFilter",
    "JobLost",
    "JobQueue",
    "JobRow",
    "JobSpec",
    "Keep",
    "Kind",
    "MetricsBucket",
    "PgJobsError",
    "PurgeResult",
    "QueueSettings",
    "QueueStats",
    "Registry",
    "Retry",
    "Schedule",
    "Scheduler",
    "SchemaMissing",
    "Status",
    "SubState",
    "SubmittedFlow",
    "UnknownKind",
    "WaitForPrerequisites",
    "Worker",
    "WorkerStats",
    "create_pool",
    "dsn_from_env",
    "retry_delay",
]
