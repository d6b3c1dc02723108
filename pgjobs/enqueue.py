"""Turning typed inputs into job rows: one, many in one round trip, or on a caller's transaction.

Nothing is written until every job of a call has been validated, so bad input never
leaves a half-written batch.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, TypedDict

from pgjobs import jsonvalue, validation
from pgjobs.backoff import Backoff
from pgjobs.config import notify_channel
from pgjobs.errors import DedupRaceError, InvalidOption
from pgjobs.executor import Database
from pgjobs.kinds import Kind, Registry
from pgjobs.models import EnqueueResult, Keep

# The in-flight holder of a dedup key can finish between our conflict and our read of it;
# then the key is free and inserting again succeeds. A few rounds bound a pathological churn.
MAX_DEDUP_ROUNDS = 5


@dataclass(slots=True)
class JobSpec:
    """One job to enqueue: its kind, its input, and per-job overrides of the kind's defaults.

    (Not frozen: a frozen dataclass of this many fields costs microseconds per job to build,
    which a bulk enqueue of thousands pays; nothing here mutates a spec it is given.)"""

    kind: str | Kind[Any]
    input: Any
    queue: str | None = None
    priority: int | None = None
    run_at: datetime | None = None
    delay: float | timedelta | None = None
    max_attempts: int | None = None
    backoff: Any = None
    max_deferrals: int | None = None
    name: str | None = None
    dedup_key: str | None = None
    group_key: str | None = None
    tenant: str | None = None
    metadata: Any = None
    job_key: str | None = None
    keep_completed: Keep | None = None
    keep_dead: Keep | None = None
    events: bool = False
    """Append every transition of this job to the event log (``JobQueue.events``)."""
    lifo: bool = False
    """Run before every job of the same priority already waiting (newest first)."""
    dedup_ttl: float | timedelta | None = None
    """With ``dedup_key``: the key stays taken this long after this job is enqueued, whatever
    becomes of the job (throttle), instead of while it is in flight."""
    dedup_extend: bool = False
    """With ``dedup_ttl``: a dropped duplicate restarts the hold."""
    dedup_replace: bool = False
    """With ``dedup_key``: a duplicate replaces the holder while it is still delayed (debounce:
    the holder is removed, the new job takes the key; with ``dedup_ttl``, until the hold's
    expiry unless ``dedup_extend``)."""
    dedup_keep_last: bool = False
    """With ``dedup_key`` (held in flight, no ``dedup_ttl``): a duplicate arriving while the
    holder runs is kept, the latest only, and enqueued when the holder finishes (completed or
    failed for good), in the transaction that writes that outcome; it then holds the key."""


class BatchOptions(TypedDict, total=False):
    """The options ``JobQueue.enqueue_batch`` applies to every job of a batch: those of
    ``EnqueueOptions`` that do not name one job."""

    queue: str | None
    priority: int | None
    run_at: datetime | None
    delay: float | timedelta | None
    max_attempts: int | None
    backoff: Any
    max_deferrals: int | None
    group_key: str | None
    tenant: str | None
    metadata: Any
    keep_completed: Keep | None
    keep_dead: Keep | None
    events: bool


class EnqueueOptions(BatchOptions, total=False):
    """The per-job options of ``JobQueue.enqueue`` (JobSpec's fields but kind and input), so
    that a type checker catches a misspelt one."""

    name: str | None
    dedup_key: str | None
    job_key: str | None
    lifo: bool
    dedup_ttl: float | timedelta | None
    dedup_extend: bool
    dedup_replace: bool
    dedup_keep_last: bool


PER_JOB_OPTIONS = tuple(set(EnqueueOptions.__annotations__) - set(BatchOptions.__annotations__))


@dataclass(frozen=True, slots=True)
class DedupHold:
    """A time-bound dedup key (migration 0006): taken for ``ttl`` seconds from enqueue."""

    key: str
    ttl: float
    extend: bool
    replace: bool


@dataclass(slots=True)
class PreparedJob:
    """A validated job, as the bind parameters of the insert statements."""

    queue: str
    kind: str
    name: str
    payload: str
    priority: int
    run_at: datetime | None
    delay: float | None
    max_attempts: int
    max_deferrals: int
    backoff: str
    dedup_key: str | None
    group_key: str | None
    tenant: str | None
    metadata: str | None
    job_key: str | None = None
    retention: str | None = None
    flow_id: int | None = None
    pending_deps: int = 0
    record_events: bool = False
    hold: DedupHold | None = None
    replace: bool = False
    """An in-flight dedup key's duplicate replaces a delayed holder (``dedup_replace``)."""
    keep_last: bool = False
    """An in-flight dedup key's duplicate is kept while the holder runs (``dedup_keep_last``)."""

    @property
    def one_by_one(self) -> bool:
        """Whether the job's dedup key is decided by statements of its own (not a batch's)."""
        return self.hold is not None or self.replace or self.keep_last

    def key_identity(self) -> tuple[str, str, str] | None:
        if self.job_key is None:
            return None
        return (self.queue, self.job_key, self.tenant or "")

    def dedup_identity(self) -> tuple[str, str, str] | None:
        if self.dedup_key is None:
            return None
        return (self.queue, self.dedup_key, self.tenant or "")


# LIFO without a second sort key: the claim order is (priority DESC, run_at, id), so a LIFO job
# is given a run_at mirrored about this instant, decreasing as time increases. It sorts before
# every ordinary job (whose run_at is after the mirror) and before every older LIFO job.
_LIFO_MIRROR_NS = 946_684_800 * 10**9  # 2000-01-01T00:00:00Z
_last_lifo_ns = 0


def lifo_run_at() -> datetime:
    """A due time earlier than that of every job enqueued before, strictly decreasing."""
    global _last_lifo_ns
    now_ns = max(time.time_ns(), _last_lifo_ns + 1000)
    _last_lifo_ns = now_ns
    mirrored_us = (2 * _LIFO_MIRROR_NS - now_ns) // 1000
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=mirrored_us)


