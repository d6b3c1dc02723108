"""BullMQ job options <-> engine enqueue options, and the value mappings both ways. Pure.

Every BullMQ option is checked here, in BullMQ's names and units (milliseconds, BullMQ
priorities), so that an error names what the caller wrote, never the engine field it maps to.
"""

from __future__ import annotations

import base64
import json
import math
from datetime import UTC, datetime
from typing import Any

from pgjobs import MAX_QUEUE_BYTES as ENGINE_MAX_QUEUE_BYTES
from pgjobs import (
    Backoff,
    Durability,
    EdgePolicy,
    InvalidOption,
    JobRow,
    JsonText,
    Keep,
    Registry,
    Status,
    SubState,
    jsonb_problem,
    jsonb_safe,
    validate_text,
)

MAX_BULLMQ_PRIORITY = 2_097_151  # 2**21 - 1, as Node validates (the Python docstring says 2**21)
NO_PRIORITY = 10  # engine priority of a job without one: ahead of every prioritized job
KIND = "bullmq"
"""The engine job kind of every facade job (the BullMQ name is the job's name)."""
MAX_DELAY_MS = 100 * 365 * 24 * 3600 * 1000  # the engine's bound (a century), in BullMQ's unit
MAX_ATTEMPTS = 1_000_000
MAX_ID_BYTES = 1024
MAX_QUEUE_BYTES = ENGINE_MAX_QUEUE_BYTES  # the engine's: prefix, ':' and name together
_COMPACT = json.JSONEncoder(separators=(",", ":"), allow_nan=False)
"""``json.dumps(value, separators=(",", ":"), allow_nan=False)`` without building an encoder
per call (a flow or a bulk encodes each job's data)."""


def _text(option: str, value: Any, max_bytes: int = MAX_ID_BYTES) -> str:
    """A BullMQ string option (jobId, deduplication id, names) the engine can index; BullMQ
    stringifies what it is given."""
    text = validate_text(
        option, value if isinstance(value, str) else str(value), max_bytes=max_bytes
    )
    assert text is not None
    return text


def facade_registry() -> Registry:
    """An engine Registry that knows the facade's job kind: what code writing facade jobs
    through the engine (an import, a transactional enqueue of your own) hands to JobQueue."""
    registry = Registry()
    registry.declare(KIND, input=Any, **kind_defaults())
    return registry


def kind_defaults() -> dict[str, Any]:
    """The facade kind's defaults: what ``Queue.add(name, data)`` without opts gives a job (no
    priority, one attempt, no backoff), so that a job enqueued from SQL with the kind alone
    is the same job (docs/porting.md, "Adding jobs from SQL")."""
    return {"priority": NO_PRIORITY, "max_attempts": 1, "backoff": NO_BACKOFF}


DIALECT = "bullmq"
"""The dialect the facade records for its queues (``JobQueue.describe_queue``): the dashboard
shows them by their BullMQ name, in BullMQ's states and words."""


def engine_queue(prefix: str, name: str) -> str:
    """The engine queue of BullMQ queue ``name`` under ``prefix``: ``<prefix>:<name>``, the
    qualifiedName. A name cannot contain ':' (BullMQ for Node refuses it too), so the mapping is
    one to one and queues with different prefixes never see each other's jobs."""
    if not isinstance(name, str):
        raise InvalidOption("name", f"must be a string, got {type(name).__name__}")
    if ":" in name:
        raise InvalidOption("name", f"Queue name cannot contain : (got {name!r})")
    if not isinstance(prefix, str) or not prefix:
        raise InvalidOption("prefix", f"must be a non-empty string, got {prefix!r}")
    return _text("name", f"{prefix}:{name}", MAX_QUEUE_BYTES)


def json_data(value: Any, option: str = "data") -> Any:
    """``value`` as BullMQ stores it: what ``json.loads(json.dumps(value))`` gives back. Raises
    what ``json.dumps`` raises for a value BullMQ's client refuses (TypeError for a set, bytes,
    a Decimal, a datetime...; ValueError for NaN and infinities), with Python's own message.
    A plain scalar (None, a bool, an int, a str, a finite float: exactly these types) comes
    back as it is, which is what that round trip gives: no encoding for a processor's usual
    return value."""
    kind = type(value)
    if kind in _SELF_JSON or (kind is float and math.isfinite(value)):
        return value
    return json.loads(_COMPACT.encode(value))


