"""BullMQ's Python API on the pgjobs engine: swap ``from bullmq import ...`` for
``from bullmq_compat import ...`` and pass a PostgreSQL connection. See docs/porting.md for what
differs and what is not built yet.

Besides BullMQ's names, the mapping between BullMQ and the engine is public, for tools that
write facade jobs through the engine (the Redis migration): ``KIND`` (the facade's job kind),
``DIALECT`` (what it records as its queues' dialect), ``facade_registry()``,
``engine_queue(prefix, name)``, ``enqueue_options(name, opts, prefix,
queue)``, ``edge_policy(child_opts)``, ``bullmq_state(sub_state, priority)``,
``json_data(data)`` and ``scheduler_arguments(...)``.
"""

from bullmq_compat.abort_controller import AbortController, AbortError, AbortSignal
from bullmq_compat.custom_errors import (
    DelayedError,
    GroupMaxSizeExceededError,
    RateLimitError,
    UnrecoverableError,
    WaitingChildrenError,
)
from bullmq_compat.flow_producer import FlowProducer, ParentJobNotExist
from bullmq_compat.job import Job
from bullmq_compat.job_scheduler import JobScheduler, default_repeat_strategy
from bullmq_compat.job_scheduler import upsert_arguments as scheduler_arguments
from bullmq_compat.mapping import (
    DIALECT,
    KIND,
    bullmq_state,
    edge_policy,
    engine_queue,
    enqueue_options,
    facade_registry,
    json_data,
)
from bullmq_compat.queue import MetricsTime, Queue
from bullmq_compat.queue_events import QueueEvents, QueueEventsProducer
from bullmq_compat.worker import Worker

__all__ = [
    "DIALECT",
    "KIND",
    "AbortController",
    "AbortError",
    "AbortSignal",
    "DelayedError",
    "FlowProducer",
    "GroupMaxSizeExceededError",
    "Job",
    "JobScheduler",
    "MetricsTime",
    "ParentJobNotExist",
    "Queue",
    "QueueEvents",
    "QueueEventsProducer",
    "RateLimitError",
    "UnrecoverableError",
    "WaitingChildrenError",
    "Worker",
    "bullmq_state",
    "default_repeat_strategy",
    "edge_policy",
    "engine_queue",
    "enqueue_options",
    "facade_registry",
    "json_data",
    "scheduler_arguments",
]
