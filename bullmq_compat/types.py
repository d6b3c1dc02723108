"""The option dicts of BullMQ's Python API as TypedDicts (``bullmq.types``), so that mypy on a
port catches a misspelt option. Every key is optional; milliseconds wherever BullMQ counts
time. What the facade does with each is in docs/porting.md."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, TypedDict

import asyncpg

import pgjobs

ConnectionOptions = str | dict[str, Any] | pgjobs.JobQueue | asyncpg.Pool
"""A PostgreSQL DSN, asyncpg connection arguments, a JobQueue or a pool to share."""


class BackoffOptions(TypedDict, total=False):
    type: Literal["fixed", "exponential"] | str
    """``fixed``, ``exponential``, or a name for the worker's ``settings.backoffStrategy``."""
    delay: int
    jitter: float


class KeepJobs(TypedDict, total=False):
    age: int
    """Seconds a finished job is kept."""
    count: int
    """How many finished jobs are kept."""
    limit: int


class DeduplicationOptions(TypedDict, total=False):
    id: str
    ttl: int
    extend: bool
    replace: bool


class ParentOptions(TypedDict):
    id: str
    queue: str
    """The parent's queue, qualified: ``<prefix>:<name>``."""


class JobOptions(TypedDict, total=False):
    jobId: str
    timestamp: int
    delay: int
    attempts: int
    priority: int
    """1 (highest) to 2,097,151; 0 or none runs before every prioritized job."""
    lifo: bool
    backoff: int | BackoffOptions
    removeOnComplete: bool | int | KeepJobs
    removeOnFail: bool | int | KeepJobs
    keepLogs: int
    stackTraceLimit: int
    deduplication: DeduplicationOptions
    parent: ParentOptions
    failParentOnFailure: bool
    continueParentOnFailure: bool
    ignoreDependencyOnFailure: bool
    removeDependencyOnFailure: bool


class QueueBaseOptions(TypedDict, total=False):
    connection: ConnectionOptions
    prefix: str
    schema: str
    """The pgjobs schema (default ``pgjobs``)."""
    durability: Literal["durable", "async"] | pgjobs.Durability
    """How adds and outcomes commit (pgjobs; docs/porting.md compares it with Redis' modes)."""
    defaultJobOptions: JobOptions
    streams: dict[str, Any]
    telemetry: Any
    """A ``pgjobs.telemetry.Telemetry`` (BullMQ takes a ``bullmq-otel`` instance here)."""


class BulkJob(TypedDict, total=False):
    """One job of ``Queue.addBulk``."""

    name: str
    data: Any
    opts: JobOptions


class LimiterOptions(TypedDict):
    max: int
    duration: int


class WorkerSettings(TypedDict, total=False):
    backoffStrategy: Callable[[int, str, BaseException, Any], int | None]
    """(attemptsMade, type, error, job) -> ms before the retry; -1 fails the job."""


class WorkerOptions(QueueBaseOptions, total=False):
    name: str
    autorun: bool
    concurrency: int
    lockDuration: int
    lockRenewTime: int
    stalledInterval: int
    maxStalledCount: int
    drainDelay: int
    limiter: LimiterOptions
    removeOnComplete: bool | int | KeepJobs
    removeOnFail: bool | int | KeepJobs
    settings: WorkerSettings
    shutdownTimeout: int
    """pgjobs: ms running jobs get on ``close()`` before they are given back (default 1 h)."""


class QueueEventsOptions(QueueBaseOptions, total=False):
    autorun: bool
    lastEventId: str


QueueEventsProducerOptions = QueueBaseOptions


class RetryJobsOptions(TypedDict, total=False):
    state: Literal["failed", "completed"]
    count: int
    timestamp: int


class PromoteJobsOptions(TypedDict, total=False):
    count: int


class RepeatOptions(TypedDict, total=False):
    every: int
    pattern: str
    tz: str
    limit: int
    count: int
    startDate: int | str
    endDate: int | str
    immediately: bool
    offset: int


class JobSchedulerTemplateJson(TypedDict, total=False):
    data: Any
    opts: JobOptions


class JobSchedulerJson(TypedDict, total=False):
    key: str
    id: str
    name: str
    iterationCount: int
    tz: str
    next: int | None
    every: int
    pattern: str
    limit: int
    startDate: int
    endDate: int
    template: JobSchedulerTemplateJson


__all__ = [
    "BackoffOptions",
    "BulkJob",
    "ConnectionOptions",
    "DeduplicationOptions",
    "JobOptions",
    "JobSchedulerJson",
    "JobSchedulerTemplateJson",
    "KeepJobs",
    "LimiterOptions",
    "ParentOptions",
    "PromoteJobsOptions",
    "QueueBaseOptions",
    "QueueEventsOptions",
    "QueueEventsProducerOptions",
    "RepeatOptions",
    "RetryJobsOptions",
    "WorkerOptions",
    "WorkerSettings",
]
