"""DAG flows: build a graph of typed jobs, validate it before anything is written, submit it in
one transaction; re-drive it in place (requeue) or as a clone (rerun)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

import asyncpg

from pgjobs import jsonvalue
from pgjobs.config import notify_channel
from pgjobs.enqueue import (
    JobSpec,
    PreparedJob,
    insert_many,
    insert_one,
    jobs_document,
    own_transaction,
    prepare,
)
from pgjobs.errors import (
    FlowConflict,
    FlowCycle,
    FlowNotFound,
    FlowRunning,
    InvalidFlow,
    InvalidOption,
    PrerequisiteTaken,
)
from pgjobs.executor import Connection, Database
from pgjobs.kinds import Kind, Registry
from pgjobs.models import EnqueueResult


class EdgePolicy(StrEnum):
    """What a dependent does when a prerequisite fails (dead or cancelled).

    BLOCK: waits until the prerequisite is re-driven and completes, or is removed (BullMQ's
    default). CASCADE: fails with it (dead, or cancelled when it was cancelled or removed),
    transitively. CASCADE_DEFERRED: when the prerequisite dies, becomes claimable at once (as
    CONTINUE) with a deferred failure: the worker that claims it records it dead without
    running its handler (``ctx.deferred_failure``; BullMQ's failParentOnFailure), and its own
    dependents resolve then; cancelled when the prerequisite was cancelled or removed. IGNORE:
    proceeds; the failure is recorded on the edge. CONTINUE: becomes claimable at once, even if
    other prerequisites are still pending.
    """

    BLOCK = "block"
    CASCADE = "cascade"
    CASCADE_DEFERRED = "cascade_deferred"
    IGNORE = "ignore"
    CONTINUE = "continue"


@dataclass(slots=True)
class _Node:
    spec: JobSpec


@dataclass
class Flow:
    """A DAG under construction. Nodes are named by handles local to the builder.

    >>> flow = Flow("import-42")
    >>> flow.add("fetch", "fetch_page", {"url": u})
    >>> flow.add("parse", "parse_page", {}, priority=5)
    >>> flow.edge("fetch", "parse", EdgePolicy.CASCADE)
    """

    name: str | None = None
    _nodes: dict[str, _Node] = field(default_factory=dict)
    _edges: dict[tuple[str, str], EdgePolicy] = field(default_factory=dict)

    def add(self, node: str, kind: str | Kind[Any], input: Any, **options: Any) -> str:
        """Add a node; options are those of ``JobQueue.enqueue`` (queue, priority, name,
        dedup_key, job_key, max_attempts, backoff, max_deferrals, ...)."""
        if not isinstance(node, str) or not node:
            raise InvalidFlow(f"node handles are non-empty strings, got {node!r}")
        if node in self._nodes:
            raise InvalidFlow(f"node {node!r} is added twice")
        if "tenant" in options:
            raise InvalidFlow(f"node {node!r}: the tenant is set for the whole flow at submit")
        self._nodes[node] = _Node(JobSpec(kind, input, **options))
        return node

    def edge(
        self, prerequisite: str, dependent: str, policy: EdgePolicy | str = EdgePolicy.BLOCK
    ) -> None:
        """``dependent`` runs after ``prerequisite``; ``policy`` says what a failure does."""
        try:
            resolved = EdgePolicy(policy)
        except ValueError:
            raise InvalidFlow(
                f"edge policy must be one of {[p.value for p in EdgePolicy]}, got {policy!r}"
            ) from None
        if prerequisite == dependent:
            raise FlowCycle([prerequisite])
        self._edges[(prerequisite, dependent)] = resolved

    def priority(self, node: str, value: int) -> None:
        """Set a node's priority (an explicit 0 stays 0; unset nodes take the flow default)."""
        self._require(node)
        self._nodes[node].spec = replace(self._nodes[node].spec, priority=value)

    def _require(self, node: str) -> None:
        if node not in self._nodes:
            raise InvalidFlow(f"edge or setting names node {node!r}, which was never added")

    def order(self) -> list[str]:
        """Nodes in a topological order; raises FlowCycle or InvalidFlow (dangling edge)."""
        if not self._nodes:
            raise InvalidFlow("a flow needs at least one node")
        for prerequisite, dependent in self._edges:
            self._require(prerequisite)
            self._require(dependent)
        indegree = {node: 0 for node in self._nodes}
        outgoing: dict[str, list[str]] = {node: [] for node in self._nodes}
        for prerequisite, dependent in self._edges:
            indegree[dependent] += 1
            outgoing[prerequisite].append(dependent)
        ready = deque(node for node in self._nodes if indegree[node] == 0)
        ordered: list[str] = []
        while ready:
            node = ready.popleft()
            ordered.append(node)
            for dependent in outgoing[node]:
                indegree[dependent] -= 1
                if indegree[dependent] == 0:
                    ready.append(dependent)
        if len(ordered) != len(self._nodes):
            raise FlowCycle(sorted(node for node, degree in indegree.items() if degree > 0))
        return ordered


@dataclass(frozen=True, slots=True)
class SubmittedFlow:
    """What ``JobQueue.submit_flow`` returns: the new flow's id and each node's job id, by
    node name; ``reused``: the nodes that are existing jobs (``reuse``), not written."""

    flow_id: int
    job_ids: dict[str, int]
    reused: frozenset[str] = frozenset()


class Flows:
    """Submit and re-drive flows on one Database."""

    def __init__(self, db: Database, registry: Registry) -> None:
        self._db = db
        self._registry = registry
        self._channel = notify_channel(db.schema)

    async def submit(
        self,
        flow: Flow,
        *,
        metadata: Any = None,
        default_priority: int | None = None,
        tenant: str | None = None,
        connection: Connection | None = None,
        commit: str | None = None,
        carry: Callable[[Any], Any] | None = None,
        reuse: bool = False,
    ) -> SubmittedFlow:
        """Write every node, every edge and the flow row in one transaction (the caller's, with
        ``connection``). A node's priority is its own, else ``default_priority``, else its
        kind's. Nothing is written when any node is invalid, the graph has a cycle, or a node's
        job key or dedup key is already taken (FlowConflict). With ``reuse``, a node whose key
        is taken and that has no prerequisites in the flow is the existing job instead (BullMQ
        reuses a job id): it is not written, its edges make its dependents wait for it (as
        ``add_dependency``: resolved at once if it has ended), and its id is the existing
        job's; a taken node with prerequisites in the flow is still a FlowConflict.
        ``commit``: the transaction's synchronous_commit (validation.commit_setting);
        ``carry``: what each node's metadata becomes (telemetry's trace context)."""
        order = flow.order()
        indegree = {node: 0 for node in order}
        for _, dependent in flow._edges:
            indegree[dependent] += 1
        prepared = []
        for node in order:
            spec = flow._nodes[node].spec
            if spec.priority is None and default_priority is not None:
                spec = replace(spec, priority=default_priority)
            if spec.tenant != tenant:  # the flow's tenant is every node's (a copy: the spec
                spec = replace(spec, tenant=tenant)  # stays the caller's)
            if carry is not None:
                spec = replace(spec, metadata=carry(spec.metadata))
            job = prepare(spec, self._registry)
            job.pending_deps = indegree[node]  # a fresh PreparedJob of this call: ours to set
            prepared.append(job)
        meta = None
        if metadata is not None:
            try:
                meta = jsonvalue.dumps(metadata)
            except jsonvalue.NotJson as exc:
                raise InvalidOption("metadata", str(exc)) from None

        if all(
            job.job_key is None and job.dedup_key is None and job.hold is None for job in prepared
        ):
            return await self._submit_keyless(
                flow, order, prepared, meta, tenant, connection, commit
            )

        async def write(conn: Connection) -> SubmittedFlow:
            flow_id = await self._db.fetchval(
                "insert_flow", flow.name, meta, tenant, commit, conn=conn
            )
            jobs = [replace(job, flow_id=flow_id) for job in prepared]
            results = await insert_many(self._db, jobs, conn, commit)
            reused: set[str] = set()
            for node, result in zip(order, results, strict=True):
                if result.duplicate:
                    if not reuse or indegree[node] > 0:
                        spec = flow._nodes[node].spec
                        raise FlowConflict(node, result.id, spec.job_key, spec.dedup_key)
                    reused.add(node)
            ids = {node: result.id for node, result in zip(order, results, strict=True)}
            edges = list(flow._edges.items())
            written = [edge for edge in edges if edge[0][0] not in reused]
            if written:
                await self._db.fetch(
                    "insert_edges",
                    [ids[p] for (p, _), _ in written],
                    [ids[d] for (_, d), _ in written],
                    [policy.value for _, policy in written],
                    conn=conn,
                )
            attached = [edge for edge in edges if edge[0][0] in reused]
            if attached:
                await self._attach_reused(conn, ids, attached)
            return SubmittedFlow(flow_id, ids, frozenset(reused))

        return await self._db.in_transaction(write, connection)

    async def _attach_reused(
        self,
        conn: Connection,
        ids: dict[str, int],
        edges: list[tuple[tuple[str, str], EdgePolicy]],
    ) -> None:
        """The edges leaving reused nodes (existing jobs) to the dependents just written: those
        were written counting them, and attach_prerequisites counts what it writes, so the
        count is taken off first (the dependents are this transaction's, unseen by others);
        attach_prerequisites then locks the existing jobs and resolves any that has ended."""
        await self._db.execute("uncount_edges", [ids[d] for (_, d), _ in edges], conn=conn)
        try:
            await self._db.fetchval(
                "attach_prerequisites",
                [ids[p] for (p, _), _ in edges],
                [ids[d] for (_, d), _ in edges],
                [policy.value for _, policy in edges],
                ["open"] * len(edges),
                [None] * len(edges),
                self._channel,
                conn=conn,
            )
        except asyncpg.ForeignKeyViolationError:  # removed since the insert found it: retry
            raise InvalidFlow("a job the flow reuses was removed meanwhile") from None

    async def _submit_keyless(
        self,
        flow: Flow,
        order: list[str],
        prepared: list[PreparedJob],
        meta: str | None,
        tenant: str | None,
        connection: Connection | None,
        commit: str | None,
    ) -> SubmittedFlow:
        """A flow none of whose nodes holds a job key or a dedup key cannot conflict with
        anything: flow row, nodes and edges are written by one statement (atomic by itself)."""
        ordinal = {node: index for index, node in enumerate(order, start=1)}
        edges = list(flow._edges.items())
        rows = await self._db.fetch(
            "insert_keyless_flow",
            jobs_document(prepared),
            self._channel,
            commit,
            flow.name,
            meta,
            tenant,
            [ordinal[p] for (p, _), _ in edges],
            [ordinal[d] for (_, d), _ in edges],
            [policy.value for _, policy in edges],
            own_transaction(connection),
            conn=connection,
        )
        ids = {node: row["id"] for node, row in zip(order, rows, strict=True)}
        return SubmittedFlow(rows[0]["flow_id"], ids)

    async def add_prerequisite(
        self,
        dependent_id: int,
        spec: JobSpec,
        policy: EdgePolicy,
        *,
        tenant: str | None,
        any_tenant: bool,
        connection: Connection | None = None,
        sole_dependent: bool = False,
        wait: bool = True,
    ) -> EnqueueResult:
        """Enqueue ``spec`` as a new prerequisite of an existing pending or running job (a
        child added while the parent runs), in one transaction: the job, the edge and the
        dependent's count. The new job joins the dependent's flow (one is made if it has none)
        and its tenant. A job key already taken attaches the existing job instead (BullMQ
        reuses a child id), unless that would close a cycle, or, with ``sole_dependent``,
        unless another existing job already waits for it (PrerequisiteTaken: a BullMQ child
        has one parent). Concurrent sole-dependent attaches of one job are serialised, so two
        of them cannot both succeed. ``wait`` as for ``add_dependency``."""
        policy = EdgePolicy(policy)

        async def write(conn: Connection) -> EnqueueResult:
            row = await self._lock_dependent(conn, dependent_id, tenant, any_tenant)
            await self._set_waits(conn, row, wait)
            flow_id = row["flow_id"]
            if flow_id is None:
                flow_id = await self._db.fetchval(
                    "adopt_into_flow", dependent_id, row["tenant"], conn=conn
                )
            job = prepare(replace(spec, tenant=row["tenant"]), self._registry)
            result = await insert_one(self._db, replace(job, flow_id=flow_id), conn)
            if result.duplicate and await self._db.fetchval(
                "depends_on", result.id, dependent_id, conn=conn
            ):
                raise FlowCycle([str(result.id), str(dependent_id)])
            if result.duplicate and sole_dependent:
                await self._db.fetchval("serialise_attaches", result.id, conn=conn)
                other = await self._db.fetchval(
                    "other_dependent", result.id, dependent_id, conn=conn
                )
                if other is not None:
                    raise PrerequisiteTaken(result.id, other)
            await self._attach(conn, result.id, dependent_id, policy)
            return result

        return await self._db.in_transaction(write, connection)

    async def add_dependency(
        self,
        prerequisite_id: int,
        dependent_id: int,
        policy: EdgePolicy,
        *,
        tenant: str | None,
        any_tenant: bool,
        connection: Connection | None = None,
        wait: bool = True,
    ) -> None:
        """Make the existing pending or running job ``dependent_id`` wait for the existing job
        ``prerequisite_id`` (whatever its flow), in one transaction; a prerequisite already
        finished is resolved at once by ``policy``. Both jobs must belong to ``tenant`` (unless
        ``any_tenant``): another tenant's prerequisite is refused as if it did not exist.
        Refused if it would close a cycle.

        ``wait=False`` keeps a pending dependent claimable if nothing holds it back yet (BullMQ's
        child added to a waiting parent): it may then run, but its completion is refused
        (PendingPrerequisites) until its counted prerequisites end; once claimed, it waits for
        them as any job does. A dependent already held back by prerequisites keeps waiting.
        ``wait=True`` (the default) makes a pending dependent wait for them."""
        policy = EdgePolicy(policy)

        async def write(conn: Connection) -> None:
            row = await self._lock_dependent(conn, dependent_id, tenant, any_tenant)
            await self._set_waits(conn, row, wait)
            # job_kind (operations.sql) is None for a job missing or of another tenant
            if (
                await self._db.fetchval("job_kind", prerequisite_id, tenant, any_tenant, conn=conn)
                is None
            ):
                raise InvalidFlow(f"no job {prerequisite_id} to depend on")
            if prerequisite_id == dependent_id or await self._db.fetchval(
                "depends_on", prerequisite_id, dependent_id, conn=conn
            ):
                raise FlowCycle([str(prerequisite_id), str(dependent_id)])
            await self._attach(conn, prerequisite_id, dependent_id, policy)

        await self._db.in_transaction(write, connection)

    async def _lock_dependent(
        self, conn: Connection, dependent_id: int, tenant: str | None, any_tenant: bool
    ) -> Any:
        row = await self._db.fetchrow("lock_dependent", dependent_id, tenant, any_tenant, conn=conn)
        if row is None:
            raise InvalidFlow(f"no job {dependent_id} to add a prerequisite to")
        if row["status"] not in ("pending", "running"):
            raise InvalidFlow(
                f"job {dependent_id} is {row['status']}: prerequisites can only be added to"
                " a pending or running job"
            )
        return row

    async def _set_waits(self, conn: Connection, row: Any, wait: bool) -> None:
        """Before an attach to the dependent ``row`` (locked by _lock_dependent, so what it
        read holds until commit): a pending one waits for its prerequisites if ``wait`` or if
        they hold it back already; otherwise it stays claimable. A running one is left as it
        is (a claim made it wait)."""
        if row["status"] != "pending":
            return
        waits = wait or row["held"]
        if row["waits"] != waits:
            await self._db.execute("set_waits", row["id"], waits, conn=conn)

    async def _attach(
        self, conn: Connection, prerequisite_id: int, dependent_id: int, policy: EdgePolicy
    ) -> None:
        try:
            await self._db.fetchval(
                "attach_prerequisites",
                [prerequisite_id],
                [dependent_id],
                [policy.value],
                ["open"],
                [None],
                self._channel,
                conn=conn,
            )
        except asyncpg.ForeignKeyViolationError:  # the dependent is locked: the prerequisite
            raise InvalidFlow(f"no job {prerequisite_id} to depend on") from None

    async def remove_tree(
        self,
        job_id: int,
        *,
        tenant: str | None,
        any_tenant: bool,
        connection: Connection | None = None,
    ) -> int | None:
        """Delete ``job_id`` and every job it waits for, transitively (its prerequisites,
        theirs, ...), in one transaction (SQL remove_job_tree). Dependents outside the tree are
        resolved as by ``purge``. Nothing is deleted, and None returned, when a job of the tree
        is running with its lease live; else how many jobs were deleted (0: no such job)."""
        deleted = await self._db.fetchval(
            "remove_job_tree", job_id, tenant, any_tenant, self._channel, conn=connection
        )
        return None if deleted is None else int(deleted)

    async def rerun(self, flow_id: int, *, tenant: str | None, any_tenant: bool) -> SubmittedFlow:
        """Clone the flow under a new id, every node pending, priorities and budgets kept.
        Returns the new flow id and, by old job id (as a string), the new job ids."""
        async with self._db.transaction() as conn:
            if not await self._db.fetchval("flow_exists", flow_id, tenant, any_tenant, conn=conn):
                raise FlowNotFound(flow_id)
            new_flow = await self._db.fetchval("clone_flow_row", flow_id, conn=conn)
            try:
                rows = await self._db.fetch("rerun_flow", flow_id, new_flow, conn=conn)
            except asyncpg.UniqueViolationError as exc:
                raise FlowConflict(f"flow {flow_id}", None, None, str(exc.detail or exc)) from None
            queues = sorted({row["queue"] for row in rows})
            await self._db.fetch("notify_queues", queues, self._channel, conn=conn)
            return SubmittedFlow(new_flow, {str(row["old_id"]): row["new_id"] for row in rows})

    async def requeue(self, flow_id: int, *, tenant: str | None, any_tenant: bool) -> list[int]:
        """Re-drive a failed flow in place; returns the ids put back to pending. Refused with
        FlowRunning while any node runs."""
        async with self._db.transaction() as conn:
            nodes = await self._db.fetch("lock_flow", flow_id, tenant, any_tenant, conn=conn)
            if not nodes:
                raise FlowNotFound(flow_id)
            running = [row["id"] for row in nodes if row["status"] == "running"]
            if running:
                raise FlowRunning(flow_id, running)
            try:
                rows = await self._db.fetch("requeue_flow", flow_id, conn=conn)
            except asyncpg.UniqueViolationError as exc:
                raise FlowConflict(f"flow {flow_id}", None, None, str(exc.detail or exc)) from None
            await self._db.fetch("recount_flow_deps", flow_id, conn=conn)
            queues = sorted({row["queue"] for row in rows})
            await self._db.fetch("notify_queues", queues, self._channel, conn=conn)
            return [row["id"] for row in rows]
