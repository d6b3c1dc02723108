"""BullMQ's Redis layout, decoded: key names, score encodings, job hash fields, state precedence
and version checks (see ../shared/reference/bullmq_redis_layout.md). Pure functions, no I/O."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

DELAYED_SCORE_FACTOR = 4096  # delayed score = run_at_ms * 4096 + k
PRIORITY_SCORE_FACTOR = 2**32  # prioritized score = priority * 2^32 + counter

# Containers, and BullMQ's precedence when an id is found in several (getState-8.lua).
CONTAINERS = (
    "completed",
    "failed",
    "delayed",
    "prioritized",
    "active",
    "wait",
    "paused",
    "waiting-children",
)
QUEUE_KEY_SUFFIXES = {
    "",
    "active",
    "wait",
    "waiting-children",
    "paused",
    "id",
    "delayed",
    "prioritized",
    "stalled-check",
    "completed",
    "failed",
    "stalled",
    "repeat",
    "limiter",
    "meta",
    "events",
    "pc",
    "marker",
    "de",
}
# opts short keys as Lua stores them -> BullMQ's option names (optsDecodeMap)
SHORT_OPTS = {
    "kl": "keepLogs",
    "de": "deduplication",
    "fpof": "failParentOnFailure",
    "cpof": "continueParentOnFailure",
    "idof": "ignoreDependencyOnFailure",
    "rdof": "removeDependencyOnFailure",
    "tm": "telemetryMetadata",
    "omc": "omitContext",
}


class LegacyLayout(Exception):
    """A queue written by BullMQ v1-v4, whose layout this tool does not read."""


def base(prefix: str, queue: str) -> str:
    return f"{prefix}:{queue}:"


def delayed_run_at_ms(score: float) -> int:
    return int(score) // DELAYED_SCORE_FACTOR


def decode_opts(text: str | None) -> dict[str, Any]:
    """``opts`` as cjson wrote it, with short keys expanded. ``\\/`` is plain JSON; cjson's
    empty array-as-object and 14-digit numbers are kept as read."""
    if not text:
        return {}
    raw = json.loads(text)
    if not isinstance(raw, dict):
        return {}
    return {str(SHORT_OPTS.get(key, key)): value for key, value in raw.items()}


def decode_json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


@dataclass
class RawJob:
    """A job hash as read, with its sub-keys."""

    prefix: str
    queue: str
    id: str
    fields: dict[str, str]
    data_bytes: bytes | None
    logs: list[str] = field(default_factory=list)
    dependencies: list[str] = field(default_factory=list)  # full keys of unfinished children
    processed: dict[str, str] = field(default_factory=dict)  # child key -> returnvalue JSON
    failed_children: dict[str, str] = field(default_factory=dict)  # child key -> failedReason
    unsuccessful: list[str] = field(default_factory=list)  # child keys (failParentOnFailure)

    @property
    def key(self) -> str:
        return f"{self.prefix}:{self.queue}:{self.id}"

    def int_field(self, name: str, default: int = 0) -> int:
        value = self.fields.get(name)
        try:
            return int(value) if value not in (None, "") else default
        except ValueError:
            return default


def attempts_made(fields: dict[str, str]) -> int:
    """``atm`` (v5+), else the pre-v5 ``attemptsMade``."""
    for name in ("atm", "attemptsMade"):
        value = fields.get(name)
        if value not in (None, ""):
            return int(value)
    return 0


def state_of(containers: dict[str, str]) -> str:
    """The state of an id found in ``containers`` (name -> anything), by BullMQ's precedence."""
    for name in CONTAINERS:
        if name in containers:
            return "waiting" if name in ("wait", "paused") else name
    return "unknown"


def check_modern(
    prefix: str, queue: str, has_markers: bool, has_priority_zset: bool, version: str | None
) -> None:
    """Refuse v1-v4 layouts: the ``priority`` zset (v1-v3) or ``0:`` markers in wait (v4)."""
    where = f"queue {prefix}:{queue}"
    if version and version.startswith("bullmq:") and version[7:8] in "1234":
        raise LegacyLayout(f"{where} was written by {version}; migrate from BullMQ v5 or later")
    if has_priority_zset:
        raise LegacyLayout(
            f"{where} has a legacy 'priority' zset (BullMQ v1-v3); upgrade it with BullMQ v5 first"
        )
    if has_markers:
        raise LegacyLayout(
            f"{where} holds v4 markers ('0:...') in its wait list; drain or upgrade it with "
            "BullMQ v5 first"
        )


def split_job_key(key: str, bases: list[tuple[str, str]]) -> tuple[str, str, str] | None:
    """(prefix, queue, id) of a full job key, anchored on known queue bases (longest first);
    never by splitting on ':' (prefixes and ids may contain it)."""
    for prefix, queue in sorted(bases, key=lambda b: -len(base(*b))):
        head = base(prefix, queue)
        if key.startswith(head) and len(key) > len(head):
            return prefix, queue, key[len(head) :]
    return None
