"""How the dashboard writes times and numbers, the same on every page: one absolute format (UTC
to the second, zone named), durations and relative times an operator reads at a glance, counts
with thousands separators."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


def stamp(moment: datetime) -> str:
    """The page's one absolute format: UTC, to the second, zone named."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def parse_moment(text: Any) -> datetime | None:
    """An ISO 8601 time as an error record keeps it (``at``); None when it is not one."""
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def duration(seconds: float) -> str:
    """A length of time for a reader: ``340 ms``, ``2.5 s``, ``4 min 12 s``, ``3 h 5 min``,
    ``2 d 4 h``."""
    seconds = max(seconds, 0.0)
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 10:
        return f"{seconds:.1f} s"
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s" if whole % 60 else f"{whole // 60} min"
    if whole < 86400:
        minutes = whole % 3600 // 60
        return f"{whole // 3600} h {minutes} min" if minutes else f"{whole // 3600} h"
    hours = whole % 86400 // 3600
    return f"{whole // 86400:,} d {hours} h" if hours else f"{whole // 86400:,} d"


def _coarse(seconds: float) -> str:
    whole = round(abs(seconds))
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min"
    if whole < 86400:
        return f"{whole // 3600} h"
    return f"{whole // 86400:,} d"


def relative(moment: datetime, now: datetime) -> str:
    """``4 min ago`` or ``in 3 h`` (``just now`` within a second)."""
    seconds = (now - moment).total_seconds()
    if abs(seconds) < 1:
        return "just now"
    return f"{_coarse(seconds)} ago" if seconds > 0 else f"in {_coarse(seconds)}"


def number(value: int | float) -> str:
    """A count with thousands separators (``12,345``)."""
    return f"{value:,}"