def prepare(spec: JobSpec, registry: Registry) -> PreparedJob:
    """Validate ``spec`` against its kind and the option rules; raise naming the field at fault."""
    kind = spec.kind if isinstance(spec.kind, Kind) else registry.get(spec.kind)
    typed = kind.validate(spec.input)
    payload = kind.encode(typed)
    if _only_kind_and_input(spec):  # the common bulk case: the kind's defaults, computed once
        return PreparedJob(
            kind.queue,
            kind.name,
            kind.name if kind.job_name is None else _name(kind.label(typed)),
            payload,
            kind.priority,
            None,
            None,
            kind.max_attempts,
            kind.max_deferrals,
            kind.backoff_json,
            None,
            None if kind.group_key is None else validation.text("group_key", kind.group(typed)),
            None,
            None,
            retention=kind.retention_json,
        )
    common = _common_columns(spec, kind)
    run_at = common.run_at
    if spec.lifo:
        if run_at is not None or spec.delay:
            raise InvalidOption("lifo", "a LIFO job cannot also be delayed")
        run_at = lifo_run_at()
    metadata = None
    if spec.metadata is not None:
        try:
            metadata = jsonvalue.dumps(spec.metadata)
        except jsonvalue.NotJson as exc:
            raise InvalidOption("metadata", str(exc)) from None
    dedup_key = validation.text("dedup_key", spec.dedup_key)
    hold = _dedup_hold(spec, dedup_key)
    name = spec.name if spec.name is not None else kind.label(typed)
    group_key = spec.group_key if spec.group_key is not None else kind.group(typed)
    return PreparedJob(
        queue=common.queue,
        kind=kind.name,
        name=_name(name),
        payload=payload,
        priority=common.priority,
        run_at=run_at,
        delay=common.delay,
        max_attempts=common.max_attempts,
        max_deferrals=common.max_deferrals,
        backoff=common.backoff,
        dedup_key=None if hold is not None else dedup_key,
        group_key=validation.text("group_key", group_key),
        tenant=common.tenant,
        metadata=metadata,
        job_key=validation.text("job_key", spec.job_key),
        retention=common.retention,
        record_events=bool(spec.events),
        hold=hold,
        replace=hold is None and dedup_key is not None and bool(spec.dedup_replace),
        keep_last=bool(spec.dedup_keep_last),
    )


