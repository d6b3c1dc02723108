"""BullMQ jobs as read from Redis -> engine imports grouped in units (a job, or a whole flow
tree), schedules, dedup holds, queue settings, and every job skipped with its reason. Pure: no
I/O. The runner feeds it a page of jobs at a time (and the flow trees they reach), takes the
units, and has it forget them: what it keeps between pages is a summary, never the jobs.

Mapping (MIGRATION.md): the state comes from the container only; processing order is kept
(the runner pages containers in BullMQ's order: stalled actives first, then wait, prioritized,
delayed); priority 10 - p; the BullMQ id is the job key; data jsonb cannot hold is made safe
and kept byte for byte in the metadata.
"""

from __future__ import annotations

import base64
import hashlib
import json
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
    split_job_key,
    state_of,
)
from migration_tools.reader import FetchedJob, QueueContext, QueueRef
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
    checksum: str  # sha256 of the data's bytes as BullMQ stored them
    expected: str  # the payload the engine must hold, as JSON text


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
    ledger key of a migrated job), which the schedule adopts as its next run."""

    arguments: dict[str, Any]
    pending: tuple[QueueRef, str] | None
    scheduler: tuple[QueueRef, str, float] | None = None
    """The BullMQ scheduler: its queue, id and next time (ms) as read."""


@dataclass
class QueueSettings:
    queue: str
    paused: bool
    concurrency: int | None
    rate: tuple[int, float] | None


SKIPPED_IDS_KEPT = 1000
"""Ids kept per (queue, reason) of skipped jobs; the count is always exact."""


@dataclass
class Plan:
    """What the migration found and did, in counts: it never holds the jobs themselves."""

    schedules: list[ScheduleImport] = field(default_factory=list)
    holds: list[DedupHold] = field(default_factory=list)
    settings: list[QueueSettings] = field(default_factory=list)
    skip_groups: dict[tuple[str, str], tuple[int, list[str]]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    counts: dict[str, dict[str, int]] = field(default_factory=dict)  # queue -> state -> n
    job_count: int = 0
    unit_count: int = 0
    flow_count: int = 0
    max_numeric_id: int = 0

    def skip(self, queue: str, job_id: str, reason: str) -> None:
        count, ids = self.skip_groups.get((queue, reason), (0, []))
        if len(ids) < SKIPPED_IDS_KEPT:
            ids.append(job_id)
        self.skip_groups[(queue, reason)] = (count + 1, ids)

    @property
    def skipped(self) -> list[Skip]:
        """The skipped jobs whose ids are kept (the first SKIPPED_IDS_KEPT of each reason)."""
        return [
            Skip(queue, job_id, reason)
            for (queue, reason), (_, ids) in self.skip_groups.items()
            for job_id in ids
        ]

    def add(self, unit: Unit) -> None:
        self.unit_count += 1
        self.job_count += len(unit.jobs)
        self.flow_count += bool(unit.edges)


def checksum(raw: bytes) -> str:
    """Of the data's bytes as BullMQ stored them (the ledger's record of the source)."""
    return hashlib.sha256(raw).hexdigest()


def _ms(value: str | None) -> datetime | None:
    if value in (None, ""):
        return None
    return datetime.fromtimestamp(int(float(value)) / 1000, UTC)


Key = tuple[QueueRef, str]
MAPPED_KEPT = 10_000  # distinct option sets whose engine options are kept


def _needs_safe(text: str) -> bool:
    """Whether JSON ``text`` may hold what jsonb cannot: a \\u0000 or surrogate escape,
    Python's NaN or Infinity, or a lone surrogate from bytes that were not UTF-8."""
    lowered = text.lower()
    if "\\u0000" in lowered or "\\ud" in lowered or "nan" in lowered or "infinity" in lowered:
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _safe_json(text: str | None) -> Any:
    """A JSON field, made jsonb-safe only when it may need it (the check is on the text)."""
    value = decode_json(text)
    return jsonb_safe(value) if text and _needs_safe(text) else value


