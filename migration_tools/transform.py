"""Snapshots -> a migration plan: engine imports grouped in units (a job, or a whole flow tree),
schedules, dedup holds, queue settings, and every job skipped with its reason. Pure: no I/O.

Mapping (MIGRATION.md): the state comes from the container only; processing order is kept
(units are emitted in BullMQ's order: stalled actives first, then wait, prioritized, delayed);
priority 10 - p; the BullMQ id is the job key; data jsonb cannot hold is made safe and kept
byte for byte in the metadata.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from bullmq_compat import KIND, edge_policy, engine_queue, enqueue_options, scheduler_arguments
from migration_tools.layout import (
    SHORT_OPTS,
    RawJob,
    attempts_made,
    decode_json,
    decode_opts,
    delayed_run_at_ms,
    split_job_key,
    state_of,
)
from migration_tools.snapshot import QueueRef, QueueSnapshot
from pgjobs import (
    EdgePolicy,
    EdgeState,
    ImportedEdge,
    ImportedJob,
    JobSpec,
    jsonb_problem,
    jsonb_safe,
    text_safe,
)

# Options that describe how a job was added, not how it runs: kept in metadata only.
_ADD_TIME_OPTS = {
    "repeat",
    "jobId",
    "debounce",
    "deduplication",
    "parent",
    "lifo",
    "delay",
    "prevMillis",
    "repeatJobKey",
    "timestamp",
    "telemetryMetadata",
    "omitContext",
    "failParentOnFailure",
    "continueParentOnFailure",
    "ignoreDependencyOnFailure",
    "removeDependencyOnFailure",
    "stackTraceLimit",
}
FACADE_STATE = {  # BullMQ state in Redis -> what the facade's getState reports after migration
    "waiting": "waiting",
    "prioritized": "prioritized",
    "delayed": "delayed",
    "completed": "completed",
    "failed": "failed",
    "waiting-children": "waiting-children",
    "active": "waiting",  # a stalled active job comes back to wait, as BullMQ's check does
}


@dataclass
class LedgerEntry:
    prefix: str
    queue: str
    job_id: str
    handle: str
    state: str  # the state the facade must report after migration
    checksum: str


@dataclass
class Unit:
    """Jobs written together in one transaction: one job, or one whole flow tree."""

    jobs: list[ImportedJob] = field(default_factory=list)
    edges: list[ImportedEdge] = field(default_factory=list)
    ledger: list[LedgerEntry] = field(default_factory=list)


@dataclass
class Skip:
    queue: str
    job_id: str
    reason: str


@dataclass
class DedupHold:
    queue: str
    key: str
    until: datetime
    job: tuple[str, str, str] | None  # (prefix, queue, id) of the holder, if migrated


@dataclass
class ScheduleImport:
    """A scheduler as engine schedule arguments, and the job of its pending iteration (the
    ledger key of a job of the plan), which the schedule adopts as its next run."""

    arguments: dict[str, Any]
    pending: tuple[QueueRef, str] | None


@dataclass
class QueueSettings:
    queue: str
    paused: bool
    concurrency: int | None
    rate: tuple[int, float] | None


@dataclass
class Plan:
    units: list[Unit] = field(default_factory=list)
    schedules: list[ScheduleImport] = field(default_factory=list)
    holds: list[DedupHold] = field(default_factory=list)
    settings: list[QueueSettings] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    counts: dict[str, dict[str, int]] = field(default_factory=dict)  # queue -> state -> n
    max_numeric_id: int = 0

    @property
    def job_count(self) -> int:
        return sum(len(u.jobs) for u in self.units)


def checksum(data: Any) -> str:
    """Of the parsed data, in canonical form (key order and escapes do not matter)."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _ms(value: str | None) -> datetime | None:
    if value in (None, ""):
        return None
    return datetime.fromtimestamp(int(float(value)) / 1000, UTC)


