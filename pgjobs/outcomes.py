"""Handler signals (raised by handlers) and the outcome records the worker writes.

A handler returns a value (the job completes) or raises. Ordinary exceptions are
retried with backoff; these three signals say something more precise.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, Protocol

from pgjobs import jsonvalue
from pgjobs.backoff import Backoff
from pgjobs.errors import InvalidJobInput


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
    ``JobQueue.add_prerequisite``); it then runs again. Uses no attempt, and no deferral unless
    ``counted``: then the run is counted in ``deferrals`` as a ``Delayed`` run is (the job dies
    once ``max_deferrals > 0`` deferrals are used), so that deferrals + attempts + stalls count
    every run. If none is open any more, it is due again at once."""

    def __init__(self, *, counted: bool = False) -> None:
        self.counted = counted
        super().__init__("waiting for prerequisites")


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


class Claim(Protocol):
    """What deciding an outcome needs of a claimed job."""

    id: int
    lock_token: Any
    attempts: int
    max_attempts: int
    deferrals: int
    max_deferrals: int


def _error(exc: BaseException, ctx: Claim, **extra: Any) -> str:
    record = {
        "type": type(exc).__name__,
        "message": str(exc),
        "traceback": "".join(traceback.format_exception(exc)),
        "attempt": ctx.attempts,
        "at": datetime.now(UTC).isoformat(),
        **extra,
    }
    return jsonvalue.dumps(_jsonb_safe(record))


def _jsonb_safe(record: dict[str, Any]) -> dict[str, Any]:
    """Error text is arbitrary: escape what jsonb cannot hold rather than lose the record."""
    return {key: jsonvalue.strip_nul(v) if isinstance(v, str) else v for key, v in record.items()}


def _dead(ctx: Claim, exc: BaseException, worker: str | None, **fields: Any) -> Outcome:
    error = _error(exc, ctx) if worker is None else _error(exc, ctx, worker=worker)
    return Outcome(ctx.id, ctx.lock_token, "dead", error_json=error, **fields)


def _retry_or_dead(ctx: Claim, exc: BaseException, delay: float, worker: str | None) -> Outcome:
    if ctx.attempts >= ctx.max_attempts:
        return _dead(ctx, exc, worker)
    error = _error(exc, ctx) if worker is None else _error(exc, ctx, worker=worker)
    return Outcome(ctx.id, ctx.lock_token, "pending", delay=delay, error_json=error)


def decide(
    ctx: Claim, backoff: Backoff | str, exc: BaseException, worker: str | None = None
) -> Outcome:
    """The outcome of a handler that raised ``exc`` (ENGINE.md, "Handler outcomes"); an error
    record names ``worker``, the one that ran the attempt, when given."""
    if isinstance(exc, Fatal | InvalidJobInput):
        return _dead(ctx, exc, worker)
    if isinstance(exc, Delayed):
        deferrals = ctx.deferrals + 1
        if ctx.max_deferrals > 0 and deferrals >= ctx.max_deferrals:
            return _dead(ctx, exc, worker, refund_attempt=1, deferred=1)
        return Outcome(
            ctx.id, ctx.lock_token, "pending", delay=exc.after, refund_attempt=1, deferred=1
        )
    if isinstance(exc, WaitForPrerequisites):
        if not exc.counted:
            return Outcome(ctx.id, ctx.lock_token, "pending", refund_attempt=1)
        if ctx.max_deferrals > 0 and ctx.deferrals + 1 >= ctx.max_deferrals:
            return _dead(ctx, exc, worker, refund_attempt=1, deferred=1)
        return Outcome(ctx.id, ctx.lock_token, "pending", refund_attempt=1, deferred=1)
    if isinstance(exc, Retry):
        return _retry_or_dead(ctx, exc, exc.after, worker)
    if isinstance(backoff, str):  # the stored JSON, parsed only when a retry needs it
        backoff = Backoff.from_json(jsonvalue.loads(backoff))
    return _retry_or_dead(ctx, exc, backoff.seconds(ctx.attempts), worker)


def deferred_failure(ctx: Claim, failure: dict[str, Any]) -> Outcome:
    """``dead`` with ``failure`` (the error record a stall past the stall budget left on the
    job) as its error, counted against this claim's attempt."""
    record = {key: value for key, value in failure.items() if key != "deferred"}
    record.update(attempt=ctx.attempts, at=datetime.now(UTC).isoformat())
    return Outcome(ctx.id, ctx.lock_token, "dead", error_json=jsonvalue.dumps(record))