class Transformer:
    """Builds units from the jobs it is given (``remember``) and the queues' contexts."""

    def __init__(
        self,
        include_history: bool,
        bases: list[tuple[str, str]],
        *,
        locks_may_be_held: bool = False,
    ) -> None:
        """``bases``: every known (prefix, queue), to resolve flow keys. ``locks_may_be_held``:
        a BullMQ client is connected, so an active job's unexpired lock may belong to a worker
        that will still finish it (the job is skipped). Without one, such a lock has no owner:
        the job comes across runnable."""
        self.include_history = include_history
        self.locks_may_be_held = locks_may_be_held
        self.bases = bases
        self.plan = Plan()
        self.contexts: dict[QueueRef, QueueContext] = {}
        self.cache: dict[Key, FetchedJob] = {}
        self.iteration_jobs: dict[Key, str] = {}
        self._decoded: dict[str, tuple[Any, str | None, Any, str]] = {}
        self._mapped: dict[tuple[str, QueueRef, str], dict[str, Any]] = {}

    # -- what it is given ------------------------------------------------------------------

    def add_queue(self, context: QueueContext, pending: dict[str, FetchedJob | None]) -> None:
        """A queue taking part; ``pending``: its schedulers' pending iteration jobs."""
        self.contexts[context.ref] = context
        self._schedules(context, pending)
        self._settings(context)
        self._holds(context)
        self.plan.max_numeric_id = max(self.plan.max_numeric_id, context.id_counter)

    def remember(self, ref: QueueRef, fetched: dict[str, FetchedJob | None]) -> None:
        for job_id, job in fetched.items():
            if job is not None:
                self.cache[(ref, job_id)] = job

    def forget(self) -> None:
        """Drop every job given so far (they are written)."""
        self.cache.clear()
        self._decoded.clear()

    def state(self, key: Key) -> str:
        found = self.cache.get(key)
        return "unknown" if found is None else state_of(dict.fromkeys(found.containers, ""))

    def emit(self, key: Key) -> list[Key] | None:
        """Checks a job paged from its container before it is transformed: None when it is
        not to be written (skipped, with the reason recorded), else the jobs it joins
        (itself; the runner completes a flow tree with ``links``)."""
        found = self.cache[key]
        if len(found.containers) > 1:
            self.plan.warnings.append(f"{key[0]}: job {key[1]} is in {sorted(found.containers)}")
        reason = self.iteration_jobs.get(key)
        if reason is not None:
            self.plan.skip(str(key[0]), key[1], reason)
            return None
        return [key]

    def links(self, key: Key) -> list[Key]:
        """The parent and children a job names, in known queues."""
        found = self.cache.get(key)
        if found is None:
            return []
        job = found.job
        linked: list[Key] = []
        parent_key = job.fields.get("parentKey")
        children = [*job.dependencies, *job.processed, *job.failed_children, *job.unsuccessful]
        for full in ([parent_key] if parent_key else []) + children:
            ref = self._ref_of(full)
            if ref is not None:
                linked.append(ref)
        return linked

    def _job(self, key: Key) -> RawJob | None:
        found = self.cache.get(key)
        return None if found is None else found.job

    def _ref_of(self, full_key: str) -> Key | None:
        found = split_job_key(full_key, self.bases)
        return None if found is None else (QueueRef(found[0], found[1]), found[2])

    # -- one unit ----------------------------------------------------------------------------

    def unit(self, tree: list[Key]) -> Unit:
        """The unit of ``tree`` (a job, or every job of a flow tree): counted in the plan."""
        unit = Unit()
        handles: set[str] = set()
        for key in tree:
            job = self._job(key)
            state = self.state(key)
            if job is None:
                continue
            imported = self._imported(key, job, state)
            if imported is None:
                continue
            unit.jobs.append(imported)
            handles.add(job.key)
            unit.ledger.append(
                LedgerEntry(
                    job.prefix,
                    job.queue,
                    job.id,
                    job.key,
                    FACADE_STATE.get(state, state),
                    checksum(job.data_bytes if job.data_bytes is not None else b"{}"),
                    self._data(job)[3],
                )
            )
        for key in tree:
            job = self._job(key)
            if job is None or job.key not in handles:
                continue
            self._edges(unit, job, handles)
        if unit.jobs:
            self.plan.add(unit)
        return unit

    def _data(self, job: RawJob) -> tuple[Any, str | None, Any, str]:
        """The parsed data as stored (made jsonb-safe when needed), the raw bytes (base64) in
        that case, the data exactly as BullMQ returns it (what the facade returns), and what
        the engine's payload must equal, as JSON text (BullMQ's own text when jsonb holds it
        as it is: PostgreSQL compares the stored payload with the source, not with a copy)."""
        cached = self._decoded.get(job.key)
        if cached is None:
            cached = self._decoded[job.key] = self._decode(job)
        return cached

    def _decode(self, job: RawJob) -> tuple[Any, str | None, Any, str]:
        raw = job.data_bytes if job.data_bytes is not None else b"{}"
        try:
            text = raw.decode("utf-8")
            data = json.loads(text)
        except (UnicodeDecodeError, json.JSONDecodeError):
            self.plan.warnings.append(f"{job.key}: data is not UTF-8 JSON; kept as raw bytes")
            stand_in = {"__bullmq_raw__": True}
            return stand_in, base64.b64encode(raw).decode(), stand_in, json.dumps(stand_in)
        # The full check runs only for text that may hold what jsonb cannot (_needs_safe).
        problem = jsonb_problem(data) if _needs_safe(text) else None
        if problem is not None:
            self.plan.warnings.append(
                f"{job.key}: data holds what PostgreSQL jsonb cannot ({problem}); the exact "
                "bytes are kept beside it (metadata.bullmq.raw_data), and the facade returns them"
            )
            safe = jsonb_safe(data)
            return safe, base64.b64encode(raw).decode(), data, json.dumps(safe)
        return data, None, data, text

    def _imported(self, key: Key, job: RawJob, state: str) -> ImportedJob | None:
        ref, job_id = key
        context = self.contexts[ref]
        fetched = self.cache[key]
        queue = str(ref)
        possibly_ran = False
        if state == "active":
            ttl = fetched.lock_ttl
            if ttl != -2 and self.locks_may_be_held:
                self.plan.skip(
                    queue, job_id, "active with a live lock: its worker may still finish it"
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
                self.plan.skip(queue, job_id, f"{state} (history not included)")
                return None
        opts_text = job.fields.get("opts")
        opts = decode_opts(opts_text)
        data, raw, _, _ = self._data(job)
        options = self._options(job.fields.get("name", ""), opts, job.int_field("priority"), ref)
        options["job_key"] = job_id
        options["dedup_key"] = self._simple_dedup(context, job_id, job)
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
            bullmq_meta["stacktrace"] = _safe_json(job.fields["stacktrace"])
        safe_opts = jsonb_safe(opts) if opts_text and _needs_safe(opts_text) else opts
        options["metadata"] = {"opts": safe_opts, "bullmq": bullmq_meta}
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
        run_at_ms = fetched.run_at_ms if state == "delayed" else None
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
            output=_safe_json(job.fields.get("returnvalue")) if state == "completed" else None,
            error=error,
            progress=_safe_json(job.fields.get("progress")),
            logs=job.logs,
            handle=job.key,
        )

    def _options(
        self, name: str, opts: dict[str, Any], priority: int, ref: QueueRef
    ) -> dict[str, Any]:
        """The engine options of a job's run-time BullMQ options (the facade's mapping), made
        once per distinct set: a queue's jobs mostly share theirs."""
        run_opts = {k: v for k, v in opts.items() if k not in _ADD_TIME_OPTS}
        run_opts["priority"] = priority
        key = (name, ref, repr(run_opts))  # equal reprs: equal JSON values
        options = self._mapped.get(key)
        if options is None:
            options = enqueue_options(name, run_opts, ref.prefix, ref.name)
            for dropped in ("delay", "lifo", "dedup_ttl", "dedup_extend", "dedup_replace"):
                options.pop(dropped, None)
            if len(self._mapped) >= MAPPED_KEPT:
                self._mapped.clear()
            self._mapped[key] = options
        return dict(options)

    def _simple_dedup(self, context: QueueContext, job_id: str, job: RawJob) -> str | None:
        dedup_id = job.fields.get("deid")
        if not dedup_id:
            return None
        holder = context.dedup.get(dedup_id)
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
                child_state = self.state(self._ref_of(child_key) or (QueueRef("", ""), ""))
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

    def _schedules(self, context: QueueContext, pending_jobs: dict[str, FetchedJob | None]) -> None:
        """Schedulers as engine schedules; their pending iteration job is the next run."""
        ref = context.ref
        for scheduler_id, (next_ms, fields) in context.schedulers.items():
            pending_id = f"repeat:{scheduler_id}:{int(next_ms)}"
            found = pending_jobs.get(pending_id)
            pending = None if found is None else found.job
            legacy = "ic" not in fields
            if legacy and pending is None:
                self.plan.warnings.append(
                    f"{ref}: legacy repeatable {scheduler_id} has no pending job; its "
                    "template is unknown, not migrated"
                )
                continue
            repeat: dict[str, Any] = {}
            numeric = ("every", "offset", "limit", "startDate", "endDate")
            for name in ("every", "offset", "pattern", "tz", "limit", "startDate", "endDate"):
                if fields.get(name) not in (None, ""):
                    value = fields[name]
                    repeat[name] = int(value) if name in numeric else value
            if legacy and pending is not None:
                name = pending.fields.get("name", "")
                data = self._decode(pending)[0]
                opts = decode_opts(pending.fields.get("opts"))
            else:
                name = fields.get("name", "")
                data = decode_json(fields.get("data")) if fields.get("data") else {}
                opts = decode_opts(fields.get("opts"))
            template = {k: v for k, v in opts.items() if k not in _ADD_TIME_OPTS}
            arguments = scheduler_arguments(
                ref.prefix,
                ref.name,
                scheduler_id,
                repeat,
                name,
                data,
                template,
                next_millis=int(next_ms),
            )
            arguments["emitted"] = int(fields.get("ic") or 0)
            self.plan.schedules.append(
                ScheduleImport(
                    arguments,
                    None if pending is None else (ref, pending_id),
                    (ref, scheduler_id, next_ms),
                )
            )
            if pending is not None and legacy:
                # A legacy repeatable's job is its template, not a scheduler iteration.
                self.iteration_jobs[(ref, pending_id)] = (
                    f"pending iteration of repeatable {scheduler_id}: becomes its next run"
                )

    def proto_units(self, context: QueueContext) -> list[Unit]:
        """keepLastIfActive proto-jobs (``dn:``) appear in no container: pending jobs."""
        units = []
        ref = context.ref
        for dedup_id, fields in context.proto_jobs.items():
            opts = {
                k: v for k, v in decode_opts(fields.get("opts")).items() if k not in _ADD_TIME_OPTS
            }
            options = enqueue_options(fields.get("name", ""), opts, ref.prefix, ref.name)
            for dropped in ("delay", "lifo", "dedup_ttl", "dedup_extend", "dedup_replace"):
                options.pop(dropped, None)
            options["job_key"] = fields.get("jid") or None
            options["metadata"] = {"opts": opts, "bullmq": {"proto_job_of": dedup_id}}
            data = jsonb_safe(decode_json(fields.get("data")) or {})
            unit = Unit([ImportedJob(JobSpec(KIND, data, **options))])
            unit.ledger.append(
                LedgerEntry(
                    ref.prefix,
                    ref.name,
                    f"dn:{dedup_id}",
                    f"dn:{dedup_id}",
                    "waiting",
                    checksum(fields.get("data", "{}").encode("utf-8", "surrogateescape")),
                    json.dumps(data),
                )
            )
            self.plan.add(unit)
            units.append(unit)
            self.plan.warnings.append(
                f"{ref}: keepLastIfActive job for {dedup_id!r} migrated as a waiting job"
            )
        return units

    def _settings(self, context: QueueContext) -> None:
        meta = context.meta
        rate = None
        if meta.get("max") and meta.get("duration"):
            rate = (int(meta["max"]), int(meta["duration"]) / 1000)
        concurrency = int(meta["concurrency"]) if meta.get("concurrency") else None
        ref = context.ref
        self.plan.settings.append(
            QueueSettings(engine_queue(ref.prefix, ref.name), "paused" in meta, concurrency, rate)
        )

    def _holds(self, context: QueueContext) -> None:
        ref = context.ref
        for dedup_id, (job_id, ttl) in context.dedup.items():
            if ttl > 0:
                until = datetime.fromtimestamp((context.taken_at_ms + ttl) / 1000, UTC)
                holder = (ref.prefix, ref.name, job_id)
                self.plan.holds.append(DedupHold(str(ref), dedup_id, until, holder))


def _expand(flags: dict[str, Any]) -> dict[str, Any]:
    return {SHORT_OPTS.get(k, k): v for k, v in flags.items()}