_SELF_JSON = frozenset({type(None), bool, int, str})
"""Types whose values a JSON round trip gives back unchanged (exact types: a subclass, an
IntEnum say, comes back as its base type, so it takes the round trip)."""


def stored_data(value: Any) -> tuple[Any, str | None]:
    """``value`` as BullMQ stores it (``json_data``), as the engine stores it: its JSON text
    (``JsonText``, stored as it is), or, when jsonb cannot hold it (a NUL, a lone surrogate:
    BullMQ stores any JSON text), a jsonb-safe copy plus the exact JSON (base64 of its UTF-8)
    for ``metadata.bullmq.raw_data``. One serialisation (``_jsonb_holds`` says when it is
    parsed again)."""
    text = _COMPACT.encode(value)  # ASCII, as BullMQ's
    if _jsonb_holds(text):
        return JsonText(text), None
    return jsonb_safe(json.loads(text)), base64.b64encode(text.encode()).decode()


def _jsonb_holds(text: str) -> bool:
    """Whether jsonb stores the ASCII JSON ``text`` as it is: only text holding a ``\\u0000``
    or ``\\ud…`` escape is parsed to look closer (escapes of valid surrogate pairs pass)."""
    return ("\\u0000" not in text and "\\ud" not in text) or jsonb_problem(json.loads(text)) is None


def stored_data_array(values: list[Any]) -> JsonText | None:
    """The ``stored_data`` of each value as one JSON array text (one serialisation for a whole
    bulk), or None when some value needs more than its JSON text (or is not JSON at all):
    then each goes through ``stored_data``, which keeps or refuses it as for a single add."""
    try:
        text = _COMPACT.encode(values)
    except (TypeError, ValueError):
        return None
    return JsonText(text) if _jsonb_holds(text) else None


def node_data(value: Any) -> Any:
    """A flow node's data for the engine: ``stored_data``'s JSON text when jsonb holds it as
    it is, else ``json_data`` (flows keep no exact copy: the engine makes of it what it makes
    of any value)."""
    payload, raw = stored_data(value)
    return payload if raw is None else json_data(value)


def exact_data(payload: Any, metadata: Any) -> Any:
    """A job's data as BullMQ holds it: the payload, or the exact JSON kept beside it when the
    payload is its jsonb-safe copy (the raw copy is ignored once the payload was replaced)."""
    bullmq = metadata.get("bullmq") if isinstance(metadata, dict) else None
    raw = bullmq.get("raw_data") if isinstance(bullmq, dict) else None
    if not isinstance(raw, str):
        return payload
    try:
        exact = json.loads(base64.b64decode(raw).decode("utf-8"))
    except ValueError:  # not UTF-8 JSON (binascii.Error and UnicodeDecodeError included)
        return payload
    return exact if jsonb_safe(exact) == payload else payload


def deferred_failure(metadata: Any) -> str | None:
    """The deferred failure BullMQ recorded on a parent (``defa``) and the migration kept."""
    bullmq = metadata.get("bullmq") if isinstance(metadata, dict) else None
    reason = bullmq.get("deferred_failure") if isinstance(bullmq, dict) else None
    return reason if isinstance(reason, str) else None


def to_engine_priority(priority: Any) -> int:
    """BullMQ runs lower values first and a job without priority before all of them."""
    if priority in (None, 0):
        return NO_PRIORITY
    if (
        isinstance(priority, bool)
        or not isinstance(priority, int)
        or not 0 <= priority <= MAX_BULLMQ_PRIORITY
    ):
        raise InvalidOption(
            "priority", f"must be an integer from 0 to {MAX_BULLMQ_PRIORITY}, got {priority!r}"
        )
    return NO_PRIORITY - priority


def to_bullmq_priority(engine_priority: int) -> int:
    return 0 if engine_priority == NO_PRIORITY else NO_PRIORITY - engine_priority


