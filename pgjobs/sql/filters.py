"""Turn a JobFilter into a parameterised WHERE clause. Values are always bind parameters;
only column names, fixed here, enter the SQL text."""

from __future__ import annotations

from typing import Any

from pgjobs import options
from pgjobs.errors import InvalidOption
from pgjobs.models import JobFilter, Status


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


def where(f: JobFilter, first_param: int = 1, alias: str = "j") -> tuple[str, list[Any]]:
    """``(sql, params)`` where sql is a boolean expression over ``alias`` using $first_param..."""
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
    if f.ids is not None:
        add("{a}.id = ANY({p}::bigint[])", [options.integer("ids", i, 1, 2**63 - 1) for i in f.ids])
    return (" AND ".join(clauses) or "true"), params