@dataclass(frozen=True, slots=True)
class _CommonColumns:
    """The columns a spec's options give whatever its input and name: many specs share them
    (a flow's nodes, a facade queue's adds), so ``prepare`` validates them once per set."""

    kind: Kind[Any]
    queue: str
    priority: int
    run_at: datetime | None
    delay: float | None
    max_attempts: int
    max_deferrals: int
    backoff: str
    tenant: str | None
    retention: str | None


_common_memo: dict[tuple[Any, ...], _CommonColumns] = {}
_COMMON_MEMO_SIZE = 256


def _common_columns(spec: JobSpec, kind: Kind[Any]) -> _CommonColumns:
    """The validated ``_CommonColumns`` of ``spec``, from the memo when options of the same
    values and types were seen with this very kind; errors are raised as by a first validation
    and never remembered. The types are part of the key because ``True == 1``: a bool priority
    (or a bool count in a retention rule) must not pass as the integer it equals. Options that
    cannot be hashed (a dict backoff) are validated each time."""
    keeps = (spec.keep_completed, spec.keep_dead)
    if any(keep is not None and type(keep) is not Keep for keep in keeps):
        return _validate_common(spec, kind)  # which refuses it
    key = (
        kind.name,
        spec.queue,
        spec.priority,
        type(spec.priority),
        spec.run_at,
        spec.delay,
        type(spec.delay),
        spec.max_attempts,
        type(spec.max_attempts),
        spec.max_deferrals,
        type(spec.max_deferrals),
        spec.backoff,
        type(spec.backoff),
        spec.tenant,
        *(
            None if keep is None else (keep.count, type(keep.count), keep.age, type(keep.age))
            for keep in keeps
        ),
    )
    try:
        known = _common_memo.get(key)
    except TypeError:  # an unhashable option value
        return _validate_common(spec, kind)
    if known is not None and known.kind is kind:
        return known
    common = _validate_common(spec, kind)
    if len(_common_memo) >= _COMMON_MEMO_SIZE:
        _common_memo.clear()
    _common_memo[key] = common
    return common


def _validate_common(spec: JobSpec, kind: Kind[Any]) -> _CommonColumns:
    if spec.run_at is not None and spec.delay is not None:
        raise InvalidOption("delay", "give either run_at or delay, not both")
    if spec.keep_completed is None and spec.keep_dead is None:
        retention_json = kind.retention_json
    else:
        retention = validation.retention(
            spec.keep_completed or kind.keep_completed, spec.keep_dead or kind.keep_dead
        )
        retention_json = None if retention is None else jsonvalue.dumps(retention)
    return _CommonColumns(
        kind=kind,
        # The kind's own settings were validated when it was declared.
        queue=kind.queue if spec.queue is None else validation.queue(spec.queue),
        priority=kind.priority if spec.priority is None else validation.priority(spec.priority),
        run_at=validation.run_at(spec.run_at),
        delay=validation.delay_seconds(spec.delay),
        max_attempts=(
            kind.max_attempts
            if spec.max_attempts is None
            else validation.max_attempts(spec.max_attempts)
        ),
        max_deferrals=(
            kind.max_deferrals
            if spec.max_deferrals is None
            else validation.max_deferrals(spec.max_deferrals)
        ),
        backoff=kind.backoff_json if spec.backoff is None else _backoff_text(spec.backoff),
        tenant=validation.text("tenant", spec.tenant, max_bytes=256),
        retention=retention_json,
    )


@dataclass(frozen=True, slots=True)
class PreparedBatch:
    """Validated jobs of one kind sharing every column but name and payload (``template``
    holds the shared ones), written by one enqueue_uniform statement."""

    template: PreparedJob
    names: list[str]
    """The name of each job, in order; or one name, every job's."""
    payloads: str
    """One JSON array text: the payload of each job, in order."""


