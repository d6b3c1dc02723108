"""JobQueue: the entry point for producers and operators."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import time
import weakref
from collections.abc import Iterable, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from datetime import datetime, timedelta
from typing import Any, Unpack

import asyncpg
import pydantic_core

from pgjobs import events, imports, migrate, validation
from pgjobs.config import DEFAULT_SCHEMA, dsn_from_env, notify_channel
from pgjobs.context import JobContext, read_prerequisites
from pgjobs.enqueue import (
    BatchOptions,
    EnqueueOptions,
    JobSpec,
    PreparedBatch,
    insert_batch,
    insert_many,
    insert_one,
    prepare,
    prepare_batch,
    record_kinds,
)
from pgjobs.errors import InvalidOption, QueueRunning
from pgjobs.events import EventStream
from pgjobs.executor import Connection, Database
from pgjobs.flows import EdgePolicy, Flow, Flows, SubmittedFlow
from pgjobs.groups import UNCHANGED, Group, Groups
from pgjobs.imports import ImportCheck, ImportedEdge, ImportedJob, ImportRecord, import_jobs
from pgjobs.jsonvalue import JsonText
from pgjobs.kinds import Kind, Registry
from pgjobs.maintenance import register_maintenance
from pgjobs.models import (
    Durability,
    EnqueueResult,
    FlowFilter,
    FlowSummary,
    FlowView,
    JobFilter,
    JobRow,
    LogPage,
    MetricsBucket,
    PurgeResult,
    QueueDescription,
    QueueStats,
    SubState,
    WorkerInfo,
)
from pgjobs.network import Timeouts
from pgjobs.ops import Operations, PriorityPlace, RunningPolicy
from pgjobs.queues import QueueControl, QueueSettings
from pgjobs.schedules import RunNow, Schedule, Scheduler, Schedules
from pgjobs.telemetry import Telemetry
from pgjobs.tracking import Granularity, JobOrder, Tracking, job_row
from pgjobs.worker import Worker, WorkerOptions


class JobQueue:
    """Enqueue typed jobs, read them back, and build workers, on one schema of one database.

    >>> jobs = await JobQueue.connect("postgresql://...", registry=registry)
    >>> await jobs.migrate()
    >>> result = await jobs.enqueue("send_email", {"to": "a@example.com"}, priority=5)

    ``durability`` (``"durable"``, the default, or ``"async"``; see Durability) is how this
    queue's enqueues, flow submissions, hand-claimed outcomes and workers commit, unless a
    call or a worker says otherwise.
    """

    def __init__(
        self,
        db: Database,
        registry: Registry | None = None,
        *,
        durability: Durability | str = Durability.DURABLE,
        telemetry: Telemetry | None = None,
    ) -> None:
        self.db = db
        self.registry = registry if registry is not None else Registry()
        self.durability = validation.durability(durability)
        self.telemetry = telemetry
        """OpenTelemetry spans and metrics of this queue's enqueues and workers (None: off)."""
        self._ops = Operations(db, self.registry)
        self._flows = Flows(db, self.registry)
        self._queues = QueueControl(db)
        self._groups = Groups(db)
        self._schedules = Schedules(db, self.registry)
        self._tracking = Tracking(db)
        self._workers: weakref.WeakSet[Worker] = weakref.WeakSet()

    @classmethod
    async def connect(
        cls,
        dsn: str | None = None,
        *,
        registry: Registry | None = None,
        schema: str = DEFAULT_SCHEMA,
        pool: asyncpg.Pool | None = None,
        min_size: int = 1,
        max_size: int = 10,
        durability: Durability | str = Durability.DURABLE,
        listen_dsn: str | None = None,
        telemetry: Telemetry | None = None,
        timeouts: Timeouts | dict[str, Any] | None = None,
        **connect_options: Any,
    ) -> JobQueue:
        """Open a pool on ``dsn`` (default: ``PGJOBS_DSN``, then ``DATABASE_URL``, then local),
        or use ``pool``, which is then left open by ``close()``. ``connect_options`` go to
        ``asyncpg.create_pool`` (e.g. ``statement_cache_size=0`` behind pgbouncer in
        transaction mode). ``listen_dsn``: where workers and event streams hold their LISTEN
        connection, when ``dsn`` goes through a transaction-mode pooler that cannot keep one
        (PostgreSQL directly, or a session-mode pool); without it they listen on the pool and,
        behind such a pooler, fall back to polling with a logged warning. ``telemetry``: a
        ``pgjobs.telemetry.Telemetry`` for OpenTelemetry spans and metrics.

        ``timeouts``: how long to wait on a silent network (``pgjobs.Timeouts``, or a dict of
        its fields): statement deadlines, the connect timeout, TCP keepalives. A ``dsn`` with
        several hosts and ``target_session_attrs=read-write`` follows a failover to the new
        primary; libpq's ``keepalives_*``, ``tcp_user_timeout`` and ``connect_timeout`` in it
        are honoured. A ``pool`` passed in keeps its own connections' settings (make it with
        ``pgjobs.create_pool`` for keepalives); the deadlines apply to it all the same."""
        level = validation.durability(durability)
        if pool is not None:
            db = Database(pool, schema, owns_pool=False, listen_dsn=listen_dsn, timeouts=timeouts)
            return cls(db, registry, durability=level, telemetry=telemetry)
        resolved = dsn or dsn_from_env()
        assert resolved is not None
        db = await Database.connect(
            resolved,
            schema,
            min_size=min_size,
            max_size=max_size,
            listen_dsn=listen_dsn,
            timeouts=timeouts,
            **connect_options,
        )
        return cls(db, registry, durability=level, telemetry=telemetry)

    def _commit(self, durability: Durability | str | None) -> str | None:
        level = self.durability if durability is None else validation.durability(durability)
        return validation.commit_setting(level)

    async def close(self) -> None:
        """Close the pool if this queue opened it (``connect`` with a DSN), after stopping the
        workers it made (as ``Worker.stop()``: running handlers get their shutdown timeout,
        the rest go back to pending): a pool being closed waits for the connections they hold.
        A pool passed in is the caller's to close, and its workers theirs to stop."""
        if self.db.owns_pool:
            for worker in list(self._workers):
                await worker.stop()
        await self.db.close()

    async def __aenter__(self) -> JobQueue:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def schema(self) -> str:
        return self.db.schema

    @property
    def timeouts(self) -> Timeouts:
        """How long this queue waits on a silent network (``JobQueue.connect(timeouts=...)``)."""
        return self.db.timeouts

    @property
    def pool(self) -> asyncpg.Pool:
        """The asyncpg pool, to share with other JobQueues or your own code."""
        return self.db.pool

    def transaction(self) -> AbstractAsyncContextManager[Connection]:
        """A pool connection in a transaction, for enqueueing or submitting flows together
        with your own writes (pass it as ``connection=``): all of it commits, or none."""
        return self.db.transaction()

    async def migrate(self) -> list[int]:
        """Apply pending schema migrations (idempotent, safe to run concurrently)."""
        async with self.db.pool.acquire() as conn:
            return await migrate.apply_migrations(conn, self.db.schema)

    async def check_schema(self) -> None:
        """Raise SchemaMissing, saying what to run, unless the schema is fully migrated (its
        version and its function definitions are this code's)."""
        await self.db.check_schema()

    # -- enqueue ---------------------------------------------------------------------------

    async def enqueue(
        self,
        kind: str | Kind[Any],
        input: Any,
        *,
        connection: Connection | None = None,
        durability: Durability | str | None = None,
        **options: Unpack[EnqueueOptions],
    ) -> EnqueueResult:
        """Validate and enqueue one job; return its id.

        Options: ``queue``, ``priority`` (higher first), ``run_at`` or ``delay`` (seconds),
        ``max_attempts``, ``backoff``, ``max_deferrals``, ``name``, ``dedup_key``,
        ``group_key``, ``tenant``, ``metadata``, ``job_key``, ``keep_completed``, ``keep_dead``,
        ``events`` (log its transitions, see ``events``), ``lifo`` (run before the jobs of its
        priority already waiting). With ``connection``, the job is written in
        the caller's transaction: it exists (and wakes workers) only if that commits.
        With ``dedup_key``, an in-flight job holding the key is returned with
        ``duplicate=True`` instead of a new one. ``durability``: this call's, instead of the
        queue's (with ``connection``, it applies to the caller's whole transaction).
        """
        commit = self._commit(durability)
        if self.telemetry is not None:
            name = kind.name if isinstance(kind, Kind) else kind
            with self.telemetry.enqueue_span(name, options.get("queue"), 1) as carrier:
                options["metadata"] = self.telemetry.carry(options.get("metadata"), carrier)
                job = prepare(JobSpec(kind, input, **options), self.registry)
                return await insert_one(self.db, job, connection, commit)
        return await insert_one(
            self.db, prepare(JobSpec(kind, input, **options), self.registry), connection, commit
        )

    async def record_kinds(self) -> None:
        """Record this registry's kinds and their defaults in the database, so that SQL can
        enqueue jobs of them (``SELECT {schema}.enqueue(kind, payload, ...)``, docs: Enqueue
        from SQL). Every worker records its kinds as it starts."""
        await record_kinds(self.db, self.registry)

    async def enqueue_many(
        self,
        specs: Iterable[JobSpec],
        *,
        connection: Connection | None = None,
        durability: Durability | str | None = None,
    ) -> list[EnqueueResult]:
        """Validate every spec, then write them all in one statement; results in input order.

        If any spec is invalid, nothing is written. ``durability`` as for ``enqueue``.
        """
        commit = self._commit(durability)
        if self.telemetry is not None:
            listed = list(specs)
            kinds = {s.kind.name if isinstance(s.kind, Kind) else s.kind for s in listed}
            queues = {s.queue for s in listed}
            with self.telemetry.enqueue_span(
                kinds.pop() if len(kinds) == 1 else "(several kinds)",
                queues.pop() if len(queues) == 1 else None,
                len(listed),
            ) as carrier:
                carried = [
                    dataclasses.replace(s, metadata=self.telemetry.carry(s.metadata, carrier))
                    for s in listed
                ]
                prepared = [prepare(spec, self.registry) for spec in carried]
                return await insert_many(self.db, prepared, connection, commit)
        prepared = [prepare(spec, self.registry) for spec in specs]
        return await insert_many(self.db, prepared, connection, commit)

    async def enqueue_batch(
        self,
        kind: str | Kind[Any],
        inputs: Iterable[Any] | JsonText,
        *,
        names: Iterable[str] | None = None,
        connection: Connection | None = None,
        durability: Durability | str | None = None,
        **options: Unpack[BatchOptions],
    ) -> list[EnqueueResult]:
        """Enqueue one job of ``kind`` per input, all with the same ``options``, in one
        statement; results in input order. The fastest bulk path: the options are validated
        once and bound once, and the inputs are validated and encoded as one list, not per
        job. ``inputs`` may be one ``JsonText`` holding a JSON array, one input per element
        (JSON you already encoded). ``names``: one job name per input (default: the kind's).
        Options that name one job (``job_key``, ``dedup_key``, ``lifo``...) are refused: use
        ``enqueue_many``. If any input is invalid, nothing is written (InvalidJobInput names
        its position, ``index``); ``connection`` and ``durability`` as for ``enqueue``."""
        commit = self._commit(durability)
        values = inputs if isinstance(inputs, JsonText) else list(inputs)
        if not values:
            return []
        listed = None if names is None else list(names)
        if self.telemetry is not None:
            name = kind.name if isinstance(kind, Kind) else kind
            if listed is not None:
                count = len(listed)
            elif isinstance(values, JsonText):
                count = len(pydantic_core.from_json(values.text))
            else:
                count = len(values)
            with self.telemetry.enqueue_span(name, options.get("queue"), count) as carrier:
                options["metadata"] = self.telemetry.carry(options.get("metadata"), carrier)
                return await self._enqueue_batch(kind, values, listed, connection, commit, options)
        return await self._enqueue_batch(kind, values, listed, connection, commit, options)

    async def _enqueue_batch(
        self,
        kind: str | Kind[Any],
        values: list[Any] | JsonText,
        names: list[str] | None,
        connection: Connection | None,
        commit: str | None,
        options: BatchOptions,
    ) -> list[EnqueueResult]:
        prepared = prepare_batch(kind, values, names, dict(options), self.registry)
        if isinstance(prepared, PreparedBatch):
            return await insert_batch(self.db, prepared, connection, commit)
        return await insert_many(self.db, prepared, connection, commit)

    # -- reads -----------------------------------------------------------------------------

    async def get(
        self, job_id: int, *, tenant: str | None = None, any_tenant: bool = False
    ) -> JobRow | None:
        """The job, if it exists and belongs to ``tenant`` (None: only jobs without a tenant).

        Another tenant's job is reported as absent, never as forbidden. ``any_tenant=True``
        is for internal operators only.
        """
        if isinstance(job_id, bool) or not isinstance(job_id, int):
            return None
        record = await self.db.fetchrow("get_job", job_id, tenant, any_tenant)
        return None if record is None else job_row(record)

    async def find_by_job_key(
        self,
        job_key: str,
        *,
        tenant: str | None = None,
        any_tenant: bool = False,
        limit: int = 50,
    ) -> list[JobRow]:
        """The jobs named by ``job_key`` in any queue (a key names one job per queue), oldest
        first; tenant scoping as for ``get``. Reads the job-key index queue by queue, never the
        whole table."""
        validation.text("job_key", job_key, optional=False)
        validation.integer("limit", limit, 1, 10_000)
        rows = await self.db.fetch("jobs_by_job_key", job_key, tenant, any_tenant, limit)
        return [job_row(r) for r in rows]

    async def get_by_dedup_key(
        self, queue: str, dedup_key: str, *, tenant: str | None = None
    ) -> JobRow | None:
        """The pending or running job holding ``dedup_key`` in ``queue`` for ``tenant``."""
        record = await self.db.fetchrow("get_by_dedup_key", queue, dedup_key, tenant)
        return None if record is None else job_row(record)

    async def dedup_holder(
        self, queue: str, dedup_key: str, *, tenant: str | None = None
    ) -> int | None:
        """The id of the job that holds ``dedup_key`` now: by an unexpired time-bound hold
        (``dedup_ttl``), else by being in flight. None when the key is free."""
        holder = await self.db.fetchval("dedup_holder", queue, tenant, dedup_key)
        return None if holder is None else int(holder)

    async def release_dedup_key(
        self, queue: str, dedup_key: str, *, tenant: str | None = None
    ) -> bool:
        """Free ``dedup_key`` at once (its holder keeps running); True if something held it."""
        return bool(await self.db.fetchval("release_dedup_key", queue, tenant, dedup_key))

    # -- workers ---------------------------------------------------------------------------

    async def claim(
        self,
        queues: Sequence[str],
        *,
        kinds: Sequence[str] | None = None,
        limit: int = 1,
        lease: float = 30.0,
        durability: Durability | str | None = None,
        rate_limit: int | None = None,
        rate_period: float | None = None,
        group_concurrency: int | None = None,
        group_rate_limit: int | None = None,
        group_rate_period: float | None = None,
    ) -> list[JobContext]:
        """Claim up to ``limit`` due jobs of ``queues`` by hand (no worker), best first, leased
        for ``lease`` seconds, honouring pause, caps and rate limits as a worker's claim does.
        ``kinds``: those to take (default: every kind of this queue's registry).
        ``rate_limit`` starts per ``rate_period`` seconds: the claimer's own limit, counted in
        the window each queue shares among the claims that pass one (see Worker).
        ``group_concurrency``, ``group_rate_limit`` per ``group_rate_period``: the claimer's
        cap and limit for each group of a grouped queue (see Worker).

        Finish each with ``ctx.complete(output)``, ``ctx.fail(exc)`` or ``ctx.release()``; keep
        it past its lease with ``ctx.extend_lease()``. A job left unfinished when its lease ends
        has stalled and is put back by any worker's rescue. ``durability``: how those outcomes
        commit (default: the queue's).
        """
        self._commit(durability)  # a bad level is refused before anything is claimed
        wanted = sorted(kinds) if kinds is not None else self.registry.names()
        if not wanted:
            raise InvalidOption("kinds", "name the kinds to claim (the registry has none)")
        validation.integer("limit", limit, 1, 10_000)
        if isinstance(lease, bool) or not isinstance(lease, int | float) or not lease > 0:
            raise InvalidOption("lease", f"must be > 0 seconds, got {lease!r}")
        names = [validation.queue(q) for q in queues]
        sent = time.monotonic()
        own: tuple[int | None, float | None] = (None, None)
        if rate_limit is not None or rate_period is not None:
            own = validation.rate_limit(rate_limit, rate_period, ("rate_limit", "rate_period"))
        per_group: tuple[int | None, float | None] = (None, None)
        if group_rate_limit is not None or group_rate_period is not None:
            per_group = validation.rate_limit(
                group_rate_limit, group_rate_period, ("group_rate_limit", "group_rate_period")
            )
        if group_concurrency is not None:
            validation.integer("group_concurrency", group_concurrency, 1, 2**31 - 1)
        if own[0] is None and per_group[0] is None and group_concurrency is None:
            rows = await self.db.fetch("claim", names, wanted, limit, float(lease), 0)
        else:
            rows = await self.db.fetch(
                "claim_limited", names, wanted, limit, float(lease), 0, *own,
                group_concurrency, *per_group,
            )  # fmt: skip
        ordered = sorted(rows, key=lambda r: (-r["priority"], r["run_at"], r["id"]))
        await self._schedules.started(ordered)
        commit = self._commit(durability)
        return [JobContext(self.db, row, float(lease), commit, sent) for row in ordered]

    def worker(self, **options: Unpack[WorkerOptions]) -> Worker:
        """A Worker for this queue's registry; see Worker for the options (``durability``
        defaults to the queue's)."""
        options.setdefault("durability", self.durability)
        options.setdefault("telemetry", self.telemetry)
        worker = Worker(self.db, self.registry, **options)
        self._workers.add(worker)
        return worker

    # -- flows -----------------------------------------------------------------------------

    async def submit_flow(
        self,
        flow: Flow,
        *,
        metadata: Any = None,
        default_priority: int | None = None,
        tenant: str | None = None,
        connection: Connection | None = None,
        durability: Durability | str | None = None,
        reuse: bool = False,
    ) -> SubmittedFlow:
        """Write a flow's nodes, edges and flow row in one transaction; see Flows.submit.
        ``durability`` as for ``enqueue``: an async flow is lost whole or kept whole. With
        ``reuse``, a node without prerequisites whose job key or dedup key is taken is the
        existing job (see Flows.submit). With telemetry, the submission is one producer span,
        and every node's attempts are its children."""
        telemetry = self.telemetry
        span: AbstractContextManager[dict[str, str] | None] = contextlib.nullcontext()
        if telemetry is not None:
            span = telemetry.flow_span(flow.name, len(flow.order()))
        with span as carrier:
            return await self._flows.submit(
                flow,
                metadata=metadata,
                default_priority=default_priority,
                tenant=tenant,
                connection=connection,
                commit=self._commit(durability),
                reuse=reuse,
                carry=None
                if carrier is None
                else functools.partial(Telemetry.carry, carrier=carrier),
            )

    async def rerun_flow(
        self, flow_id: int, *, tenant: str | None = None, any_tenant: bool = False
    ) -> SubmittedFlow:
        """Clone a flow under a new id, all nodes pending, priorities and budgets kept."""
        return await self._flows.rerun(flow_id, tenant=tenant, any_tenant=any_tenant)

    async def requeue_flow(
        self, flow_id: int, *, tenant: str | None = None, any_tenant: bool = False
    ) -> list[int]:
        """Re-drive a failed flow in place (refused with FlowRunning while a node runs)."""
        return await self._flows.requeue(flow_id, tenant=tenant, any_tenant=any_tenant)

    async def add_prerequisite(
        self,
        dependent_id: int,
        kind: str | Kind[Any],
        input: Any,
        *,
        policy: EdgePolicy = EdgePolicy.BLOCK,
        tenant: str | None = None,
        any_tenant: bool = False,
        connection: Connection | None = None,
        sole_dependent: bool = False,
        wait: bool = True,
        **options: Any,
    ) -> EnqueueResult:
        """Enqueue a job that the pending or running job ``dependent_id`` must wait for (a child
        added while its parent runs); see Flows.add_prerequisite. The running parent then raises
        ``WaitForPrerequisites`` to wait for it. With ``sole_dependent``, an existing job its
        job key names that another existing job already waits for is refused
        (PrerequisiteTaken), nothing written. With ``wait=False`` a pending dependent stays
        claimable, its completion refused until the prerequisite ends (see add_dependency)."""
        return await self._flows.add_prerequisite(
            dependent_id,
            JobSpec(kind, input, **options),
            policy,
            tenant=tenant,
            any_tenant=any_tenant,
            connection=connection,
            sole_dependent=sole_dependent,
            wait=wait,
        )

    async def add_dependency(
        self,
        prerequisite_id: int,
        dependent_id: int,
        *,
        policy: EdgePolicy = EdgePolicy.BLOCK,
        tenant: str | None = None,
        any_tenant: bool = False,
        connection: Connection | None = None,
        wait: bool = True,
    ) -> None:
        """Make the pending or running job ``dependent_id`` wait for the job
        ``prerequisite_id`` too, whatever flows they belong to; see Flows.add_dependency.
        ``wait=False``: a pending dependent nothing holds back stays claimable (BullMQ's child
        added to a waiting parent), its completion refused until the prerequisite ends."""
        await self._flows.add_dependency(
            prerequisite_id,
            dependent_id,
            policy,
            tenant=tenant,
            any_tenant=any_tenant,
            connection=connection,
            wait=wait,
        )

    async def remove_dependency(
        self,
        prerequisite_id: int,
        dependent_id: int,
        *,
        tenant: str | None = None,
        any_tenant: bool = False,
        connection: Connection | None = None,
    ) -> bool:
        """Stop ``dependent_id`` waiting for ``prerequisite_id`` (the edge goes; a dependent
        left with nothing to wait for becomes claimable). False if there was no such edge, or
        if either job belongs to a tenant other than ``tenant`` (unless ``any_tenant``)."""
        return bool(
            await self.db.fetchval(
                "detach_prerequisite",
                prerequisite_id,
                dependent_id,
                notify_channel(self.db.schema),
                tenant,
                any_tenant,
                conn=connection,
            )
        )

    async def remove_tree(
        self,
        job_id: int,
        *,
        tenant: str | None = None,
        any_tenant: bool = False,
        connection: Connection | None = None,
    ) -> int | None:
        """Delete ``job_id`` and every job it waits for, transitively (its prerequisites,
        theirs, ...), in one transaction: the jobs of the tree are locked, and the tree read
        again until no prerequisite joined it meanwhile. Dependents outside the tree are
        resolved as by ``purge`` (released, or failed through a cascade edge); each deleted job
        that records events gets a 'removed' event. Nothing is deleted, and None is returned,
        when a job of the tree is running with its lease live (a worker holds it); else the
        number of jobs deleted (0 when ``job_id`` does not exist or belongs to a tenant other
        than ``tenant``, unless ``any_tenant``)."""
        return await self._flows.remove_tree(
            job_id, tenant=tenant, any_tenant=any_tenant, connection=connection
        )

    async def dependents_of(
        self, job_id: int, *, tenant: str | None = None, any_tenant: bool = False
    ) -> list[dict[str, Any]]:
        """The jobs that wait for ``job_id``: id, the policy and state of each edge, and the
        dependent's ``queue`` and ``job_key`` (both None when the dependent is gone)."""
        rows = await self.db.fetch("dependents_of", job_id, tenant, any_tenant)
        return [dict(row) for row in rows]

    async def prerequisite_results(
        self, job_id: int, *, tenant: str | None = None, any_tenant: bool = False
    ) -> list[dict[str, Any]]:
        """Each prerequisite of ``job_id``: id, kind, name, queue, status, output, edge policy,
        edge state and the failure recorded on the edge; none when ``job_id`` belongs to a
        tenant other than ``tenant`` (unless ``any_tenant``)."""
        return await read_prerequisites(self.db, job_id, tenant=tenant, any_tenant=any_tenant)

    # -- operations ------------------------------------------------------------------------

    async def cancel(
        self,
        job_id: int,
        *,
        tenant: str | None = None,
        any_tenant: bool = False,
        connection: Connection | None = None,
    ) -> bool:
        """Cancel a pending or running job (a terminal state). A running job's worker learns it
        at its next fenced write. Dependents are resolved by their edge policies. With
        ``connection``, it happens in the caller's transaction."""
        return bool(
            await self._ops.cancel(
                [job_id], tenant=tenant, any_tenant=any_tenant, connection=connection
            )
        )

    async def cancel_matching(
        self, where: JobFilter, *, connection: Connection | None = None
    ) -> list[int]:
        """Cancel every pending or running job matching ``where`` in one transaction (the
        caller's, with ``connection``), as ``cancel`` does each; returns the ids cancelled.
        A job that finishes while the cancel waits for it is left finished. ``where.tenant``
        scopes it to one tenant (None: every tenant's jobs)."""
        return await self._ops.cancel_where(where, connection)

    async def cancel_flow(
        self, flow_id: int, *, tenant: str | None = None, any_tenant: bool = False
    ) -> list[int]:
        """Cancel every pending or running node of a flow; returns their ids."""
        return await self._ops.cancel_flow(flow_id, tenant=tenant, any_tenant=any_tenant)

    async def requeue(
        self,
        job_id: int,
        *,
        tenant: str | None = None,
        any_tenant: bool = False,
        reset_attempts: bool = True,
        clear_outcome: bool = False,
    ) -> bool:
        """Re-drive a finished job, due now: a new life cycle (fresh attempts, deferrals and
        stall count), or with ``reset_attempts=False`` the same one going on (its next run
        counts as its next attempt, as BullMQ's ``job.retry()`` does). The finished run's
        ``started_at``, ``output`` and ``last_error`` stay readable until the next run
        replaces them, unless ``clear_outcome``: then they go (``last_error`` too except on a
        completed job, whose last_error is that of its last failed attempt), as BullMQ's
        ``job.retry()`` clears processedOn, returnvalue and failedReason."""
        where = JobFilter(ids=(job_id,), tenant=tenant)
        if tenant is None and not any_tenant:
            rows = await self.db.fetchrow("get_job", job_id, None, False)
            if rows is None:
                return False
        return bool(
            await self._ops.requeue(where, reset=reset_attempts, clear_outcome=clear_outcome)
        )

    async def requeue_dead(self, where: JobFilter | None = None) -> list[int]:
        """Re-drive every dead job matching ``where``; returns their ids."""
        base = where or JobFilter()
        return await self._ops.requeue(JobFilter(**{**_fields(base), "status": "dead"}))

    async def requeue_finished(
        self,
        where: JobFilter,
        *,
        connection: Connection | None = None,
        reset_attempts: bool = True,
        clear_outcome: bool = False,
    ) -> list[int]:
        """Re-drive every finished job (completed, dead or cancelled) matching ``where``, as
        ``requeue`` does, in one transaction (the caller's, with ``connection``); returns their
        ids."""
        return await self._ops.requeue(
            where, connection, reset=reset_attempts, clear_outcome=clear_outcome
        )

    async def reschedule(
        self,
        job_id: int,
        delay: float,
        *,
        tenant: str | None = None,
        any_tenant: bool = False,
    ) -> bool:
        """Make a pending job due ``delay`` seconds from now; False if it is not pending."""
        seconds = validation.delay_seconds(delay)
        row = await self.db.fetchrow(
            "reschedule", job_id, tenant, any_tenant, seconds or 0.0, notify_channel(self.db.schema)
        )
        return row is not None

    async def promote(
        self, job_id: int, *, tenant: str | None = None, any_tenant: bool = False
    ) -> bool:
        """Make a delayed job due now; False if it was not a delayed pending job."""
        return await self._ops.promote(job_id, tenant=tenant, any_tenant=any_tenant)

    async def duplicate(
        self, job_id: int, *, tenant: str | None = None, any_tenant: bool = False
    ) -> int | None:
        """Enqueue a copy of job ``job_id`` (in any state), due now: its queue, kind, name,
        payload, priority, attempts, backoff, retention, group, tenant and metadata, with no
        job key, dedup key or flow. Returns the new job's id, or None if there is no such job.
        The copy's kind need not be registered in this process."""
        return await self._ops.duplicate(job_id, tenant=tenant, any_tenant=any_tenant)

    async def update_payload(
        self, job_id: int, data: Any, *, tenant: str | None = None, any_tenant: bool = False
    ) -> bool:
        """Replace a job's input: validated by its kind when this queue's registry has it,
        else any JSON that jsonb stores unchanged (``NotJson`` otherwise)."""
        return await self._ops.update_payload(job_id, data, tenant=tenant, any_tenant=any_tenant)

    async def change_priority(
        self,
        job_id: int,
        priority: int,
        *,
        place: PriorityPlace = "keep",
        tenant: str | None = None,
        any_tenant: bool = False,
    ) -> bool:
        """Set a job's priority, whatever its status; False if there is no such job. A job
        waiting its turn (pending, due, no open prerequisites) goes, among the jobs of its new
        priority, where its due time puts it (``place="keep"``), before them all (``"first"``)
        or after them all (``"last"``, as if enqueued now); a delayed or waiting one keeps its
        due time."""
        return await self._ops.change_priority(
            job_id, priority, place=place, tenant=tenant, any_tenant=any_tenant
        )

    async def append_log(
        self,
        job_id: int,
        line: str,
        *,
        keep_last: int | None = None,
        tenant: str | None = None,
        any_tenant: bool = False,
    ) -> int:
        """Append a log line to a job, keeping only the newest ``keep_last`` when given; the
        number of lines its log holds now (0: no such job)."""
        return await self._ops.append_log(
            job_id, line, keep_last=keep_last, tenant=tenant, any_tenant=any_tenant
        )

    async def update_progress(
        self, job_id: int, value: Any, *, tenant: str | None = None, any_tenant: bool = False
    ) -> bool:
        """Set a job's progress (any JSON) from outside its handler, whatever its status; False
        if there is no such job. A handler uses ``ctx.progress``, which is fenced."""
        return await self._ops.update_progress(job_id, value, tenant=tenant, any_tenant=any_tenant)

    async def read_logs(
        self,
        job_id: int,
        *,
        offset: int = 0,
        limit: int = 100,
        newest_first: bool = False,
        tenant: str | None = None,
        any_tenant: bool = False,
    ) -> LogPage:
        """A page of a job's log lines (``append_log``), oldest first: at most ``limit`` (1 to
        10,000) from ``offset``, with how many there are in all; an empty page if there is no such
        job (or ``offset`` is past its last line). Bad bounds raise ``InvalidOption``.

        ``newest_first``: the lines in reverse order, ``offset`` counted from the newest, so
        ``read_logs(job_id, limit=50, newest_first=True)`` is the latest 50 lines of a chatty
        job, newest first (what the dashboard's job page shows)."""
        return await self._ops.read_logs(
            job_id,
            offset=offset,
            limit=limit,
            newest_first=newest_first,
            tenant=tenant,
            any_tenant=any_tenant,
        )

    async def purge(
        self,
        where: JobFilter | None = None,
        *,
        running: RunningPolicy = "skip",
        connection: Connection | None = None,
        removed_events: bool = True,
        take_dependents: bool = False,
    ) -> PurgeResult:
        """Delete every job matching ``where`` (all fields AND-ed; an empty filter purges all),
        in one transaction. Dependents are resolved first (a removed prerequisite releases
        block/ignore/continue edges and fails cascade ones). Running jobs are skipped (and
        counted) or, with ``running="cancel"``, deleted too: their workers' fenced writes
        become no-ops; ``running="expired"`` deletes only those whose lease has run out (their
        worker no longer holds them) and skips the rest. Obliterating a queue is
        ``purge(JobFilter(queue=...))``. With ``connection``, it happens in the caller's
        transaction. Each deleted job that records events gets a 'removed' event, unless
        ``removed_events`` is False (housekeeping, as a finished job's retention rule and the
        GC are: they write none). With
        ``take_dependents``, a dependent still waiting for prerequisites, in the queue of one
        this purge deletes, that the purge leaves with none pending (it waited for deleted jobs
        only) is deleted too, and so on up its own dependents (BullMQ's removal of a parent
        whose last child a clean, drain or obliterate removes); otherwise it is released."""
        flags = {"removed_events": removed_events, "take_dependents": take_dependents}
        for option, value in flags.items():
            if not isinstance(value, bool):
                raise InvalidOption(option, f"must be True or False, got {value!r}")
        return await self._ops.purge(
            where or JobFilter(), running, connection, removed_events, take_dependents
        )

    async def obliterate(
        self, queue: str, *, force: bool = False, removed_events: bool = True
    ) -> PurgeResult:
        """Remove every job of ``queue`` and every schedule whose runs go to it, in one
        transaction: all of it, or (``QueueRunning``, while a job of it runs and ``force`` is
        False) nothing. With ``force``, running jobs are removed too: their workers' fenced
        writes become no-ops. A dependent in the queue left with no pending prerequisite goes
        too (as ``purge(take_dependents=True)``); one elsewhere is released. The queue's
        settings (pause, limits, label) stay. ``removed_events``: as for ``purge``. The result
        counts every job removed, the schedules' pending runs included."""
        validation.queue(queue)
        runs = 0
        async with self.transaction() as conn:
            for schedule in await self.schedules_for(queue):
                runs += await self._schedules.remove_counting_runs(schedule.name, conn) or 0
            result = await self._ops.purge(
                JobFilter(queue=queue), "cancel" if force else "skip", conn,
                removed_events, True,
            )  # fmt: skip
            if result.skipped_running:
                raise QueueRunning(queue, result.skipped_running)
        return dataclasses.replace(result, deleted=result.deleted + runs)

    async def schedules_for(self, queue: str) -> list[Schedule]:
        """The schedules whose runs go to ``queue``: by their own ``queue`` option, else by
        their kind's (a schedule of a kind not registered here, with no option, is in none)."""

        def queue_of(schedule: Schedule) -> Any:
            if "queue" in schedule.options:
                return schedule.options["queue"]
            if schedule.kind in self.registry:
                return self.registry.get(schedule.kind).queue
            return None

        return [s for s in await self._schedules.list() if queue_of(s) == queue]

    # -- queue settings --------------------------------------------------------------------

    async def pause(self, queue: str) -> None:
        """Hand out no job of ``queue`` until resumed; enqueueing still works."""
        await self._queues.pause(queue)

    async def resume(self, queue: str) -> None:
        """Hand out the jobs of ``queue`` again after ``pause``."""
        await self._queues.resume(queue)

    async def describe_queue(
        self, queue: str, *, label: str | None, dialect: str | None = None
    ) -> None:
        """Record how ``queue``'s application names it (``label``, None: the engine's name)
        and the words the dashboard shows it in (``dialect``: None, the engine's; ``"bullmq"``,
        BullMQ's states and names). Writes nothing when already so."""
        await self._queues.describe(queue, label, dialect)

    async def queue_descriptions(self) -> list[QueueDescription]:
        """Every queue given a label or a dialect by ``describe_queue``, by engine name."""
        return await self._queues.descriptions()

    async def set_rate_limit(
        self, queue: str, max_jobs: int | None, per_seconds: float | None = None
    ) -> None:
        """At most ``max_jobs`` starts per ``per_seconds`` across all workers (None: no limit)."""
        await self._queues.set_rate_limit(queue, max_jobs, per_seconds)

    async def set_concurrency(self, queue: str, limit: int | None) -> None:
        """At most ``limit`` running jobs of ``queue`` across all workers (None: no cap)."""
        await self._queues.set_concurrency(queue, limit)

    async def set_group_concurrency(self, queue: str, limit: int | None) -> None:
        """At most ``limit`` running jobs per ``group_key`` in ``queue`` (None: no cap)."""
        await self._queues.set_group_concurrency(queue, limit)

    # -- groups ----------------------------------------------------------------------------

    async def pause_group(self, queue: str, group: str) -> bool:
        """Pause group ``group`` of ``queue`` (also one with no job yet): its jobs wait, its
        running ones finish. False when it was paused already. See pgjobs.groups."""
        return await self._groups.pause(queue, group)

    async def resume_group(self, queue: str, group: str) -> bool:
        """Resume a paused group; False when it was not paused."""
        return await self._groups.resume(queue, group)

    async def set_group_limits(
        self,
        queue: str,
        group: str,
        *,
        concurrency: int | None = UNCHANGED,
        rate_limit: tuple[int, float] | None = UNCHANGED,
    ) -> None:
        """The group's own cap on running jobs and own rate limit ((max starts, per seconds));
        what is given is set, None clears it. They come before a worker's ``group_concurrency``
        and ``group_rate_limit`` and the queue's ``set_group_concurrency``."""
        await self._groups.set_limits(queue, group, concurrency=concurrency, rate_limit=rate_limit)

    async def limit_group(self, queue: str, group: str, seconds: float) -> None:
        """Start no job of the group for ``seconds`` (a manual rate limit)."""
        await self._groups.limit_for(queue, group, seconds)

    async def lock_group(self, queue: str, group: str, *, connection: Connection) -> int:
        """Lock the group until ``connection``'s transaction ends and return how many ready
        jobs it holds: check a bound on its size, then enqueue in that transaction."""
        return await self._groups.lock(queue, group, connection)

    async def reset_group(self, queue: str, group: str) -> bool:
        """Clear the group's pause and limits; False when the group has never been seen."""
        return await self._groups.reset(queue, group)

    async def list_groups(
        self, queue: str, group: str | None = None, *, limit: int | None = None
    ) -> list[Group]:
        """The groups of ``queue`` (or only ``group``; the first ``limit``), in the order the
        claims serve them, with their status, settings and jobs in flight."""
        return await self._groups.all(queue, group, limit)

    async def set_max_stalls(self, queue: str, limit: int | None) -> None:
        """The stall budget of ``queue``. A job stalls when its worker stops heartbeating and its
        lease ends (the worker was killed, lost its connection, froze). With ``None`` (the
        default) a stall uses the attempt it was on: the job runs again, or dies on its last
        attempt. With ``limit`` n, the attempt is given back and the stall counted; once it has
        stalled more than n times (BullMQ's ``maxStalledCount``) its failure is deferred: the
        next claim of it (``ctx.deferred_failure``) records it as dead without running the
        handler, using that claim's attempt. A schedule's run is never failed for stalling."""
        await self._queues.set_max_stalls(queue, limit)

    async def clear_queue_limit(self, queue: str) -> None:
        """End a ``limit_queue_for`` at once: the queue hands out jobs again."""
        await self._queues.clear_limit(queue)

    async def limit_queue_for(self, queue: str, seconds: float) -> None:
        """Hand out nothing from ``queue`` for ``seconds``."""
        await self._queues.limit_for(queue, seconds)

    async def queue_settings(self, queue: str) -> QueueSettings:
        """The stored settings of ``queue``: paused flag, caps, rate limit and stall budget (the
        defaults for a queue never set)."""
        return await self._queues.settings(queue)

    # -- imports ---------------------------------------------------------------------------

    async def import_jobs(
        self,
        jobs: Sequence[ImportedJob],
        edges: Sequence[ImportedEdge] = (),
        *,
        flow_id: int | None = None,
        connection: Connection | None = None,
    ) -> list[EnqueueResult]:
        """Write jobs with their history (status, attempts, timestamps, output, error,
        progress, logs) and the edges between them, in one transaction; see pgjobs.imports."""
        return await import_jobs(
            self.db, self.registry, jobs, edges, flow_id=flow_id, conn=connection
        )

    async def imported(
        self, keys: Sequence[tuple[str, str]], *, connection: Connection | None = None
    ) -> dict[tuple[str, str], ImportRecord]:
        """The import ledger's records of those (source, source_id) pairs already imported."""
        return await imports.imported(self.db, keys, connection)

    async def record_imports(
        self, records: Sequence[ImportRecord], *, connection: Connection | None = None
    ) -> None:
        """Record imported jobs in the ledger; in the transaction that wrote them (pass its
        ``connection``), so that the ledger never names a job that was rolled back."""
        await imports.record_imports(self.db, records, connection)

    async def check_imports(
        self, expected: Sequence[tuple[str, str, str | None]]
    ) -> list[ImportCheck]:
        """Verify imported jobs in one statement: for each (source, source_id, expected payload
        as JSON text or None), what its job holds now and whether the stored payload equals
        the expected one, compared by PostgreSQL as jsonb. See ``ImportCheck``."""
        return await imports.check_imports(self.db, expected)

    async def imports_of(self, source: str) -> list[ImportRecord]:
        """Every ledger record of ``source`` (what an import from there wrote)."""
        return await imports.imports_of(self.db, source)

    async def assign_job_keys(
        self, queue: str, ids: Sequence[int], *, connection: Connection | None = None
    ) -> dict[int, str]:
        """Give each job of ``queue`` among ``ids`` that has no job key the key of a newly
        drawn job id, which no job will ever have as its id, in one statement; returns
        {job id: new key}. An import that brings a numeric id as a job key uses it to keep
        reachable a job that was known by that number as its id."""
        rows = await self.db.fetch("assign_job_keys", queue, [int(i) for i in ids], conn=connection)
        return {row["id"]: row["job_key"] for row in rows}

    async def import_sources(self, prefix: str = "") -> dict[str, int]:
        """The import ledger's sources whose name starts with ``prefix``, with how many
        records each has."""
        rows = await self.db.fetch("import_sources", prefix)
        return {row["source"]: row["records"] for row in rows}

    async def reserve_ids(self, above: int) -> None:
        """Every job id handed out from now on is greater than ``above`` (so imported numeric
        ids used as job keys never meet a new automatic id)."""
        await self.db.fetchval("reserve_ids", int(above))

    async def hold_dedup_key(
        self,
        queue: str,
        dedup_key: str,
        until: datetime,
        *,
        job_id: int | None = None,
        tenant: str | None = None,
        connection: Connection | None = None,
    ) -> None:
        """Hold ``dedup_key`` until an absolute time, as a ``dedup_ttl`` enqueue would (an
        import of a live throttle key); an existing later hold is kept."""
        await self.db.fetch(
            "hold_dedup_key", queue, tenant, dedup_key, job_id, until, conn=connection
        )

    # -- event log -------------------------------------------------------------------------

    def events(
        self,
        queues: Sequence[str],
        *,
        after: str | None = None,
        tenant: str | None = None,
        any_tenant: bool = False,
    ) -> EventStream:
        """The event log of ``queues``: transitions of jobs enqueued with ``events=True`` and
        queue events. ``after``: None for events from now on, ``"0"`` for all the log holds, or
        a ``JobEvent.cursor`` to resume after that event. Tenant-scoped like every read.

        >>> async with jobs.events(["mail"]) as stream:
        ...     async for event in stream: ...
        """
        return EventStream(
            self.db.with_deadline(self.db.timeouts.loop),
            queues,
            after=after,
            tenant=tenant,
            any_tenant=any_tenant,
        )

    async def publish_event(
        self,
        queue: str,
        event: str,
        data: Any = None,
        *,
        tenant: str | None = None,
        connection: Connection | None = None,
    ) -> None:
        """Append a queue-level event to the log (commits with ``connection``'s transaction)."""
        await events.publish(self.db, queue, event, data, tenant=tenant, conn=connection)

    async def trim_events(self, queue: str, keep: int) -> int:
        """Keep the newest ``keep`` events of ``queue``'s log (every tenant's) and delete the
        rest now, rather than at the GC's next run; returns how many went. At least ``keep``
        stay: a row holding a batch's 'added' events goes whole, once the newer rows hold
        ``keep`` (the GC's rule). A stream whose cursor is older finds them gone."""
        return await events.trim(self.db, queue, keep)

    # -- schedules -------------------------------------------------------------------------

    async def upsert_schedule(self, name: str, kind: str, input: Any, **options: Any) -> Any:
        """Create or replace a cron/interval schedule; see Schedules.upsert."""
        return await self._schedules.upsert(name, kind, input, **options)

    async def list_schedules(self) -> list[Schedule]:
        """Every schedule, with its next and last run and how many jobs it has emitted."""
        return await self._schedules.list()

    async def get_schedule(
        self, name: str, *, connection: Connection | None = None, lock: bool = False
    ) -> Schedule | None:
        """The schedule named ``name``, or None. With ``lock`` (and a ``connection`` in a
        transaction), its row stays locked until that transaction ends: a read, then a change
        made from what was read (``upsert_schedule(..., connection=)``), that no other change
        of the schedule comes between."""
        return await self._schedules.get(name, connection, lock=lock)

    async def remove_schedule(self, name: str, *, connection: Connection | None = None) -> bool:
        """Remove schedule ``name`` and its pending run unless it has started (in
        ``connection``'s transaction, if given); False if there was none."""
        return await self._schedules.remove(name, connection)

    async def advance_schedule(self, name: str, job_id: int) -> None:
        """Run ``job_id`` of materialized schedule ``name`` is taken: make the next run now (a
        worker does it as it claims a run), if that job is still the pending run."""
        await self._schedules.advance(name, job_id)

    async def pause_schedule(self, name: str, *, connection: Connection | None = None) -> bool:
        """Stop emitting runs of schedule ``name`` until ``resume_schedule`` (an upsert also
        resumes it); see Schedules.pause. With ``connection``, in the caller's transaction."""
        return await self._schedules.pause(name, connection)

    async def resume_schedule(self, name: str) -> datetime | None:
        """Emit runs of a paused schedule again, skipping those missed; its next run time."""
        return await self._schedules.resume(name)

    async def retime_schedule(
        self,
        name: str,
        *,
        cron: str | None = None,
        every: float | timedelta | None = None,
        timezone: str = "UTC",
        connection: Connection | None = None,
    ) -> datetime | None:
        """Repeat schedule ``name`` on ``cron`` or ``every`` from now on, all else kept; its
        next run (None: none left, or no such schedule). With ``connection``, in the caller's
        transaction. See Schedules.retime."""
        return await self._schedules.retime(
            name, cron=cron, every=every, timezone=timezone, connection=connection
        )

    async def run_schedule_now(self, name: str) -> RunNow | None:
        """Run schedule ``name`` once now, skipping none of its later runs (a materialized
        schedule: a copy of its pending run; another: its next tick, now); None when it does
        not exist, is paused or has none left. See Schedules.run_now."""
        return await self._schedules.run_now(name)

    async def emit_due_schedules(self, *, catch_up: bool = False) -> int:
        """Emit the jobs of due schedule ticks once; see Scheduler for a loop."""
        return await self._schedules.emit_due(catch_up=catch_up)

    def scheduler(self, **options: Any) -> Scheduler:
        """A loop that emits due schedule ticks (see Scheduler); its statements have the
        background loops' deadline (``Timeouts.loop``)."""
        loop_db = self.db.with_deadline(self.db.timeouts.loop)
        return Scheduler(Schedules(loop_db, self.registry), **options)

    def register_maintenance(self, **options: Any) -> None:
        """Register the built-in GC, metrics-sweep and vacuum kinds on this queue's registry."""
        register_maintenance(self.registry, lambda: self.db, **options)

    # -- tracking --------------------------------------------------------------------------

    async def substate_counts(self, where: JobFilter | None = None) -> dict[SubState, int]:
        """How many jobs matching ``where`` are in each sub-state; they add up to the total."""
        return await self._tracking.substate_counts(where or JobFilter())

    async def list_jobs(
        self,
        where: JobFilter | None = None,
        *,
        limit: int = 50,
        offset: int = 0,
        oldest_first: bool = False,
        order: JobOrder = "created",
    ) -> list[JobRow]:
        """A page (``limit`` <= 1000) of jobs matching ``where``, newest first by default; see
        Tracking.list_jobs for the orders."""
        return await self._tracking.list_jobs(
            where or JobFilter(),
            limit=limit,
            offset=offset,
            oldest_first=oldest_first,
            order=order,
        )

    async def list_flows(
        self, where: FlowFilter | None = None, *, limit: int = 50, offset: int = 0
    ) -> list[FlowSummary]:
        """A page of flow summaries (outcome, times, sub-state counts), newest first."""
        return await self._tracking.list_flows(where or FlowFilter(), limit=limit, offset=offset)

    async def flow_view(
        self, flow_id: int, *, tenant: str | None = None, any_tenant: bool = False
    ) -> FlowView | None:
        """A flow's summary (identical to its list_flows row) and its light graph, or None."""
        return await self._tracking.flow_view(flow_id, tenant=tenant, any_tenant=any_tenant)

    async def queue_lag(self, queues: Sequence[str] | None = None) -> dict[str, float]:
        """Seconds the oldest due job of each queue (of ``queues``, default every queue) has
        waited to start; a queue with no due job is absent."""
        rows = await self.db.fetch("queue_gauges", None if queues is None else list(queues))
        return {r["queue"]: float(r["lag"]) for r in rows if r["state"] == "ready"}

    async def queue_names(self) -> list[str]:
        """Every queue's name, in order, counting nothing: the queues with jobs in flight, with
        history or with settings (time proportional to the number of queues)."""
        return [row["queue"] for row in await self.db.fetch("queue_names")]

    async def replica_lag(self) -> float | None:
        """Seconds this queue's server is behind its primary: None when it is a primary, 0 on
        a standby that has replayed everything it received (see sql/tracking.sql)."""
        lag = await self.db.fetchval("replica_lag")
        return None if lag is None else float(lag)

    async def list_workers(self, queue: str | None = None) -> list[WorkerInfo]:
        """The workers running now (seen within three heartbeats), of ``queue`` if given:
        name, host, pid, queues, concurrency, the jobs each holds, since and last seen."""
        rows = await self.db.fetch("list_workers", queue)
        return [
            WorkerInfo(
                id=str(r["id"]),
                name=r["name"],
                host=r["host"],
                pid=r["pid"],
                queues=list(r["queues"]),
                concurrency=r["concurrency"],
                running=r["running"],
                started_at=r["started_at"],
                last_seen=r["last_seen"],
            )
            for r in rows
        ]

    async def queue_counts(self, queue: str) -> dict[SubState, int]:
        """How many jobs of ``queue`` are in each sub-state, exact, in time proportional to its
        jobs in flight: finished jobs are counted as they finish (see Tracking.queue_counts)."""
        return await self._tracking.queue_counts(queue)

    async def fold_finished_counts(self) -> int:
        """Fold the finished counts (workers do it on their own every few seconds)."""
        return await self._tracking.fold_finished_counts()

    async def queue_stats(self) -> list[QueueStats]:
        """One row per queue: its jobs' counts by sub-state, its paused flag and its limits."""
        return await self._tracking.queue_stats()

    async def queue_metrics(
        self, queue: str, granularity: Granularity, start: Any, end: Any = None
    ) -> list[MetricsBucket]:
        """Finished counts per bucket, zero-filled; see Tracking.queue_metrics."""
        return await self._tracking.queue_metrics(queue, granularity, start, end)


def _fields(where: JobFilter) -> dict[str, Any]:
    return {name: getattr(where, name) for name in JobFilter.__dataclass_fields__}
