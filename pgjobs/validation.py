"""Validation of every per-job option, each error naming the option at fault."""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Any

from pgjobs.backoff import Backoff
from pgjobs.errors import InvalidOption
from pgjobs.models import Durability

PRIORITY_MIN = -1_000_000_000
PRIORITY_MAX = 1_000_000_000
MAX_DELAY_SECONDS = 100 * 365 * 24 * 3600  # beyond a century is a unit mistake, not a plan
MAX_ATTEMPTS_LIMIT = 1_000_000
MAX_LABEL_BYTES = 1024  # names and keys: btree entries must stay well under 2,700 bytes
MAX_QUEUE_BYTES = 1024
"""A queue name is in unique indexes beside a key (MAX_LABEL_BYTES) and a tenant (256 bytes), and
a btree entry must stay under PostgreSQL's 2,704 bytes."""


def integer(option: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidOption(option, f"must be an integer, got {type(value).__name__} {value!r}")
    if not low <= value <= high:
        raise InvalidOption(option, f"must be between {low} and {high}, got {value}")
    return value


def priority(value: Any) -> int:
    return integer("priority", value, PRIORITY_MIN, PRIORITY_MAX)


def max_attempts(value: Any) -> int:
    return integer("max_attempts", value, 1, MAX_ATTEMPTS_LIMIT)


def max_deferrals(value: Any) -> int:
    return integer("max_deferrals", value, 0, MAX_ATTEMPTS_LIMIT)


def text(
    option: str, value: Any, *, max_bytes: int = MAX_LABEL_BYTES, optional: bool = True
) -> str | None:
    """A non-empty string without NUL, at most ``max_bytes`` of UTF-8."""
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise InvalidOption(option, f"must be a string, got {type(value).__name__}")
    if not value:
        raise InvalidOption(option, "must not be empty")
    if "\x00" in value:
        raise InvalidOption(option, "must not contain a NUL character")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidOption(
            option, "must be valid Unicode (it holds an unpaired surrogate)"
        ) from None
    if size > max_bytes:
        raise InvalidOption(option, f"must be at most {max_bytes} bytes of UTF-8, got {size}")
    return value


def queue(value: Any) -> str:
    result = text("queue", value, max_bytes=MAX_QUEUE_BYTES, optional=False)
    assert result is not None
    return result


def delay_seconds(value: Any, option: str = "delay") -> float | None:
    """A delay as seconds (number or timedelta), >= 0 and finite; None stays None."""
    if value is None:
        return None
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise InvalidOption(
            option, f"must be seconds (a number) or a timedelta, got {type(value).__name__}"
        )
    if not math.isfinite(seconds) or seconds < 0:
        raise InvalidOption(option, f"must be a finite number of seconds >= 0, got {value!r}")
    if seconds > MAX_DELAY_SECONDS:
        raise InvalidOption(
            "delay", f"must be at most {MAX_DELAY_SECONDS} seconds (100 years), got {value!r}"
        )
    return seconds


def timestamp(option: str, value: Any) -> datetime | None:
    """A timezone-aware datetime; None stays None."""
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise InvalidOption(option, f"must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidOption(option, "must be timezone-aware (a naive datetime is ambiguous)")
    if value.year > 9000:
        raise InvalidOption(option, f"is too far in the future: {value.isoformat()}")
    return value


def run_at(value: Any) -> datetime | None:
    return timestamp("run_at", value)


def keep(option: str, value: Any) -> dict[str, Any] | None:
    """A Keep as its JSON form, validated; None when not given."""
    from pgjobs.models import Keep

    if value is None:
        return None
    if not isinstance(value, Keep):
        raise InvalidOption(option, f"must be a pgjobs.Keep, got {type(value).__name__}")
    result: dict[str, Any] = {}
    if value.count is not None:
        result["count"] = integer(f"{option}.count", value.count, 0, 1_000_000_000)
    if value.age is not None:
        age = value.age
        if (
            isinstance(age, bool)
            or not isinstance(age, int | float)
            or not math.isfinite(age)
            or age < 0
        ):
            raise InvalidOption(f"{option}.age", f"must be a number of seconds >= 0, got {age!r}")
        result["age"] = float(age)
    return result


def retention(completed: Any, dead: Any) -> dict[str, Any] | None:
    """The stored retention rules of a job or kind (``keep_completed``, ``keep_dead``),
    validated; None when neither is given."""
    rules = {
        status: rule
        for status, rule in (
            ("completed", keep("keep_completed", completed)),
            ("dead", keep("keep_dead", dead)),
        )
        if rule is not None
    }
    return rules or None


def backoff(value: Any) -> Backoff:
    if isinstance(value, Backoff):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return Backoff.fixed(float(value))
    if isinstance(value, dict):
        try:
            return Backoff(**value)
        except TypeError as exc:
            raise InvalidOption("backoff", str(exc)) from None
    raise InvalidOption(
        "backoff", f"must be a Backoff, a number of seconds or a dict, got {type(value).__name__}"
    )


def durability(value: Any, option: str = "durability") -> Durability:
    """``"durable"`` or ``"async"`` (a Durability)."""
    try:
        return Durability(value)
    except ValueError:
        raise InvalidOption(option, f"must be 'durable' or 'async', got {value!r}") from None


def commit_setting(level: Durability) -> str | None:
    """The synchronous_commit a statement sets for its transaction: None keeps the server's."""
    return "off" if level is Durability.ASYNC else None


MAX_RATE_LIMIT = 1_000_000_000
MAX_RATE_PERIOD_SECONDS = 366 * 86400


def rate_limit(
    max_jobs: Any, per_seconds: Any, options: tuple[str, str] = ("max_jobs", "per_seconds")
) -> tuple[int, float]:
    """A rate limit of ``max_jobs`` starts per ``per_seconds``; ``options`` name the two in
    errors."""
    integer(options[0], max_jobs, 1, MAX_RATE_LIMIT)
    if (
        isinstance(per_seconds, bool)
        or not isinstance(per_seconds, int | float)
        or not math.isfinite(per_seconds)
        or not 0 < per_seconds <= MAX_RATE_PERIOD_SECONDS
    ):
        raise InvalidOption(
            options[1], f"must be a number of seconds in (0, 1 year], got {per_seconds!r}"
        )
    return max_jobs, float(per_seconds)
