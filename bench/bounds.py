"""Bounds of the one-by-one enqueue: how fast the facade's and the engine's enqueue could be
if the engine's write of one job cost no more than a minimal statement, whatever design
achieved it. `./run bench --systems floor-async,facade-bound,facade-async,bullmq,bullmq-pg
--workloads enqueue_single,enqueue_concurrent` (and `floor,staged-bound,engine` for the
durable one), interleaved with the real systems like every other bench run.

Each bound runs the real code above the engine's write, with the engine's single-job insert
(``pgjobs.enqueue.insert_one``, which ``JobQueue.enqueue`` and a one-job ``enqueue_many``
reach) swapped for one statement for the duration of its workload:

- **facade bound**: BullMQ's ``Queue.add`` through the facade, async, its job written as a
  narrow row (queue, kind, name, payload, priority; one partial claim index, no CHECKs) and
  its 'added' event row, in one statement: less than any design that keeps the facade's
  replayable event log can do. No hand-off to an idle worker, no keys, no wake.
- **staged bound**: ``JobQueue.enqueue`` (validation and all), durable, its job written with
  every value the engine's insert takes into a table with only its primary key: the enqueue of the
  staging-table design (``docs/performance.md``) without the move into ``jobs`` that its
  workers would then pay.

Neither is a product: each writes what no worker could claim. They answer one question, with
the machine's noise the same for all: is a target out of reach of the code above the write?
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pgjobs.client
import pgjobs.enqueue
from bench.systems import Engine, FacadeAsync
from pgjobs import EnqueueResult, JobQueue, create_pool
from pgjobs.enqueue import row_args

Insert = Callable[..., Awaitable[EnqueueResult]]


@contextlib.contextmanager
def swapped_single_insert(insert: Insert) -> Iterator[None]:
    """``insert`` in place of the engine's single-job insert, in both modules that call it."""
    real = pgjobs.enqueue.insert_one
    pgjobs.enqueue.insert_one = insert  # type: ignore[assignment]
    pgjobs.client.insert_one = insert  # type: ignore[assignment]
    try:
        yield
    finally:
        pgjobs.enqueue.insert_one = real
        pgjobs.client.insert_one = real


class _Bound:
    """A bound: the two enqueue workloads of the system it extends, with ``_insert`` in place
    of the engine's single-job insert; no answer for the other workloads."""

    async def _insert(
        self, db: Any, job: Any, conn: Any = None, commit: str | None = None
    ) -> EnqueueResult:
        raise NotImplementedError

    async def enqueue_single(self, n: int) -> float:
        with swapped_single_insert(self._insert):
            return await super().enqueue_single(n)  # type: ignore[misc]

    async def enqueue_concurrent(self, n: int, tasks: int) -> float:
        with swapped_single_insert(self._insert):
            return await super().enqueue_concurrent(n, tasks)  # type: ignore[misc]

    async def enqueue_bulk(self, n: int, batch: int) -> float:
        return math.nan

    async def process(self, n: int, concurrency: int) -> float:
        return math.nan

    async def latency(self, samples: int) -> tuple[float, float]:
        return (math.nan, math.nan)

    async def flow_add(self, flows: int, children: int) -> float:
        return math.nan

    async def flow_process(self, flows: int, children: int) -> float:
        return math.nan

    async def storage(self) -> tuple[float, float]:
        return (math.nan, math.nan)


NARROW_DDL = """
CREATE TABLE {s}.bound_jobs (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue text NOT NULL, kind text NOT NULL, name text NOT NULL, payload jsonb NOT NULL,
    status text NOT NULL DEFAULT 'pending', priority int NOT NULL DEFAULT 0,
    run_at timestamptz NOT NULL DEFAULT now());
CREATE INDEX ON {s}.bound_jobs (queue, priority DESC, run_at, id) WHERE status = 'pending';
CREATE TABLE {s}.bound_events (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue text NOT NULL, event text NOT NULL, job_id bigint NOT NULL,
    at timestamptz NOT NULL DEFAULT now());
"""


class FacadeBound(_Bound, FacadeAsync):  # type: ignore[misc]
    """The facade's ``Queue.add``, async, over a two-row statement (module docstring)."""

    name = "facade bound, async"

    async def setup(self, dsn: str) -> None:
        await super().setup(dsn)
        await self.pool.execute(NARROW_DDL.format(s=self.schema))
        # The facade's own sessions, committing as the async systems' enqueues do.
        await self.pool.close()
        self.pool = await create_pool(
            dsn, min_size=4, max_size=20, server_settings={"synchronous_commit": "off"}
        )
        self.jobs = await JobQueue.connect(pool=self.pool, schema=self.schema)
        self.statement = (
            f"WITH job AS (INSERT INTO {self.schema}.bound_jobs (queue, kind, name, payload,"
            " priority) VALUES ($1, $2, $3, $4::text::jsonb, $5) RETURNING id)"
            f" INSERT INTO {self.schema}.bound_events (queue, event, job_id)"
            " SELECT $1, 'added', job.id FROM job RETURNING job_id"
        )

    async def _insert(
        self, db: Any, job: Any, conn: Any = None, commit: str | None = None
    ) -> EnqueueResult:
        target = conn if conn is not None else self.pool
        row_id = await target.fetchval(
            self.statement, job.queue, job.kind, job.name, job.payload, job.priority
        )
        return EnqueueResult(row_id)


STAGED_DDL = """
CREATE TABLE {s}.staged_jobs (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue text NOT NULL, kind text NOT NULL, name text NOT NULL, payload jsonb NOT NULL,
    priority int NOT NULL, run_at timestamptz NOT NULL, max_attempts int NOT NULL,
    max_deferrals int, backoff jsonb, dedup_key text, group_key text, tenant text,
    metadata jsonb, job_key text, retention jsonb, flow_id bigint, pending_deps int NOT NULL,
    record_events bool NOT NULL);
"""


class StagedBound(_Bound, Engine):  # type: ignore[misc]
    """The engine's ``JobQueue.enqueue``, durable, over one INSERT into a table with only its
    primary key (module docstring)."""

    name = "staged bound"

    async def setup(self, dsn: str) -> None:
        await super().setup(dsn)
        await self.pool.execute(STAGED_DDL.format(s=self.schema))
        # every value the engine's insert takes (pgjobs.enqueue.row_args), run_at and delay
        # made one column
        self.statement = (
            f"INSERT INTO {self.schema}.staged_jobs (queue, kind, name, payload, priority,"
            " run_at, max_attempts, max_deferrals, backoff, dedup_key, group_key, tenant,"
            " metadata, job_key, retention, flow_id, pending_deps, record_events)"
            " VALUES ($1, $2, $3, $4::text::jsonb, $5,"
            " coalesce($6, now() + make_interval(secs => coalesce($7, 0))), $8, $9,"
            " $10::text::jsonb, $11, $12, $13, $14::text::jsonb, $15, $16::text::jsonb, $17,"
            " $18, $19) RETURNING id"
        )

    async def _reset(self) -> None:
        await self.pool.execute(f"TRUNCATE {self.schema}.jobs, {self.schema}.staged_jobs CASCADE")

    async def _insert(
        self, db: Any, job: Any, conn: Any = None, commit: str | None = None
    ) -> EnqueueResult:
        target = conn if conn is not None else self.pool
        return EnqueueResult(await target.fetchval(self.statement, *row_args(job)))


BOUNDS: dict[str, type[Any]] = {"facade-bound": FacadeBound, "staged-bound": StagedBound}
