"""Turn a JobFilter into a parameterised WHERE clause. Values are always bind parameters;
only column names, fixed here, enter the SQL text."""

from __future__ import annotations

from typing import Any

from pgjobs import options
from pgjobs.errors import InvalidOption
from pgjobs.models import SUB_STATE_STATUS, FlowFilter, JobFilter, Status, SubState


def escape_like(prefix: str) -> str:
    """``prefix`` as a LIKE pattern that matches it literally, followed by anything."""
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _statuses(value: Any) -> list[str]:
    values = value if isinstance(value, tuple | list | set | frozenset) else (value,)
    try:
        return [Status(v).value for v in values]
    except ValueError:
        raise InvalidOption(
            "status", f"must be among {[s.value for s in Status]}, got {value!r}"
        ) from None


def _sub_states(value: Any) -> list[SubState]:
    values = value if isinstance(value, tuple | list | set | frozenset) else (value,)
    try:
        return [SubState(v) for v in values]
    except ValueError:
        raise InvalidOption(
            "sub_state", f"must be among {[s.value for s in SubState]}, got {value!r}"
        ) from None


def where(
    f: JobFilter, first_param: int = 1, alias: str = "j", schema: str | None = None
) -> tuple[str, list[Any]]:
    """``(sql, params)`` where sql is a boolean expression over ``alias`` using $first_param...
    ``schema`` is needed (to call its sub_state function) when the filter has a sub_state."""
    clauses: list[str] = []
    params: list[Any] = []

    def add(template: str, value: Any) -> None:
        params.append(value)
        clauses.append(template.format(a=alias, p=f"${first_param + len(params) - 1}"))

    if f.queue is not None:
        add("{a}.queue = {p}::text", options.queue(f.queue))
    if f.kind is not None:
        add("{a}.kind = {p}::text", options.text("kind", f.kind))
    if f.status is not None:
        add("{a}.status = ANY({p}::text[])", _statuses(f.status))
    if f.flow_id is not None:
        add("{a}.flow_id = {p}::bigint", options.integer("flow_id", f.flow_id, 1, 2**63 - 1))
    if f.group_key is not None:
        add("{a}.group_key = {p}::text", options.text("group_key", f.group_key))
    if f.dedup_key is not None:
        add("{a}.dedup_key = {p}::text", options.text("dedup_key", f.dedup_key))
    if f.tenant is not None:
        add("{a}.tenant = {p}::text", options.text("tenant", f.tenant, max_bytes=256))
    if f.name_prefix is not None:
        prefix = options.text("name_prefix", f.name_prefix)
        add("{a}.name LIKE {p}::text", escape_like(prefix or ""))
    if f.min_deferrals is not None:
        add(
            "{a}.deferrals >= {p}::int",
            options.integer("min_deferrals", f.min_deferrals, 0, 2**31 - 1),
        )
    if f.created_after is not None:
        add(
            "{a}.created_at >= {p}::timestamptz",
            options.timestamp("created_after", f.created_after),
        )
    if f.created_before is not None:
        add(
            "{a}.created_at < {p}::timestamptz",
            options.timestamp("created_before", f.created_before),
        )
    if f.finished_before is not None:
        add(
            "{a}.finished_at < {p}::timestamptz",
            options.timestamp("finished_before", f.finished_before),
        )
    if f.finished_after is not None:
        add(
            "{a}.finished_at >= {p}::timestamptz",
            options.timestamp("finished_after", f.finished_after),
        )
    if f.sub_state is not None:
        if schema is None:
            raise InvalidOption("sub_state", "is not supported by this operation")
        states = _sub_states(f.sub_state)
        # The status it implies first, so the partial indexes stay usable.
        add("{a}.status = ANY({p}::text[])", sorted({SUB_STATE_STATUS[s].value for s in states}))
        add(
            f"{schema}.sub_state({{a}}.status, {{a}}.pending_deps, {{a}}.run_at, {{a}}.attempts)"
            " = ANY({p}::text[])",
            [s.value for s in states],
        )
    if f.ids is not None:
        add("{a}.id = ANY({p}::bigint[])", [options.integer("ids", i, 1, 2**63 - 1) for i in f.ids])
    return (" AND ".join(clauses) or "true"), params


OUTCOMES = ("running", "failed", "completed_with_failures", "completed")


def flow_where(f: FlowFilter, first_param: int, schema: str) -> tuple[str, list[Any]]:
    """``(sql, params)`` over a flow summary ``f`` (see tracking.sql, list_flows)."""
    clauses: list[str] = []
    params: list[Any] = []

    def add(template: str, value: Any) -> None:
        params.append(value)
        clauses.append(template.format(p=f"${first_param + len(params) - 1}"))

    if f.queue is not None:
        add(
            f"EXISTS (SELECT FROM {schema}.jobs j"
            " WHERE j.flow_id = f.flow_id AND j.queue = {p}::text)",
            options.queue(f.queue),
        )
    if f.outcome is not None:
        outcomes = list(f.outcome) if isinstance(f.outcome, tuple | list) else [f.outcome]
        if not all(o in OUTCOMES for o in outcomes):
            raise InvalidOption("outcome", f"must be among {list(OUTCOMES)}, got {f.outcome!r}")
        add("f.outcome = ANY({p}::text[])", outcomes)
    if f.name_prefix is not None:
        add("f.name LIKE {p}::text", escape_like(options.text("name_prefix", f.name_prefix) or ""))
    if f.created_after is not None:
        add("f.created_at >= {p}::timestamptz", options.timestamp("created_after", f.created_after))
    if f.created_before is not None:
        add(
            "f.created_at < {p}::timestamptz", options.timestamp("created_before", f.created_before)
        )
    if f.tenant is not None:
        add("f.tenant = {p}::text", options.text("tenant", f.tenant, max_bytes=256))
    return (" AND ".join(clauses) or "true"), params
