"""Bounds of the enqueue: how fast the facade's and the engine's enqueue of one job (and the
facade's of one flow) could be if the engine's write cost no more than a minimal statement,
whatever design achieved it. `./run bench --systems floor-async,facade-bound,facade-async,bullmq,bullmq-pg
--workloads enqueue_single,enqueue_concurrent` (and `floor,staged-bound,engine` for the
durable one; `facade-flow-bound,facade-async,engine-async,bullmq,bullmq-pg --workloads
flow_add` for flows), interleaved with the real systems like every other bench run.

Each bound runs the real code above the engine's write, with the engine's single-job insert
(``pgjobs.enqueue.insert_one``, which ``JobQueue.enqueue`` and a one-job ``enqueue_many``
reach), or its write of a flow (``Flows._submit_keyless``), swapped for one statement for the
duration of its workload:

- **facade bound**: BullMQ's ``Queue.add`` through the facade, async, its job written as a
  narrow row (queue, kind, name, payload, priority; one partial claim index, no CHECKs) and
  its 'added' event row, in one statement: less than any design that keeps the facade's
  replayable event log can do. No hand-off to an idle worker, no keys, no wake.
- **facade flow bound**: BullMQ's ``FlowProducer.add`` through the facade, async, the engine's
  one statement for a flow swapped for one writing its jobs as narrow rows, its edges and one
  'added' event row holding every job's id: no flow row, no wake.
- **staged bound**: ``JobQueue.enqueue`` (validation and all), durable, its job written with
  every value the engine's insert takes into a table with only its primary key: the enqueue of the
  staging-table design (``docs/performance.md``) without the move into ``jobs`` that its
  workers would then pay.

None is a product: each writes what no worker could claim. They answer one question, with
the machine's noise the same for all: is a target out of reach of the code above the write?
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pgjobs.client
import pgjobs.enqueue
import pgjobs.flows
from bench.systems import Engine, FacadeAsync
from pgjobs import EnqueueResult, JobQueue, create_pool
from pgjobs.enqueue import PreparedJob, row_args

Insert = Callable[..., Awaitable[EnqueueResult]]


@contextlib.contextmanager
def swapped(*places: tuple[Any, str], value: Any) -> Iterator[None]:
    """``value`` in place of each ``(owner, attribute)`` of ``places``, put back on exit."""
    real = [getattr(owner, attribute) for owner, attribute in places]
    for owner, attribute in places:
        setattr(owner, attribute, value)
    try:
        yield
    finally:
        for (owner, attribute), before in zip(places, real, strict=True):
            setattr(owner, attribute, before)


def swapped_single_insert(insert: Insert) -> contextlib.AbstractContextManager[None]:
    """``insert`` in place of the engine's single-job insert, in both modules that call it."""
    return swapped((pgjobs.enqueue, "insert_one"), (pgjobs.client, "insert_one"), value=insert)


async def commit_async(facade: FacadeAsync, dsn: str) -> None:
    """Give ``facade`` sessions that commit as the async systems' writes do (a bound's
    statement sets no commit mode of its own)."""
    await facade.pool.close()
    facade.pool = await create_pool(
        dsn, min_size=4, max_size=20, server_settings={"synchronous_commit": "off"}
    )
    facade.jobs = await JobQueue.connect(pool=facade.pool, schema=facade.schema)


class _Bound:
    """A bound: the two enqueue workloads of the system it extends, with ``_insert`` in place
    of the engine's single-job insert (the bench runs no other workload of it)."""

    workloads = ("enqueue_single", "enqueue_concurrent")

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
        await commit_async(self, dsn)
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


FLOW_DDL = """
CREATE TABLE {s}.bound_flow_jobs (id bigserial PRIMARY KEY, queue text NOT NULL,
    kind text NOT NULL, name text NOT NULL, payload jsonb NOT NULL,
    status text NOT NULL DEFAULT 'pending', priority int NOT NULL DEFAULT 0,
    run_at timestamptz NOT NULL DEFAULT now(), pending_deps int NOT NULL);
CREATE INDEX ON {s}.bound_flow_jobs (queue, priority DESC, run_at, id)
    WHERE status = 'pending' AND pending_deps = 0;
CREATE TABLE {s}.bound_edges (prerequisite_id bigint NOT NULL, dependent_id bigint NOT NULL,
    PRIMARY KEY (prerequisite_id, dependent_id));
CREATE TABLE {s}.bound_flow_events (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue text NOT NULL, event text NOT NULL, job_ids bigint[] NOT NULL,
    at timestamptz NOT NULL DEFAULT now());
"""


class FacadeFlowBound(FacadeAsync):
    """The facade's ``FlowProducer.add``, async, over a minimal flow statement (module
    docstring); flows add only."""

    name = "facade flow bound, async"
    workloads = ("flow_add",)

    async def setup(self, dsn: str) -> None:
        await super().setup(dsn)
        s = self.schema
        await self.pool.execute(FLOW_DDL.format(s=s))
        await commit_async(self, dsn)
        self.statement = (
            f"WITH src AS MATERIALIZED (SELECT nextval('{s}.bound_flow_jobs_id_seq') AS id, j.* FROM unnest("
            "$1::text[], $2::text[], $3::text[], $4::text[], $5::int[]) WITH ORDINALITY"
            " AS j(queue, kind, name, payload, pending_deps, ord)),"
            f" ins AS (INSERT INTO {s}.bound_flow_jobs (id, queue, kind, name, payload,"
            " pending_deps) SELECT id, queue, kind, name, payload::jsonb, pending_deps FROM src),"
            f" edges AS (INSERT INTO {s}.bound_edges (prerequisite_id, dependent_id)"
            " SELECT p.id, d.id FROM unnest($6::int[], $7::int[]) AS e(p, d)"
            " JOIN src p ON p.ord = e.p JOIN src d ON d.ord = e.d),"
            f" added AS (INSERT INTO {s}.bound_flow_events (queue, event, job_ids)"
            " SELECT min(queue), 'added', array_agg(id ORDER BY ord) FROM src)"
            " SELECT id FROM src ORDER BY ord"
        )

    async def _submit(
        self,
        flow: Any,
        order: list[str],
        prepared: list[PreparedJob],
        meta: str | None,
        tenant: str | None,
        connection: Any,
        commit: str | None,
    ) -> pgjobs.flows.SubmittedFlow:
        ordinal = {node: index for index, node in enumerate(order, start=1)}
        edges = list(flow._edges)
        target = connection if connection is not None else self.pool
        rows = await target.fetch(
            self.statement,
            [job.queue for job in prepared],
            [job.kind for job in prepared],
            [job.name for job in prepared],
            [job.payload for job in prepared],
            [job.pending_deps for job in prepared],
            [ordinal[p] for p, _ in edges],
            [ordinal[d] for _, d in edges],
        )
        self.written += 1
        ids = {node: row["id"] for node, row in zip(order, rows, strict=True)}
        return pgjobs.flows.SubmittedFlow(rows[0]["id"], ids)

    async def flow_add(self, flows: int, children: int) -> float:
        async def submit(_flows: Any, *args: Any) -> pgjobs.flows.SubmittedFlow:
            return await self._submit(*args)

        self.written = 0
        with swapped((pgjobs.flows.Flows, "_submit_keyless"), value=submit):
            rate = await super().flow_add(flows, children)
        assert self.written == flows, "a flow took another path than the one swapped"
        return rate


BOUNDS: dict[str, type[Any]] = {
    "facade-bound": FacadeBound,
    "facade-flow-bound": FacadeFlowBound,
    "staged-bound": StagedBound,
}
