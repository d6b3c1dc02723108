"""pgjobs: a durable, typed job queue in PostgreSQL for asyncio."""

from pgjobs.backoff import Backoff
from pgjobs.client import JobQueue
from pgjobs.context import JobContext
from pgjobs.enqueue import JobSpec
from pgjobs.errors import (
    DedupRaceError,
    DuplicateKind,
    InvalidJobInput,
    InvalidOption,
    InvalidSchemaName,
    JobLost,
    PgJobsError,
    SchemaMissing,
    UnknownKind,
)
from pgjobs.kinds import Kind, Registry
from pgjobs.models import EnqueueResult, JobRow, Status
from pgjobs.outcomes import Delayed, Fatal, Retry
from pgjobs.worker import Worker, WorkerStats

__all__ = [
    "Backoff",
    "DedupRaceError",
    "Delayed",
    "DuplicateKind",
    "EnqueueResult",
    "Fatal",
    "InvalidJobInput",
    "InvalidOption",
    "InvalidSchemaName",
    "JobContext",
    "JobLost",
    "JobQueue",
    "JobRow",
    "JobSpec",
    "Kind",
    "PgJobsError",
    "Registry",
    "Retry",
    "SchemaMissing",
    "Status",
    "UnknownKind",
    "Worker",
    "WorkerStats",
]
