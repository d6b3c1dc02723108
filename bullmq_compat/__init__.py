"""BullMQ's Python API on the pgjobs engine: swap ``from bullmq import ...`` for
``from bullmq_compat import ...`` and pass a PostgreSQL connection. See PORTING.md for what
differs and what is not built yet."""

from bullmq_compat.errors import (
    DelayedError,
    RateLimitError,
    UnrecoverableError,
    WaitingChildrenError,
)
from bullmq_compat.flow_producer import FlowProducer
from bullmq_compat.job import Job
from bullmq_compat.queue import MetricsTime, Queue
from bullmq_compat.queue_events import QueueEvents, QueueEventsProducer
from bullmq_compat.worker import Worker

__all__ = [
    "DelayedError",
    "FlowProducer",
    "Job",
    "MetricsTime",
    "Queue",
    "QueueEvents",
    "QueueEventsProducer",
    "RateLimitError",
    "UnrecoverableError",
    "WaitingChildrenError",
    "Worker",
]