def prepare_batch(
    kind_or_name: str | Kind[Any],
    inputs: list[Any] | jsonvalue.JsonText,
    names: list[str] | None,
    options: dict[str, Any],
    registry: Registry,
) -> PreparedBatch | list[PreparedJob]:
    """Validate a batch: the shared options once, the inputs as one list (``Kind.encode_many``:
    one JSON array for the statement), each distinct name once; raise naming the option, or
    the kind, input position and field, at fault. A kind that names or groups jobs from their
    input gives one PreparedJob per input instead (their columns differ)."""
    for option in PER_JOB_OPTIONS:
        if options.get(option):
            raise InvalidOption(
                option, "names one job: give each job its own with enqueue_many (JobSpec)"
            )
    kind = kind_or_name if isinstance(kind_or_name, Kind) else registry.get(kind_or_name)
    if kind.job_name is not None or (
        kind.group_key is not None and options.get("group_key") is None
    ):
        values = kind.validate_many(inputs)
        _check_names(names, values)
        return [
            prepare(
                JobSpec(kind, value, name=None if names is None else names[i], **options), registry
            )
            for i, value in enumerate(values)
        ]
    payloads, typed = kind.encode_many(inputs)
    _check_names(names, typed)
    if not typed:
        return []
    checked = [kind.name] if names is None else _names(names)
    template = prepare(JobSpec(kind, typed[0], name=checked[0], **options), registry)
    return PreparedBatch(template, _one_if_same(checked), payloads)


def _one_if_same(names: list[str]) -> list[str]:
    """A batch's names as enqueue_uniform takes them: one, when every job has it."""
    return names[:1] if names.count(names[0]) == len(names) else names


def _check_names(names: list[str] | None, inputs: list[Any]) -> None:
    if names is not None and len(names) != len(inputs):
        raise InvalidOption(
            "names", f"must have one name per input ({len(inputs)}), got {len(names)}"
        )


def _only_kind_and_input(spec: JobSpec) -> bool:
    """No per-job option is given: every column comes from the kind."""
    return (
        spec.queue is None
        and spec.priority is None
        and spec.run_at is None
        and spec.delay is None
        and spec.max_attempts is None
        and spec.backoff is None
        and spec.max_deferrals is None
        and spec.name is None
        and spec.dedup_key is None
        and spec.group_key is None
        and spec.tenant is None
        and spec.metadata is None
        and spec.job_key is None
        and spec.keep_completed is None
        and spec.keep_dead is None
        and not spec.events
        and not spec.lifo
        and spec.dedup_ttl is None
        and not spec.dedup_extend
        and not spec.dedup_replace
        and not spec.dedup_keep_last
    )


def _name(value: Any) -> str:
    return validation.text("name", value, optional=False) or ""


def _names(names: list[Any]) -> list[str]:
    """A batch's names, each checked; a bulk usually repeats a few, checked once each."""
    if all(type(name) is str for name in names):
        for name in set(names):
            _name(name)
        return names
    return [_name(name) for name in names]


def _backoff_text(value: Any) -> str:
    """The stored JSON of a backoff policy (``Backoff.stored_json``); a Backoff object's is
    computed once."""
    if isinstance(value, Backoff):
        return _backoff_json(value)
    return jsonvalue.dumps(validation.backoff(value).stored_json())


@functools.lru_cache(maxsize=256)
def _backoff_json(value: Backoff) -> str:
    return jsonvalue.dumps(value.stored_json())


def _dedup_hold(spec: JobSpec, dedup_key: str | None) -> DedupHold | None:
    for flag in ("dedup_replace", "dedup_keep_last"):
        if getattr(spec, flag) and dedup_key is None:
            raise InvalidOption(flag, "needs a dedup_key")
    if spec.dedup_ttl is None:
        if spec.dedup_extend:
            raise InvalidOption("dedup_extend", "needs dedup_ttl (a time-bound key)")
        return None
    if spec.dedup_keep_last:
        raise InvalidOption(
            "dedup_keep_last", "holds the key until the holder finishes: give no dedup_ttl"
        )
    if dedup_key is None:
        raise InvalidOption("dedup_ttl", "needs a dedup_key")
    ttl = validation.delay_seconds(spec.dedup_ttl, "dedup_ttl")
    if not ttl:
        raise InvalidOption("dedup_ttl", f"must be > 0 seconds, got {spec.dedup_ttl!r}")
    return DedupHold(dedup_key, ttl, bool(spec.dedup_extend), bool(spec.dedup_replace))


