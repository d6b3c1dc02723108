"""Importing jobs with their history from another queue system (the BullMQ migration uses it).

A batch is validated whole before anything is written, then written in the caller's transaction
(or one of its own): jobs in any resting state (pending, completed, dead) with their attempts,
timestamps, output, last error, progress and logs, and the prerequisite edges between them with
their recorded state. A job key already present keeps its job and is reported as a duplicate,
so importing the same batch twice writes nothing the second time. The import ledger (table
imports) records which job of the source became which job here, written by the importer in the
same transaction as the jobs: a resumed import skips exactly what is done.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Literal

from pgjobs import jsonvalue
from pgjobs.config import notify_channel
from pgjobs.enqueue import MAX_DEDUP_ROUNDS, JobSpec, PreparedJob, prepare
from pgjobs.errors import DedupRaceError, InvalidFlow, InvalidOption
from pgjobs.executor import Connection, Database
from pgjobs.flows import EdgePolicy
from pgjobs.kinds import Registry
from pgjobs.models import EnqueueResult, SubState

ImportedStatus = Literal["pending", "completed", "dead"]
"""The statuses an imported job may be written in (``ImportedJob.status``)."""
EdgeState = Literal["open", "satisfied", "blocked", "ignored", "released", "failed"]
"""The state of an edge: ``open`` (its prerequisite has not finished), ``satisfied`` (it
completed), ``blocked`` (it failed under the block policy: the dependent waits), ``released``
(it stopped counting without completing: a block edge whose prerequisite was removed, or a
continue or cascade_deferred dependent's other edges), ``failed`` (it failed under cascade or
cascade_deferred), ``ignored`` (it failed under ignore or continue)."""


@dataclass(frozen=True, slots=True)
class ImportedJob:
    """One job and its history. ``attempts``: attempts already made. ``run_at``: when a pending
    job is due (None: now). ``handle`` names it for ``ImportedEdge``s of the same batch."""

    spec: JobSpec
    status: ImportedStatus = "pending"
    run_at: datetime | None = None
    attempts: int = 0
    created_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    output: Any = None
    error: dict[str, Any] | None = None
    progress: Any = None
    logs: Sequence[str] = ()
    handle: str | None = None


@dataclass(frozen=True, slots=True)
class ImportedEdge:
    """``dependent`` waits for ``prerequisite`` (handles of the batch, or existing job ids).
    ``state``: open (still waiting), satisfied (completed), and the failure states of
    EdgePolicy (blocked, ignored, released, failed) with the recorded ``failure``."""

    prerequisite: str | int
    dependent: str | int
    policy: EdgePolicy = EdgePolicy.BLOCK
    state: EdgeState = "open"
    failure: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class ImportRecord:
    """The ledger's record of one imported job: ``source`` (the system and place it came from,
    e.g. ``bullmq:<prefix>:<queue>``) and ``source_id`` (its id there) became ``job_id``, in
    ``state`` (the source's word) with data whose digest was ``checksum``."""

    source: str
    source_id: str
    job_id: int
    state: str
    checksum: str


@dataclass(frozen=True, slots=True)
class ImportCheck:
    """What one imported job holds now (``check_imports``): ``job_id`` None when the ledger has
    no record of it; ``queue``, ``job_key``, ``priority`` and ``sub_state`` None when its job no
    longer exists; ``payload_matches`` None when no payload was expected or there is no job."""

    job_id: int | None
    queue: str | None
    job_key: str | None
    priority: int | None
    sub_state: SubState | None
    payload_matches: bool | None


async def check_imports(
    db: Database, expected: Sequence[tuple[str, str, str | None]]
) -> list[ImportCheck]:
    """For each (source, source_id, expected payload as JSON text or None), in input order,
    what the ledger's job holds, with the stored payload compared to the expected one in
    PostgreSQL (as jsonb). One statement, whatever the number of jobs."""
    if not expected:
        return []
    rows = await db.fetch(
        "check_imports",
        [e[0] for e in expected],
        [str(e[1]) for e in expected],
        [e[2] for e in expected],
    )
    return [
        ImportCheck(
            r["job_id"],
            r["queue"],
            r["job_key"],
            r["priority"],
            None if r["sub_state"] is None else SubState(r["sub_state"]),
            r["payload_matches"],
        )
        for r in rows
    ]


async def imported(
    db: Database, keys: Sequence[tuple[str, str]], conn: Connection | None = None
) -> dict[tuple[str, str], ImportRecord]:
    """The records of those (source, source_id) pairs that were imported."""
    if not keys:
        return {}
    rows = await db.fetch("imported", [k[0] for k in keys], [str(k[1]) for k in keys], conn=conn)
    return {(r["source"], r["source_id"]): ImportRecord(**dict(r)) for r in rows}


async def record_imports(
    db: Database, records: Sequence[ImportRecord], conn: Connection | None = None
) -> None:
    """Add ``records`` to the ledger (a pair already recorded keeps its first record)."""
    if records:
        await db.execute(
            "record_imports",
            [r.source for r in records],
            [r.source_id for r in records],
            [r.job_id for r in records],
            [r.state for r in records],
            [r.checksum for r in records],
            conn=conn,
        )


async def imports_of(db: Database, source: str) -> list[ImportRecord]:
    """Every record of ``source``, by source id."""
    rows = await db.fetch("imports_of", source)
    return [ImportRecord(**dict(r)) for r in rows]


def _json(option: str, value: Any) -> str | None:
    if value is None:
        return None
    try:
        return jsonvalue.dumps(value)
    except jsonvalue.NotJson as exc:
        raise InvalidOption(option, str(exc)) from None


async def import_jobs(
    db: Database,
    registry: Registry,
    jobs: Sequence[ImportedJob],
    edges: Sequence[ImportedEdge] = (),
    *,
    flow_id: int | None = None,
    conn: Connection | None = None,
) -> list[EnqueueResult]:
    """Write ``jobs`` and ``edges``; results in input order. Jobs joined by edges share a flow
    (``flow_id``, else a new one per batch)."""
    prepared: list[tuple[PreparedJob, ImportedJob]] = []
    handles: dict[str, int] = {}
    for index, job in enumerate(jobs):
        if job.status not in ("pending", "completed", "dead"):
            raise InvalidOption("status", f"must be pending, completed or dead, got {job.status!r}")
        if isinstance(job.attempts, bool) or not isinstance(job.attempts, int) or job.attempts < 0:
            raise InvalidOption("attempts", f"must be an integer >= 0, got {job.attempts!r}")
        spec = job.spec
        if spec.delay is not None or spec.run_at is not None or spec.lifo or spec.dedup_ttl:
            spec = replace(spec, delay=None, run_at=None, lifo=False, dedup_ttl=None)
        prepared.append((prepare(spec, registry), job))
        if job.handle is not None:
            if job.handle in handles:
                raise InvalidFlow(f"handle {job.handle!r} is used twice in one import")
            handles[job.handle] = index
    for edge in edges:
        for end in (edge.prerequisite, edge.dependent):
            if isinstance(end, str) and end not in handles:
                raise InvalidFlow(f"edge names handle {end!r}, which no job of the batch has")
    in_flow = {
        handles[end] for e in edges for end in (e.prerequisite, e.dependent) if isinstance(end, str)
    }

    async def write(conn: Connection) -> list[EnqueueResult]:
        nonlocal flow_id
        if in_flow and flow_id is None:
            flow_id = await db.fetchval("insert_flow", None, None, None, None, conn=conn)
        rows = [
            _row(p, job, flow_id if index in in_flow else None)
            for index, (p, job) in enumerate(prepared)
        ]
        results = await _import_rows(db, rows, conn)
        ids = {handle: results[index].id for handle, index in handles.items()}

        def resolve(end: str | int) -> int:
            return ids[end] if isinstance(end, str) else end

        new_edges = [
            e
            for e in edges
            if not all(isinstance(end, str) and results[handles[end]].duplicate
                       for end in (e.prerequisite, e.dependent))
        ]  # fmt: skip
        if new_edges:
            await db.fetchval(
                "attach_prerequisites",
                [resolve(e.prerequisite) for e in new_edges],
                [resolve(e.dependent) for e in new_edges],
                [EdgePolicy(e.policy).value for e in new_edges],
                [e.state for e in new_edges],
                [_json("failure", e.failure) for e in new_edges],
                notify_channel(db.schema),
                conn=conn,
            )
        log_ids: list[int] = []
        log_lines: list[str] = []
        for (_, job), result in zip(prepared, results, strict=True):
            if not result.duplicate:
                for line in job.logs:
                    log_ids.append(result.id)
                    log_lines.append(jsonvalue.strip_nul(str(line)))
        if log_ids:
            await db.fetch("import_logs", log_ids, log_lines, conn=conn)
        queues = sorted({p.queue for p, job in prepared if job.status == "pending"})
        if queues:
            await db.fetch("wake_queues", queues, notify_channel(db.schema), conn=conn)
        return results

    return await db.in_transaction(write, conn)


async def _import_rows(
    db: Database, rows: list[tuple[Any, ...]], conn: Connection
) -> list[EnqueueResult]:
    """One import_jobs statement, then again for the rows it could not place. A row whose key
    a concurrent transaction took waits for it, does nothing, and then looks for the holder in
    the statement's snapshot, taken before that commit: it finds none. The next statement's
    snapshot sees the holder (or, if the holder of a dedup key finished meanwhile, inserts)."""
    results: list[EnqueueResult | None] = [None] * len(rows)
    todo = list(range(len(rows)))
    for _ in range(MAX_DEDUP_ROUNDS):
        batch = [rows[i] for i in todo]
        records = await db.fetch("import_jobs", *zip(*batch, strict=True), conn=conn)
        for index, record in zip(todo, records, strict=True):
            if record["id"] is not None:
                results[index] = EnqueueResult(record["id"], duplicate=not record["inserted"])
        todo = [i for i in todo if results[i] is None]
        if not todo:
            return [r for r in results if r is not None]
    first = rows[todo[0]]
    raise DedupRaceError(
        first[0], first[13] or first[9] or "", MAX_DEDUP_ROUNDS
    )  # job or dedup key


def _row(p: PreparedJob, job: ImportedJob, flow_id: int | None) -> tuple[Any, ...]:
    return (
        p.queue,
        p.kind,
        p.name,
        p.payload,
        p.priority,
        job.run_at,
        p.max_attempts,
        p.max_deferrals,
        p.backoff,
        p.dedup_key,
        p.group_key,
        p.tenant,
        p.metadata,
        p.job_key,
        flow_id,
        0,
        p.record_events,
        job.status,
        job.attempts,
        job.created_at,
        job.started_at,
        job.finished_at,
        _json("output", job.output),
        _json("error", job.error),
        _json("progress", job.progress),
        p.retention,
    )
