"""Handler signals (raised by handlers) and the outcome records the worker writes.

A handler returns a value (the job completes) or raises. Ordinary exceptions are
retried with backoff; these three signals say something more precise.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal


def _seconds(after: float | timedelta) -> float:
    seconds = after.total_seconds() if isinstance(after, timedelta) else float(after)
    if not seconds >= 0:  # also rejects NaN
        raise ValueError(f"delay must be >= 0 seconds, got {after!r}")
    return seconds


class Retry(Exception):
    """Retry this job after ``after`` seconds. Consumes an attempt."""

    def __init__(self, after: float | timedelta = 0.0, reason: str = "retry requested") -> None:
        self.after = _seconds(after)
        self.reason = reason
        super().__init__(reason)


class Delayed(Exception):
    """Defer this job by ``after`` seconds without consuming an attempt.

    Counted in ``deferrals``; the job dies once ``max_deferrals > 0`` deferrals are used.
    """

    def __init__(self, after: float | timedelta, reason: str = "deferred") -> None:
        self.after = _seconds(after)
        self.reason = reason
        super().__init__(reason)


class WaitForPrerequisites(Exception):
    """Put this job back until the prerequisites added while it ran are resolved (see
    ``JobQueue.add_prerequisite``); it then runs again. Uses no attempt and no deferral. If none
    is open any more, it is due again at once."""


class Fatal(Exception):
    """Fail this job at once: it goes ``dead`` with no retry."""


OutcomeStatus = Literal["completed", "pending", "dead"]


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the worker writes for one finished handler run, fenced by ``lock_token``.

    ``delay`` (seconds from the database's now) applies when going back to ``pending``; None
    keeps the job's due time, so a job given back unrun keeps its place in the queue.
    ``refund_attempt`` is 1 for a deferral (the claim's attempt is given back) and
    ``deferred`` is 1 when a deferral is counted.
    """

    job_id: int
    lock_token: Any
    status: OutcomeStatus
    output_json: str | None = None
    delay: float | None = 0.0
    error_json: str | None = None
    refund_attempt: int = 0
    deferred: int = 0
