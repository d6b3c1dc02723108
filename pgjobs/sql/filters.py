"""Turn a JobFilter or a FlowFilter into a parameterised WHERE clause. Values are always bind
parameters; only the fixed column templates and status predicates below enter the SQL text."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pgjobs import validation
from pgjobs.errors import InvalidOption
from pgjobs.models import SUB_STATE_STATUS, FlowFilter, JobFilter, Status, SubState

OUTCOMES = ("running", "failed", "completed_with_failures", "completed")


def escape_like(prefix: str) -> str:
    """``prefix`` as a LIKE pattern that matches it literally, followed by anything."""
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _many(value: Any) -> list[Any]:
    return list(value) if isinstance(value, tuple | list | set | frozenset) else [value]


def _members(option: str, choices: list[str], value: Any) -> list[str]:
    values = _many(value)
    unknown = [v for v in values if v not in choices]
    if unknown or not values:
        raise InvalidOption(option, f"must be among {choices}, got {value!r}")
    return [str(v) for v in values]


def _statuses(value: Any) -> list[str]:
    return _members("status", [s.value for s in Status], value)


def _outcomes(value: Any) -> list[str]:
    return _members("outcome", list(OUTCOMES), value)


def _text(option: str, max_bytes: int = validation.MAX_LABEL_BYTES) -> Callable[[Any], Any]:
    return lambda v: validation.text(option, v, max_bytes=max_bytes)


def _time(option: str) -> Callable[[Any], Any]:
    return lambda v: validation.timestamp(option, v)


def _int(option: str, low: int, high: int) -> Callable[[Any], Any]:
    return lambda v: validation.integer(option, v, low, high)


def _payload_equals(value: Any) -> str:
    """``(path, value)`` as the one JSON parameter of the payload_equals template."""
    from pgjobs import jsonvalue

    if not isinstance(value, tuple | list) or len(value) != 2 or not isinstance(value[0], str):
        raise InvalidOption("payload_equals", f"must be (dotted path, JSON value), got {value!r}")
    path, wanted = value
    segments = path.split(".")
    if not path or any(not segment for segment in segments):
        raise InvalidOption("payload_equals", f"path must be like 'user.id', got {path!r}")
    try:
        return jsonvalue.dumps({"path": segments, "value": wanted})
    except jsonvalue.NotJson as exc:
        raise InvalidOption("payload_equals", f"value is not JSON: {exc}") from None


# A status filter is written as fixed SQL, one predicate per status, each the predicate of a
# partial index that holds such jobs (fragments.sql, in_flight; jobs_finished_idx for the
# finished ones): the planner then reads those indexes, in a plan made once for every call of
# the statement too (asyncpg keeps it prepared, and a plan made without the statuses could not
# use a partial index). Only these constant texts enter the SQL; the filter's value picks them.
# 'pending' and 'running' together are fragments.sql's in_flight.
STATUS_PREDICATES: dict[str, str] = {
    Status.PENDING.value: (
        "({a}.status = 'pending' AND ({a}.pending_deps = 0 OR NOT {a}.waits))"
        " OR ({a}.status = 'pending' AND {a}.pending_deps > 0 AND {a}.waits)"
    ),
    Status.RUNNING.value: "{a}.status = 'running'",
    **{
        status.value: f"({{a}}.finished_at IS NOT NULL AND {{a}}.status = '{status.value}')"
        for status in (Status.COMPLETED, Status.DEAD, Status.CANCELLED)
    },
}


def status_predicate(statuses: list[str], alias: str) -> str:
    """The fixed SQL matching any of ``statuses`` (validated Status values) over ``alias``."""
    return "(" + " OR ".join(STATUS_PREDICATES[s].format(a=alias) for s in sorted(statuses)) + ")"


# field -> (SQL template over {a} = alias and {p} = placeholder, validator of the value)
_JOB_RULES: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "queue": ("{a}.queue = {p}::text", validation.queue),
    "kind": ("{a}.kind = {p}::text", _text("kind")),
    "flow_id": ("{a}.flow_id = {p}::bigint", _int("flow_id", 1, 2**63 - 1)),
    "group_key": ("{a}.group_key = {p}::text", _text("group_key")),
    "dedup_key": ("{a}.dedup_key = {p}::text", _text("dedup_key")),
    "tenant": ("{a}.tenant = {p}::text", _text("tenant", 256)),
    "name_prefix": ("{a}.name LIKE {p}::text", lambda v: escape_like(_text("name_prefix")(v))),
    "min_deferrals": ("{a}.deferrals >= {p}::int", _int("min_deferrals", 0, 2**31 - 1)),
    "created_after": ("{a}.created_at >= {p}::timestamptz", _time("created_after")),
    "created_before": ("{a}.created_at < {p}::timestamptz", _time("created_before")),
    "finished_after": ("{a}.finished_at >= {p}::timestamptz", _time("finished_after")),
    "finished_before": ("{a}.finished_at < {p}::timestamptz", _time("finished_before")),
    "history_since": (
        "({a}.finished_at IS NULL OR {a}.finished_at >= {p}::timestamptz)",
        _time("history_since"),
    ),
    "priority": ("{a}.priority = {p}::int", validation.priority),
    "min_priority": ("{a}.priority >= {p}::int", validation.priority),
    "max_priority": ("{a}.priority <= {p}::int", validation.priority),
    "job_key": ("{a}.job_key = {p}::text", _text("job_key")),
    "ids": ("{a}.id = ANY({p}::bigint[])", lambda v: [_int("ids", 1, 2**63 - 1)(i) for i in v]),
    # keyset paging: list_jobs(oldest_first=True) with after_id = the last id of the page read
    "after_id": ("{a}.id > {p}::bigint", _int("after_id", 0, 2**63 - 1)),
    "before_id": ("{a}.id < {p}::bigint", _int("before_id", 0, 2**63 - 1)),
    "payload_equals": (
        "{a}.payload #> ARRAY(SELECT jsonb_array_elements_text({p}::jsonb -> 'path'))"
        " = {p}::jsonb -> 'value'",
        _payload_equals,
    ),
}

# Flow summaries (alias f, see tracking.sql list_flows); {s} is the schema.
_FLOW_RULES: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "queue": (
        "EXISTS (SELECT FROM {s}.jobs j WHERE j.flow_id = f.flow_id AND j.queue = {p}::text)",
        validation.queue,
    ),
    "outcome": ("f.outcome = ANY({p}::text[])", _outcomes),
    "name_prefix": _JOB_RULES["name_prefix"],
    "created_after": _JOB_RULES["created_after"],
    "created_before": _JOB_RULES["created_before"],
    "tenant": _JOB_RULES["tenant"],
}


class _Clauses:
    def __init__(self, first_param: int, alias: str, schema: str | None) -> None:
        self.first_param = first_param
        self.alias = alias
        self.schema = schema
        self.sql: list[str] = []
        self.params: list[Any] = []

    def add(self, template: str, value: Any) -> None:
        self.params.append(value)
        placeholder = f"${self.first_param + len(self.params) - 1}"
        self.sql.append(template.format(a=self.alias, p=placeholder, s=self.schema))

    def apply(self, rules: dict[str, tuple[str, Callable[[Any], Any]]], source: Any) -> None:
        for field, (template, check) in rules.items():
            value = getattr(source, field)
            if value is not None:
                self.add(template, check(value))

    def result(self) -> tuple[str, list[Any]]:
        return (" AND ".join(self.sql) or "true"), self.params


def where(
    f: JobFilter, first_param: int = 1, alias: str = "j", schema: str | None = None
) -> tuple[str, list[Any]]:
    """``(sql, params)``: a boolean expression over ``alias`` using $first_param...
    ``schema`` is needed (to call its sub_state function) when the filter has a sub_state."""
    clauses = _Clauses(first_param, alias, schema)
    if f.status is not None:
        clauses.sql.append(status_predicate(_statuses(f.status), alias))
    clauses.apply(_JOB_RULES, f)
    if f.pending_run is not None:
        if schema is None:
            raise InvalidOption("pending_run", "is not supported by this operation")
        if not isinstance(f.pending_run, bool):
            raise InvalidOption("pending_run", f"must be True or False, got {f.pending_run!r}")
        # A hashed subplan: the schedules' pending runs are read once per statement.
        clauses.add(
            "({a}.id IN (SELECT sc.pending_job_id FROM {s}.schedules sc"
            " WHERE sc.pending_job_id IS NOT NULL)) = {p}::bool",
            f.pending_run,
        )
    if f.sub_state is not None:
        if schema is None:
            raise InvalidOption("sub_state", "is not supported by this operation")
        states = [
            SubState(v) for v in _members("sub_state", [s.value for s in SubState], f.sub_state)
        ]
        # The status it implies first, so the partial indexes stay usable.
        clauses.sql.append(
            status_predicate(sorted({SUB_STATE_STATUS[s].value for s in states}), alias)
        )
        if not all(s in _ONE_STATUS for s in states):  # else the status says it all
            clauses.add(
                "{s}.sub_state({a}.status, {a}.pending_deps, {a}.waits, {a}.run_at, {a}.attempts)"
                " = ANY({p}::text[])",
                [s.value for s in states],
            )
    return clauses.result()


_ONE_STATUS = frozenset({SubState.ACTIVE, SubState.COMPLETED, SubState.FAILED, SubState.CANCELLED})
"""Sub-states that are exactly one status (running, completed, dead, cancelled): a filter on
them is its status predicate alone, which the planner estimates and the indexes serve."""


def flow_where(f: FlowFilter, first_param: int, schema: str) -> tuple[str, list[Any]]:
    """``(sql, params)`` over a flow summary ``f`` (see tracking.sql, list_flows)."""
    clauses = _Clauses(first_param, "f", schema)
    clauses.apply(_FLOW_RULES, f)
    return clauses.result()