def row_args(job: PreparedJob) -> tuple[Any, ...]:
    return (
        job.queue,
        job.kind,
        job.name,
        job.payload,
        job.priority,
        job.run_at,
        job.delay,
        job.max_attempts,
        job.max_deferrals,
        job.backoff,
        job.dedup_key,
        job.group_key,
        job.tenant,
        job.metadata,
        job.job_key,
        job.retention,
        job.flow_id,
        job.pending_deps,
        job.record_events,
    )


_encode_scalars = json.JSONEncoder(separators=(",", ":")).encode


def jobs_document(jobs: Iterable[PreparedJob]) -> str:
    """The JSON document from which the batch statements read their jobs (sql/fragments.sql,
    unnested_jobs): an array per job, its plain columns first, then its JSON columns spliced in
    as the JSON text they already are (payload, backoff, metadata, retention). Every value was
    validated when the job was prepared (no NUL, no lone surrogate, finite numbers), so the
    document is valid JSON; non-ASCII is escaped, which jsonb reads back unchanged."""
    rows = []
    for job in jobs:
        run_at = job.run_at
        scalars = _encode_scalars(
            [
                job.queue,
                job.kind,
                job.name,
                job.priority,
                None if run_at is None else run_at.astimezone(UTC).isoformat(),
                job.delay,
                job.max_attempts,
                job.max_deferrals,
                job.dedup_key,
                job.group_key,
                job.tenant,
                job.job_key,
                job.flow_id,
                job.pending_deps,
                job.record_events,
            ]
        )
        metadata = "null" if job.metadata is None else job.metadata
        retention = "null" if job.retention is None else job.retention
        rows.append(f"{scalars[:-1]},{job.payload},{job.backoff},{metadata},{retention}]")
    return "[" + ",".join(rows) + "]"


def _shared_args(job: PreparedJob) -> tuple[Any, ...]:
    """The columns enqueue_uniform binds once for a whole batch."""
    return (
        job.queue,
        job.kind,
        job.priority,
        job.run_at,
        job.delay,
        job.max_attempts,
        job.max_deferrals,
        job.backoff,
        job.group_key,
        job.tenant,
        job.metadata,
        job.retention,
        job.record_events,
    )


def _uniform(jobs: list[PreparedJob]) -> bool:
    """Every job has the first one's columns but name and payload, and none can conflict or
    belongs to a flow (enqueue_uniform's case)."""
    shared = _shared_args(jobs[0])
    for job in jobs:
        if job.job_key is not None or job.dedup_key is not None or job.one_by_one:
            return False
        if job.flow_id is not None or job.pending_deps or _shared_args(job) != shared:
            return False
    return True


def own_transaction(conn: Any) -> bool:
    """Whether a statement run on ``conn`` (None: a pool connection) is a transaction of its
    own, rather than part of a caller's: only then may it hand a job off, or notify a queue only
    where a worker or an event reader waits (sql/schema/wake.sql), since one that registers
    waits for such a statement's commit."""
    return conn is None or not conn.is_in_transaction()


async def insert_batch(
    db: Database, batch: PreparedBatch, conn: Any = None, commit: str | None = None
) -> list[EnqueueResult]:
    """Insert ``batch`` in one statement (no job of it can conflict); results in input order."""
    row = await db.fetchrow(
        "enqueue_uniform",
        batch.names,
        batch.payloads,
        *_shared_args(batch.template),
        notify_channel(db.schema),
        commit,
        own_transaction(conn),
        conn=conn,
    )
    assert row is not None
    return [EnqueueResult(job_id) for job_id in row["ids"]]