def _count(option: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 1_000_000_000:
        raise InvalidOption(option, f"must be a whole number of jobs >= 0, got {value!r}")
    return value


def event_count(option: str, value: Any) -> int:
    """A number of events (a log length), refused by ``option``'s name unless a whole number
    >= 0."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidOption(option, f"must be a whole number of events >= 0, got {value!r}")
    return value


def events_max_len(opts: dict[str, Any]) -> int:
    """The ``streams.events.maxLen`` option of a Queue or Worker (default 10,000, BullMQ's):
    about how many events its queue's log keeps; 0 records none."""
    events = (opts.get("streams") or {}).get("events") or {}
    return event_count("streams.events.maxLen", events.get("maxLen", 10_000))


def _keep(option: str, value: Any) -> Keep | None:
    """removeOnComplete / removeOnFail: true (remove at once), a count to keep, {age (seconds),
    count}; false or absent keeps every job."""
    if value is None or value is False:
        return None
    if value is True:
        return Keep(count=0)
    if isinstance(value, int):
        return Keep(count=_count(option, value))
    if isinstance(value, dict):
        unknown = set(value) - {"age", "count", "limit"}
        if unknown:
            raise InvalidOption(option, f"unknown keys {sorted(unknown)} (use age, count)")
        count = value.get("count")
        age = value.get("age")
        if age is not None and (
            isinstance(age, bool)
            or not isinstance(age, int | float)
            or not math.isfinite(age)
            or age < 0
        ):
            raise InvalidOption(f"{option}.age", f"must be a number of seconds >= 0, got {age!r}")
        return Keep(
            count=None if count is None else _count(f"{option}.count", count),
            age=None if age is None else float(age),
        )
    raise InvalidOption(option, f"must be a bool, a count or {{age, count}}, got {value!r}")


def keep_rule(option: str, value: Any) -> Keep | None:
    """The engine retention of ``removeOnComplete`` / ``removeOnFail`` ``value`` (None: keep
    every job), as a Worker's own option gives it to the jobs added without one."""
    return _keep(option, value)


def milliseconds(option: str, value: Any) -> float:
    """A BullMQ duration: milliseconds from 0 to a century."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not 0 <= value <= MAX_DELAY_MS
    ):
        raise InvalidOption(
            option, f"must be milliseconds from 0 to {MAX_DELAY_MS} (a century), got {value!r}"
        )
    return float(value)


NO_BACKOFF = Backoff.fixed(0.0)
"""A job added without ``backoff`` is retried at once, as BullMQ retries it (not after the
engine's default backoff)."""


def _backoff(value: Any) -> Backoff | None:
    if value is None:
        return NO_BACKOFF
    if isinstance(value, int | float) and not isinstance(value, bool):
        return Backoff.fixed(milliseconds("backoff", value) / 1000)
    if isinstance(value, dict):
        kind = value.get("type", "fixed")
        if not isinstance(kind, str) or not kind:
            raise InvalidOption("backoff.type", f"must be a strategy name, got {kind!r}")
        if kind not in ("fixed", "exponential"):
            return None  # custom: the worker's settings.backoffStrategy decides each delay
        delay = milliseconds("backoff.delay", value.get("delay", 0)) / 1000
        jitter = value.get("jitter", 0)
        if isinstance(jitter, bool) or not isinstance(jitter, int | float) or not 0 <= jitter <= 1:
            raise InvalidOption("backoff.jitter", f"must be between 0 and 1, got {jitter!r}")
        return Backoff("fixed" if kind == "fixed" else "exponential", delay, None, float(jitter))
    raise InvalidOption("backoff", f"must be milliseconds or {{type, delay}}, got {value!r}")


# A child's failure option -> the engine edge policy (none of them: block, BullMQ's default).
# failParentOnFailure defers the parent's failure to its queue's worker, which fails it unrun
# (BullMQ's deferred failure, moveToFinished's handleChildFailureAndMoveParentToWait).
FAILURE_OPTIONS = {
    "failParentOnFailure": EdgePolicy.CASCADE_DEFERRED,
    "ignoreDependencyOnFailure": EdgePolicy.IGNORE,
    "removeDependencyOnFailure": EdgePolicy.IGNORE,
    "continueParentOnFailure": EdgePolicy.CONTINUE,
}


EXCLUSIVE_FAILURE_OPTIONS = (
    "removeDependencyOnFailure",
    "failParentOnFailure",
    "continueParentOnFailure",
    "ignoreDependencyOnFailure",
)
"""The parent-failure options, in the order BullMQ's refusal of two of them names them."""


def check_failure_options(opts: dict[str, Any]) -> None:
    """Refuse two parent-failure options on one job, with BullMQ's message (a ValueError)."""
    chosen = [name for name in EXCLUSIVE_FAILURE_OPTIONS if opts.get(name)]
    if len(chosen) > 1:
        raise InvalidOption(
            chosen[1], f"The following options cannot be used together: {', '.join(chosen)}"
        )


def edge_policy(opts: dict[str, Any]) -> EdgePolicy:
    """The policy of a child's edge to its parent; the four options are mutually exclusive."""
    check_failure_options(opts)
    chosen = [name for name in FAILURE_OPTIONS if opts.get(name)]
    return FAILURE_OPTIONS[chosen[0]] if chosen else EdgePolicy.BLOCK


_UNSUPPORTED = {
    "repeat": "`repeat` was removed in BullMQ v5: use queue.upsertJobScheduler(...)",
    "debounce": "`debounce` was removed in BullMQ v5: use deduplication {id, ttl, extend, replace}",
}


def _deduplication(value: Any) -> dict[str, Any]:
    """``{id}``: held while in flight; ``{id, ttl}``: held ttl ms (throttle); ``extend``: each
    duplicate restarts the ttl; ``replace``: a duplicate replaces a still-delayed holder;
    ``keepLastIfActive``: held until the holder finishes (a ttl is then ignored, as BullMQ
    ignores it), a duplicate arriving while the holder runs kept, the latest only, and added
    when the holder finishes."""
    if value is None:
        return {"dedup_key": None}
    if not isinstance(value, dict) or value.get("id") in (None, ""):
        raise InvalidOption("deduplication", f"must be a dict with an 'id', got {value!r}")
    unknown = set(value) - {"id", "ttl", "extend", "replace", "keepLastIfActive"}
    if unknown:
        raise InvalidOption("deduplication", f"unknown keys {sorted(unknown)}")
    key = _text("deduplication.id", value["id"])
    ttl = value.get("ttl")
    if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, int | float) or ttl <= 0):
        raise InvalidOption("deduplication.ttl", f"must be milliseconds > 0, got {ttl!r}")
    if value.get("keepLastIfActive"):
        return {
            "dedup_key": key,
            "dedup_keep_last": True,
            "dedup_replace": bool(value.get("replace")),
        }
    if ttl is None:  # BullMQ ignores extend without a ttl
        return {"dedup_key": key, "dedup_replace": bool(value.get("replace"))}
    return {
        "dedup_key": key,
        "dedup_ttl": ttl / 1000,
        "dedup_extend": bool(value.get("extend")),
        "dedup_replace": bool(value.get("replace")),
    }


def options_key(name: str, opts: dict[str, Any]) -> Any:
    """A hashable form of ``(name, opts)`` for remembering what ``enqueue_options`` made of
    them: dicts and lists by their items, each scalar with its type (``True == 1``, and
    ``attempts: True`` must still be refused after ``attempts: 1``); None when ``opts`` holds
    anything else (then nothing is remembered)."""
    try:
        return (name, _frozen(opts))
    except _NotFrozen:
        return None


class _NotFrozen(Exception):
    pass


def _frozen(value: Any) -> Any:
    if value is None or type(value) in (bool, int, float, str):
        return (type(value), value)
    if type(value) is dict:
        if not all(type(key) is str for key in value):
            raise _NotFrozen
        return (dict, tuple(sorted((key, _frozen(item)) for key, item in value.items())))
    if type(value) in (list, tuple):
        return (type(value), tuple(_frozen(item) for item in value))
    raise _NotFrozen


def enqueue_options(
    name: str, opts: dict[str, Any], prefix: str, queue_name: str, *, events: bool = True
) -> dict[str, Any]:
    """Engine enqueue options for ``Queue.add(name, data, opts)``. ``events``: log the job's
    transitions for ``QueueEvents`` (off when the queue's ``streams.events.maxLen`` is 0)."""
    for key, why in _UNSUPPORTED.items():
        if opts.get(key):
            raise InvalidOption(key, why)
    check_failure_options(opts)
    dedup = _deduplication(opts.get("deduplication"))
    delay = milliseconds("delay", opts.get("delay") or 0)
    attempts = opts.get("attempts") or 1
    if (
        isinstance(attempts, bool)
        or not isinstance(attempts, int)
        or not 1 <= attempts <= MAX_ATTEMPTS
    ):
        raise InvalidOption(
            "attempts", f"must be a whole number from 1 to {MAX_ATTEMPTS}, got {attempts!r}"
        )
    group_key, group_priority = job_group(opts.get("group"))
    if group_priority is not None and opts.get("priority"):
        raise InvalidOption(
            "group.priority", "a grouped job's priority is group.priority alone, not priority"
        )
    priority = to_engine_priority(group_priority if group_priority is not None
                                  else opts.get("priority"))  # fmt: skip
    # BullMQ ignores lifo for prioritized and delayed adds.
    lifo = bool(opts.get("lifo")) and priority == NO_PRIORITY and not delay
    job_id = opts.get("jobId")
    if job_id == "":
        job_id = None  # BullMQ's addJob scripts draw an automatic id for an empty jobId
    if job_id is not None:
        job_id = _text("jobId", job_id)
        if job_id.lstrip("-").isdigit():
            # BullMQ (Node) refuses these; here they would shadow automatic ids in getJob.
            raise InvalidOption("jobId", f"custom ids cannot be integers, got {job_id!r}")
    try:
        json.dumps(opts, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidOption("opts", f"must be JSON, as BullMQ stores them: {exc}") from None
    return {
        "queue": engine_queue(prefix, queue_name),
        "name": _text("name", name) if name else "__default__",
        "priority": priority,
        "delay": delay / 1000 if delay else None,
        "max_attempts": attempts,
        "backoff": _backoff(opts.get("backoff")),
        "max_deferrals": 0,
        "job_key": job_id,
        "group_key": group_key,
        **dedup,
        "keep_completed": _keep("removeOnComplete", opts.get("removeOnComplete")),
        "keep_dead": _keep("removeOnFail", opts.get("removeOnFail")),
        "metadata": {"opts": opts} if opts else None,  # none to keep: nothing to store
        "events": events,
        "lifo": lifo,
    }


def state_of(row: JobRow) -> str:
    """BullMQ's state name for a job (``Job.getState``). A job that has run, then got children
    and moved itself to delayed (``moveToDelayed`` or a retry's backoff) before waiting for
    them, is in BullMQ's delayed set: ``delayed``, where the engine's sub-state says it waits
    for its prerequisites (a flow's parent added with a delay has not run: waiting-children)."""
    if (
        row.sub_state is SubState.WAITING_CHILDREN
        and (row.attempts > 0 or row.deferrals > 0)
        and row.run_at > datetime.now(UTC)
    ):
        return "delayed"
    return bullmq_state(row.sub_state, row.priority)


def bullmq_state(sub: SubState, priority: int) -> str:
    """BullMQ's state name for an engine sub-state and priority (what ``getState`` says)."""
    if sub is SubState.READY:
        return "waiting" if priority == NO_PRIORITY else "prioritized"
    if sub in (SubState.DELAYED, SubState.RETRY):
        return "delayed"
    if sub is SubState.WAITING_CHILDREN:
        return "waiting-children"
    if sub is SubState.ACTIVE:
        return "active"
    if sub is SubState.COMPLETED:
        return "completed"
    return "failed"  # dead, and cancelled (BullMQ has no cancelled state)


def attempts_made(row: JobRow) -> int:
    """Finished attempts: the one running now does not count yet."""
    return row.attempts - (1 if row.status is Status.RUNNING else 0)


def durability(opts: dict[str, Any]) -> Durability | None:
    """The ``durability`` option of a Queue, Worker or FlowProducer: ``"durable"`` (every
    acknowledged add and outcome survives a server crash) or ``"async"`` (the last moments'
    may be lost, as Redis with ``appendfsync everysec``); None: the connection's default."""
    value = opts.get("durability")
    if value is None:
        return None
    try:
        return Durability(value)
    except ValueError:
        raise InvalidOption("durability", f"must be 'durable' or 'async', got {value!r}") from None


MAX_RATE_DURATION_MS = 366 * 86400 * 1000


def rate_limit(
    max_jobs: Any, duration: Any, options: tuple[str, str] = ("max", "duration")
) -> tuple[int, float]:
    """BullMQ's rate limit, ``max`` jobs per ``duration`` milliseconds, as the engine's (max
    starts, per seconds); ``options`` name the two in errors, as the caller's BullMQ code
    spells them (``limiter.max``, ``limiter.duration`` for a Worker's)."""
    if isinstance(max_jobs, float) and max_jobs.is_integer():
        max_jobs = int(max_jobs)
    if (
        isinstance(max_jobs, bool)
        or not isinstance(max_jobs, int)
        or not 1 <= max_jobs <= 1_000_000_000
    ):
        raise InvalidOption(options[0], f"must be a whole number of jobs >= 1, got {max_jobs!r}")
    if (
        isinstance(duration, bool)
        or not isinstance(duration, int | float)
        or not math.isfinite(duration)
        or not 0 < duration <= MAX_RATE_DURATION_MS
    ):
        raise InvalidOption(
            options[1], f"must be milliseconds > 0 (at most a year), got {duration!r}"
        )
    return max_jobs, duration / 1000


def job_group(value: Any) -> tuple[str | None, int | None]:
    """BullMQ Pro's job option ``group`` ``{id, priority, maxSize}`` as the engine's group key
    and the job's priority within its group (BullMQ's priority: 0 or none first, then 1, 2,
    ...); (None, None) without one. ``maxSize`` is checked here and enforced by ``Queue.add``
    (``group_max_size``)."""
    if value is None:
        return None, None
    if not isinstance(value, dict):
        raise InvalidOption("group", f"must be {{id, priority}}, got {value!r}")
    unknown = set(value) - {"id", "priority", "maxSize"}
    if unknown:
        raise InvalidOption("group", f"unknown keys {sorted(unknown)}")
    group_max_size(value)
    group_id = value.get("id")
    if not isinstance(group_id, str) or not group_id:
        raise InvalidOption(
            "group.id", f"must be a non-empty string (as in BullMQ Pro 3+), got {group_id!r}"
        )
    return _text("group.id", group_id), value.get("priority")


def group_max_size(group: Any) -> int | None:
    """The ``maxSize`` of a job's ``group`` option: the most jobs its group may hold when the
    job is added; None without one."""
    if not isinstance(group, dict) or group.get("maxSize") is None:
        return None
    size = group["maxSize"]
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise InvalidOption("group.maxSize", f"must be a whole number of jobs >= 1, got {size!r}")
    return size


def worker_group(opts: dict[str, Any]) -> tuple[int | None, tuple[int, float] | None]:
    """A Worker's BullMQ Pro option ``group`` ``{concurrency, limit: {max, duration}}`` as
    the engine's per-group cap and per-group rate limit (max starts, per seconds)."""
    group = opts.get("group")
    if not group:
        return None, None
    if not isinstance(group, dict) or set(group) - {"concurrency", "limit"}:
        raise InvalidOption("group", f"must be {{concurrency, limit}}, got {group!r}")
    cap = group.get("concurrency")
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
        raise InvalidOption("group.concurrency", f"must be a whole number >= 1, got {cap!r}")
    limit = group.get("limit")
    if not limit:
        return cap, None
    if not isinstance(limit, dict):
        raise InvalidOption("group.limit", f"must be {{max, duration}}, got {limit!r}")
    per_group = rate_limit(
        limit.get("max"), limit.get("duration"), ("group.limit.max", "group.limit.duration")
    )
    return cap, per_group


def worker_limiter(opts: dict[str, Any]) -> tuple[int, float] | None:
    """A Worker's ``limiter`` option ``{max, duration}`` as (max starts, per seconds); None
    without one."""
    limiter = opts.get("limiter")
    if not limiter:  # absent, None or {}: no limiter
        return None
    if not isinstance(limiter, dict):
        raise InvalidOption("limiter", f"must be {{max, duration}}, got {limiter!r}")
    return rate_limit(
        limiter.get("max"), limiter.get("duration"), ("limiter.max", "limiter.duration")
    )