class Transformer:
    """Builds the plan from the snapshots of every queue taking part."""

    def __init__(
        self,
        snapshots: dict[QueueRef, QueueSnapshot],
        include_history: bool,
        *,
        locks_may_be_held: bool = False,
    ) -> None:
        """``locks_may_be_held``: a BullMQ client is connected, so an active job's unexpired
        lock may belong to a worker that will still finish it (the job is skipped). Without
        one, such a lock has no owner: the job comes across runnable."""
        self.snapshots = snapshots
        self.include_history = include_history
        self.locks_may_be_held = locks_may_be_held
        self.bases = [(r.prefix, r.name) for r in snapshots]
        self.plan = Plan()
        self.state: dict[tuple[QueueRef, str], str] = {}
        self.run_at: dict[tuple[QueueRef, str], int] = {}
        self._decoded: dict[str, tuple[Any, str | None, Any]] = {}
        for ref, snap in snapshots.items():
            where: dict[str, dict[str, str]] = {}
            for container, rows in snap.containers.items():
                for job_id, score in rows:
                    where.setdefault(job_id, {})[container] = ""
                    if container == "delayed":
                        self.run_at[(ref, job_id)] = delayed_run_at_ms(score)
            for job_id, containers in where.items():
                # BullMQ's precedence when an id is in two containers (inconsistent reads)
                self.state[(ref, job_id)] = state_of(containers)
                if len(containers) > 1:
                    self.plan.warnings.append(f"{ref}: job {job_id} is in {sorted(containers)}")

    def build(self) -> Plan:
        scheduler_jobs = self._schedules()
        done: set[tuple[QueueRef, str]] = set()
        # Jobs still to run first, each queue in its processing order, so that a flow tree is
        # placed where its first waiting member stands; finished history after.
        for finished in (False, True):
            for ref, snap in sorted(self.snapshots.items()):
                self._emit(ref, snap, finished, done, scheduler_jobs)
        for ref, snap in sorted(self.snapshots.items()):
            for job_id in snap.missing_hashes:
                self.plan.skipped.append(
                    Skip(str(ref), job_id, "listed in a container, no job hash")
                )
            self._proto_jobs(snap)
            self._settings(snap)
            self._holds(snap)
            if snap.id_counter > self.plan.max_numeric_id:
                self.plan.max_numeric_id = snap.id_counter
        return self.plan

    # -- order and trees -------------------------------------------------------------------

    def _emit(
        self,
        ref: QueueRef,
        snap: QueueSnapshot,
        finished: bool,
        done: set[tuple[QueueRef, str]],
        scheduler_jobs: dict[tuple[QueueRef, str], str],
    ) -> None:
        for job_id in self._processing_order(snap):
            key = (ref, job_id)
            if key in done or job_id not in snap.jobs:
                continue
            if (self.state.get(key) in ("completed", "failed")) != finished:
                continue
            if key in scheduler_jobs:
                done.add(key)
                self.plan.skipped.append(Skip(str(ref), job_id, scheduler_jobs[key]))
                continue
            tree = self._tree(key)
            done.update(tree)
            unit = self._unit(tree)
            if unit.jobs:
                self.plan.units.append(unit)

    def _processing_order(self, snap: QueueSnapshot) -> Iterable[str]:
        c = snap.containers
        yield from (i for i, _ in c["active"])
        yield from (i for i, _ in c["wait"])
        yield from (i for i, _ in c["paused"])
        yield from (i for i, _ in sorted(c["prioritized"], key=lambda r: r[1]))
        yield from (i for i, _ in sorted(c["delayed"], key=lambda r: r[1]))
        yield from (i for i, _ in c["waiting-children"])
        yield from (i for i, _ in sorted(c["failed"], key=lambda r: r[1]))
        yield from (i for i, _ in sorted(c["completed"], key=lambda r: r[1]))

    def _job(self, key: tuple[QueueRef, str]) -> RawJob | None:
        snap = self.snapshots.get(key[0])
        return None if snap is None else snap.jobs.get(key[1])

    def _ref_of(self, full_key: str) -> tuple[QueueRef, str] | None:
        found = split_job_key(full_key, self.bases)
        return None if found is None else (QueueRef(found[0], found[1]), found[2])

    def _links(self, key: tuple[QueueRef, str]) -> list[tuple[QueueRef, str]]:
        job = self._job(key)
        if job is None:
            return []
        linked: list[tuple[QueueRef, str]] = []
        parent_key = job.fields.get("parentKey")
        children = [*job.dependencies, *job.processed, *job.failed_children, *job.unsuccessful]
        for full in ([parent_key] if parent_key else []) + children:
            ref = self._ref_of(full)
            if ref is not None:
                linked.append(ref)
        return linked

    def _tree(self, start: tuple[QueueRef, str]) -> list[tuple[QueueRef, str]]:
        """Every job connected to ``start`` by parent/child links, in discovery order."""
        seen = {start}
        order = [start]
        frontier = [start]
        while frontier:
            nxt = []
            for key in frontier:
                for other in self._links(key):
                    if other not in seen:
                        seen.add(other)
                        order.append(other)
                        nxt.append(other)
            frontier = nxt
        return order

    # -- one unit ----------------------------------------------------------------------------

    def _unit(self, tree: list[tuple[QueueRef, str]]) -> Unit:
        unit = Unit()
        handles: set[str] = set()
        for key in tree:
            job = self._job(key)
            state = self.state.get(key, "unknown")
            if job is None:
                continue
            imported = self._imported(key, job, state)
            if imported is None:
                continue
            unit.jobs.append(imported)
            handles.add(job.key)
            data = self._data(job)[2]
            unit.ledger.append(
                LedgerEntry(
                    job.prefix,
                    job.queue,
                    job.id,
                    job.key,
                    FACADE_STATE.get(state, state),
                    checksum(data),
                )
            )
        for key in tree:
            job = self._job(key)
            if job is None or job.key not in handles:
                continue
            self._edges(unit, job, handles)
        return unit

    def _data(self, job: RawJob) -> tuple[Any, str | None, Any]:
        """The parsed data as stored (made jsonb-safe when needed), the raw bytes (base64) in
        that case, and the data exactly as BullMQ returns it (what the facade returns)."""
        cached = self._decoded.get(job.key)
        if cached is None:
            cached = self._decoded[job.key] = self._decode(job)
        return cached

    def _decode(self, job: RawJob) -> tuple[Any, str | None, Any]:
        raw = job.data_bytes if job.data_bytes is not None else b"{}"
        try:
            data = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            self.plan.warnings.append(f"{job.key}: data is not UTF-8 JSON; kept as raw bytes")
            stand_in = {"__bullmq_raw__": True}
            return stand_in, base64.b64encode(raw).decode(), stand_in
        # Only text holding a \u0000 or a \uD800-\uDFFF escape, or Python's NaN/Infinity, can
        # hold what jsonb cannot (valid JSON has no raw NUL): the full check runs for those.
        suspect = (b"\\u0000", b"\\ud", b"nan", b"infinity")
        lowered = raw.lower()
        problem = jsonb_problem(data) if any(s in lowered for s in suspect) else None
        if problem is not None:
            self.plan.warnings.append(
                f"{job.key}: data holds what PostgreSQL jsonb cannot ({problem}); the exact "
                "bytes are kept beside it (metadata.bullmq.raw_data), and the facade returns them"
            )
            return jsonb_safe(data), base64.b64encode(raw).decode(), data
        return data, None, data

    def _imported(self, key: tuple[QueueRef, str], job: RawJob, state: str) -> ImportedJob | None:
        ref, job_id = key
        snap = self.snapshots[ref]
        queue = str(ref)
        possibly_ran = False
        if state == "active":
            ttl = snap.lock_ttls.get(job_id, -2)
            if ttl != -2 and self.locks_may_be_held:
                self.plan.skipped.append(
                    Skip(queue, job_id, "active with a live lock: its worker may still finish it")
                )
                return None
            if ttl != -2:
                self.plan.warnings.append(
                    f"{queue} {job_id}: active, its lock unexpired but no BullMQ client "
                    "connected to own it: comes across waiting, its attempt not counted (as "
                    "BullMQ's stalled-job check would move it)"
                )
            possibly_ran = True
        if state in ("completed", "failed") and not self.include_history:
            # history is only needed when a flow parent still reads it
            if not job.fields.get("parentKey"):
                self.plan.skipped.append(Skip(queue, job_id, f"{state} (history not included)"))
                return None
        opts = decode_opts(job.fields.get("opts"))
        data, raw, _ = self._data(job)
        run_opts = {k: v for k, v in opts.items() if k not in _ADD_TIME_OPTS}
        run_opts["priority"] = job.int_field("priority")
        options = enqueue_options(job.fields.get("name", ""), run_opts, ref.prefix, ref.name)
        for dropped in ("delay", "lifo", "dedup_ttl", "dedup_extend", "dedup_replace"):
            options.pop(dropped, None)
        options["job_key"] = job_id
        options["dedup_key"] = self._simple_dedup(snap, job_id, job)
        bullmq_meta: dict[str, Any] = {
            "id": job_id,
            "prefix": ref.prefix,
            "queue": ref.name,
            "state": state,
            "ats": job.int_field("ats"),
        }
        if possibly_ran:
            bullmq_meta["possibly_ran"] = True
        if raw is not None:
            bullmq_meta["raw_data"] = raw
        if job.fields.get("stacktrace"):
            bullmq_meta["stacktrace"] = jsonb_safe(decode_json(job.fields["stacktrace"]))
        options["metadata"] = {"opts": jsonb_safe(opts), "bullmq": bullmq_meta}
        error = None
        if job.fields.get("failedReason"):
            trace = bullmq_meta.get("stacktrace") or []
            error = {
                "type": "Error",
                "message": text_safe(job.fields["failedReason"]),
                "traceback": "\n".join(str(t) for t in trace[-1:]),
            }
        status = {"completed": "completed", "failed": "dead"}.get(state, "pending")
        deferred = job.fields.get("defa")  # a failParentOnFailure child failed
        if deferred and state == "waiting-children":
            status, error = "dead", {"type": "Error", "message": text_safe(deferred)}
        elif deferred and status == "pending":
            # BullMQ moved the parent to wait; its worker fails it, unrun, when it takes it
            # (the facade's worker does the same from this field)
            bullmq_meta["deferred_failure"] = text_safe(deferred)
        run_at_ms = self.run_at.get(key)
        self.plan.counts.setdefault(queue, {}).setdefault(state, 0)
        self.plan.counts[queue][state] += 1
        if job_id.isdigit():
            self.plan.max_numeric_id = max(self.plan.max_numeric_id, int(job_id))
        return ImportedJob(
            JobSpec(KIND, data, **options),
            status=status,  # type: ignore[arg-type]
            run_at=None if run_at_ms is None else datetime.fromtimestamp(run_at_ms / 1000, UTC),
            attempts=attempts_made(job.fields),
            created_at=_ms(job.fields.get("timestamp")),
            started_at=_ms(job.fields.get("processedOn")),
            finished_at=_ms(job.fields.get("finishedOn")) if status != "pending" else None,
            output=jsonb_safe(decode_json(job.fields.get("returnvalue")))
            if state == "completed"
            else None,
            error=error,
            progress=jsonb_safe(decode_json(job.fields.get("progress"))),
            logs=job.logs,
            handle=job.key,
        )

    def _simple_dedup(self, snap: QueueSnapshot, job_id: str, job: RawJob) -> str | None:
        dedup_id = job.fields.get("deid")
        if not dedup_id:
            return None
        holder = snap.dedup.get(dedup_id)
        if holder is not None and holder[0] == job_id and holder[1] == -1:
            return dedup_id  # in flight, no ttl: the engine's own dedup key holds it
        return None

    def _edges(self, unit: Unit, parent: RawJob, handles: set[str]) -> None:
        # A deferred failure (failParentOnFailure) made BullMQ move the parent to wait, as
        # continueParentOnFailure does: its children still open no longer hold it.
        continued = bool(parent.fields.get("defa"))
        edges: list[ImportedEdge] = []

        def policy_of(child_key: str) -> EdgePolicy:
            child = self._job(self._ref_of(child_key) or (QueueRef("", ""), ""))
            if child is None:
                return EdgePolicy.BLOCK
            flags = decode_json(child.fields.get("parent")) or {}
            opts = decode_opts(child.fields.get("opts"))
            return edge_policy({**opts, **_expand(flags)})

        for child_key in parent.dependencies:
            if child_key in handles:
                child_state = self.state.get(self._ref_of(child_key) or (QueueRef("", ""), ""))
                state: EdgeState = "blocked" if child_state == "failed" else "open"
                edges.append(ImportedEdge(child_key, parent.key, policy_of(child_key), state))
        for child_key, value in parent.processed.items():
            if child_key not in handles:
                self._placeholder(unit, child_key, value, handles)
            edges.append(ImportedEdge(child_key, parent.key, policy_of(child_key), "satisfied"))
        for child_key, reason in parent.failed_children.items():
            if child_key in handles:
                policy = policy_of(child_key)
                continued = continued or policy is EdgePolicy.CONTINUE
                edges.append(
                    ImportedEdge(child_key, parent.key, policy, "ignored", {"message": reason})
                )
        for child_key in parent.unsuccessful:
            if child_key in handles:
                edges.append(ImportedEdge(child_key, parent.key, EdgePolicy.CASCADE, "failed"))
        if continued:
            edges = [
                ImportedEdge(e.prerequisite, e.dependent, e.policy, "released")
                if e.state == "open"
                else e
                for e in edges
            ]
        unit.edges.extend(edges)

    def _placeholder(self, unit: Unit, child_key: str, value: str, handles: set[str]) -> None:
        """A processed child whose hash BullMQ already removed: a completed node holding the
        return value the parent reads (getChildrenValues)."""
        ref = self._ref_of(child_key)
        if ref is None:
            self.plan.warnings.append(f"processed child {child_key} is in no known queue")
            return
        queue, child_id = ref
        spec = JobSpec(
            KIND,
            {},
            queue=str(queue),
            name="(removed child)",
            job_key=child_id,
            metadata={"bullmq": {"placeholder": True, "key": child_key}},
        )
        unit.jobs.append(
            ImportedJob(
                spec, status="completed", output=jsonb_safe(decode_json(value)), handle=child_key
            )
        )
        handles.add(child_key)

    # -- the rest of a queue -------------------------------------------------------------------

    def _schedules(self) -> dict[tuple[QueueRef, str], str]:
        """Schedulers as engine schedules; their pending iteration job is the next run."""
        iteration_jobs: dict[tuple[QueueRef, str], str] = {}
        for ref, snap in self.snapshots.items():
            for scheduler_id, (next_ms, fields) in snap.schedulers.items():
                pending_id = f"repeat:{scheduler_id}:{int(next_ms)}"
                pending = snap.jobs.get(pending_id)
                legacy = "ic" not in fields
                if legacy and pending is None:
                    self.plan.warnings.append(
                        f"{ref}: legacy repeatable {scheduler_id} has no pending job; its "
                        "template is unknown, not migrated"
                    )
                    continue
                repeat: dict[str, Any] = {}
                for name in ("every", "pattern", "tz", "limit", "startDate", "endDate"):
                    if fields.get(name) not in (None, ""):
                        value = fields[name]
                        repeat[name] = (
                            int(value)
                            if name in ("every", "limit", "startDate", "endDate")
                            else value
                        )
                if legacy and pending is not None:
                    name = pending.fields.get("name", "")
                    data = self._data(pending)[0]
                    opts = decode_opts(pending.fields.get("opts"))
                else:
                    name = fields.get("name", "")
                    data = decode_json(fields.get("data")) if fields.get("data") else {}
                    opts = decode_opts(fields.get("opts"))
                template = {k: v for k, v in opts.items() if k not in _ADD_TIME_OPTS}
                arguments = scheduler_arguments(
                    ref.prefix, ref.name, scheduler_id, repeat, name, data, template
                )
                arguments["first_run_at"] = datetime.fromtimestamp(next_ms / 1000, UTC)
                arguments["emitted"] = int(fields.get("ic") or 0)
                self.plan.schedules.append(
                    ScheduleImport(arguments, None if pending is None else (ref, pending_id))
                )
                if pending is not None and legacy:
                    # A legacy repeatable's job is its template, not a scheduler iteration.
                    iteration_jobs[(ref, pending_id)] = (
                        f"pending iteration of repeatable {scheduler_id}: becomes its next run"
                    )
        return iteration_jobs

    def _proto_jobs(self, snap: QueueSnapshot) -> None:
        """keepLastIfActive proto-jobs (``dn:``) appear in no container: pending jobs."""
        for dedup_id, fields in snap.proto_jobs.items():
            opts = {
                k: v for k, v in decode_opts(fields.get("opts")).items() if k not in _ADD_TIME_OPTS
            }
            options = enqueue_options(fields.get("name", ""), opts, snap.ref.prefix, snap.ref.name)
            for dropped in ("delay", "lifo", "dedup_ttl", "dedup_extend", "dedup_replace"):
                options.pop(dropped, None)
            options["job_key"] = fields.get("jid") or None
            options["metadata"] = {"opts": opts, "bullmq": {"proto_job_of": dedup_id}}
            data = decode_json(fields.get("data")) or {}
            unit = Unit([ImportedJob(JobSpec(KIND, jsonb_safe(data), **options))])
            unit.ledger.append(
                LedgerEntry(
                    snap.ref.prefix,
                    snap.ref.name,
                    f"dn:{dedup_id}",
                    f"dn:{dedup_id}",
                    "waiting",
                    checksum(data),
                )
            )
            self.plan.units.append(unit)
            self.plan.warnings.append(
                f"{snap.ref}: keepLastIfActive job for {dedup_id!r} migrated as a waiting job"
            )

    def _settings(self, snap: QueueSnapshot) -> None:
        meta = snap.meta
        rate = None
        if meta.get("max") and meta.get("duration"):
            rate = (int(meta["max"]), int(meta["duration"]) / 1000)
        concurrency = int(meta["concurrency"]) if meta.get("concurrency") else None
        self.plan.settings.append(
            QueueSettings(
                engine_queue(snap.ref.prefix, snap.ref.name), "paused" in meta, concurrency, rate
            )
        )

    def _holds(self, snap: QueueSnapshot) -> None:
        for dedup_id, (job_id, ttl) in snap.dedup.items():
            if ttl > 0:
                until = datetime.fromtimestamp((snap.taken_at_ms + ttl) / 1000, UTC)
                holder = (snap.ref.prefix, snap.ref.name, job_id)
                self.plan.holds.append(DedupHold(str(snap.ref), dedup_id, until, holder))


def _expand(flags: dict[str, Any]) -> dict[str, Any]:
    return {SHORT_OPTS.get(k, k): v for k, v in flags.items()}