async def insert_one(
    db: Database, job: PreparedJob, conn: Any = None, commit: str | None = None
) -> EnqueueResult:
    """Insert ``job`` or return the in-flight holder of its dedup key (bounded race loop).
    ``commit``: the transaction's synchronous_commit (validation.commit_setting). Written in a
    transaction of its own (no ``conn``, or one outside a transaction), a job that could start
    at once may be handed to an idle worker (sql/schema/enqueue_job.sql); in a caller's
    transaction it never is: the worker would wait on that transaction, and the lease would
    run while it does."""
    if job.hold is not None:
        return await _insert_held(db, job, job.hold, conn, commit)
    if job.replace or job.keep_last:
        return await _insert_in_flight(db, job, conn, commit)
    args = (*row_args(job), notify_channel(db.schema), commit, own_transaction(conn))
    for _ in range(MAX_DEDUP_ROUNDS):
        row = await db.fetchrow("enqueue_one", *args, conn=conn)
        assert row is not None
        if row["id"] is not None:
            return EnqueueResult(row["id"], row["duplicate"])
    # Only an in-flight dedup key can be released between the conflict and the read.
    raise DedupRaceError(job.queue, job.dedup_key or job.job_key or "", MAX_DEDUP_ROUNDS)


async def insert_many(
    db: Database, jobs: list[PreparedJob], conn: Any = None, commit: str | None = None
) -> list[EnqueueResult]:
    """Insert ``jobs`` in one statement; results are in input order.

    A dedup key repeated inside the batch keeps its first job; later ones report it as their
    duplicate. A key held by a job already in the table is resolved like ``insert_one``. Jobs
    with a time-bound key, or that replace or keep duplicates, are decided one by one, in the
    same transaction.
    """
    if not jobs:
        return []
    if any(job.one_by_one for job in jobs):
        if conn is None:
            async with db.transaction() as own:
                return await insert_many(db, jobs, own, commit)
        plain = [job for job in jobs if not job.one_by_one]
        plain_results = iter(await insert_many(db, plain, conn, commit))
        return [
            next(plain_results) if not job.one_by_one else await insert_one(db, job, conn, commit)
            for job in jobs
        ]
    if len(jobs) > 1 and _uniform(jobs):
        batch = PreparedBatch(
            jobs[0],
            _one_if_same([job.name for job in jobs]),
            "[" + ",".join(job.payload for job in jobs) + "]",
        )
        return await insert_batch(db, batch, conn, commit)
    first_of_key: dict[tuple[str, tuple[str, str, str]], int] = {}
    unique: list[PreparedJob] = []
    position: list[int] = []  # input index -> index in `unique`
    for job in jobs:
        identities = [
            (label, identity)
            for label, identity in (("key", job.key_identity()), ("dedup", job.dedup_identity()))
            if identity is not None
        ]
        earlier = next((first_of_key[i] for i in identities if i in first_of_key), None)
        if earlier is not None:
            position.append(earlier)
            continue
        for identity in identities:
            first_of_key[identity] = len(unique)
        position.append(len(unique))
        unique.append(job)

    written: list[EnqueueResult] = []
    if len(unique) == 1:
        # One row: the single-row statement is cheaper than unnesting arrays of one.
        written.append(await insert_one(db, unique[0], conn, commit))
    else:
        rows = await db.fetch(
            "enqueue_many",
            jobs_document(unique),
            notify_channel(db.schema),
            commit,
            own_transaction(conn),
            conn=conn,
        )
        for job, row in zip(unique, rows, strict=True):
            if row["inserted"]:
                written.append(EnqueueResult(row["id"]))
            else:
                written.append(await insert_one(db, job, conn, commit))
    results = []
    seen: set[int] = set()
    for index in position:
        result = written[index]
        results.append(result if index not in seen else EnqueueResult(result.id, duplicate=True))
        seen.add(index)
    return results


async def _insert_held(
    db: Database, job: PreparedJob, hold: DedupHold, conn: Any, commit: str | None
) -> EnqueueResult:
    """Time-bound dedup, decided under the key's row lock in one transaction: a running hold
    drops the job (extending the hold, or replacing a still-delayed holder, if asked)."""
    if conn is None:
        async with db.transaction() as own:
            return await _insert_held(db, job, hold, own, commit)
    key = (job.queue, job.tenant, hold.key)
    async with conn.transaction():
        current = await db.fetchrow("lock_dedup_hold", *key, conn=conn)
        assert current is not None
        removed = None
        if current["held"]:
            holder = current["job_id"]
            if hold.replace and holder is not None:
                removed = await db.fetchrow("remove_delayed_holder", holder, conn=conn)
            if removed is None:
                if hold.extend:
                    await db.fetch("extend_dedup_hold", *key, hold.ttl, conn=conn)
                return EnqueueResult(holder, duplicate=True)
        result = await insert_one(db, replace(job, hold=None), conn, commit)
        if result.duplicate:
            return result
        if removed is not None and not hold.extend:
            # the replacing job takes the hold until its expiry (BullMQ's SET KEEPTTL)
            await db.fetch("take_dedup_hold", *key, result.id, conn=conn)
        else:
            await db.fetch("set_dedup_hold", *key, result.id, hold.ttl, conn=conn)
        if removed is None:
            return result
        return EnqueueResult(result.id, replaced=removed["id"], replaced_key=removed["job_key"])


async def _insert_in_flight(
    db: Database, job: PreparedJob, conn: Any, commit: str | None
) -> EnqueueResult:
    """An in-flight dedup key whose duplicate replaces a delayed holder (``replace``) or is kept
    to follow a running one (``keep_last``), decided in one transaction: the holder is read
    first (a job holding the job key wins, as a duplicate), then removed (only while it has
    not started) or has the job kept (only while it runs, its row locked against its finish:
    keep_next_job), and the job is inserted when the key is free. A holder that moved on
    meanwhile is looked for again, a bounded number of times."""
    if conn is None:
        async with db.transaction() as own:
            return await _insert_in_flight(db, job, own, commit)
    plain = replace(job, replace=False, keep_last=False)
    key = (job.queue, job.dedup_key, job.tenant)
    async with conn.transaction():
        removed = None
        for _ in range(MAX_DEDUP_ROUNDS):
            holder = await db.fetchrow(
                "key_holder_of", job.queue, job.tenant, job.job_key, job.dedup_key, conn=conn
            )
            if holder is not None:
                if job.job_key is not None and holder["job_key"] == job.job_key:
                    return EnqueueResult(holder["id"], duplicate=True)
                if job.replace:
                    removed = await db.fetchrow(
                        "remove_delayed_dedup_holder", holder["id"], *key, conn=conn
                    )
                if removed is None:
                    if job.keep_last:
                        kept = await db.fetchval(
                            "keep_next_job",
                            holder["id"],
                            job.queue,
                            job.tenant,
                            job.dedup_key,
                            *_kept_args(job),
                            conn=conn,
                        )
                        if kept is not None:
                            return EnqueueResult(holder["id"], duplicate=True, kept=True)
                        if holder["status"] == "running":
                            continue  # it finished meanwhile: look again
                    return EnqueueResult(holder["id"], duplicate=True)
            result = await insert_one(db, plain, conn, commit)
            if result.duplicate:
                continue  # a holder committed meanwhile: look again
            if removed is None:
                return result
            return EnqueueResult(result.id, replaced=removed["id"], replaced_key=removed["job_key"])
    raise DedupRaceError(job.queue, job.dedup_key or "", MAX_DEDUP_ROUNDS)


def _kept_args(job: PreparedJob) -> tuple[Any, ...]:
    """keep_next_job's $5..$18: the columns of the job to enqueue later."""
    return (
        job.kind,
        job.name,
        job.payload,
        job.priority,
        job.run_at,
        job.delay,
        job.max_attempts,
        job.max_deferrals,
        job.backoff,
        job.group_key,
        job.metadata,
        job.job_key,
        job.retention,
        job.record_events,
    )


async def record_kinds(db: Database, kinds: Iterable[Kind[Any]]) -> None:
    """Record ``kinds`` and the defaults their jobs take (table kinds), so that SQL can enqueue
    them as Python does (``{schema}.enqueue``, sql/schema/sql_enqueue.sql)."""
    document = json.dumps(
        [
            {
                "name": kind.name,
                "queue": kind.queue,
                "priority": kind.priority,
                "max_attempts": kind.max_attempts,
                "max_deferrals": kind.max_deferrals,
                "backoff": json.loads(kind.backoff_json),
                "retention": None
                if kind.retention_json is None
                else json.loads(kind.retention_json),
                "names_jobs": kind.job_name is not None,
                "groups_jobs": kind.group_key is not None,
            }
            for kind in kinds
        ]
    )
    await db.fetch("record_kinds", document)
