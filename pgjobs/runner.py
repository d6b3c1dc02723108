"""Run one claimed job's handler and turn its return or raise into an Outcome. No writes here."""

from __future__ import annotations

import logging
import traceback
from datetime import UTC, datetime
from typing import Any

import pydantic_core

from pgjobs import jsonvalue
from pgjobs.backoff import Backoff
from pgjobs.context import JobContext
from pgjobs.errors import InvalidJobInput, JobLost
from pgjobs.kinds import Kind
from pgjobs.outcomes import Delayed, Fatal, Outcome, Retry, WaitForPrerequisites

logger = logging.getLogger("pgjobs.runner")


def _error(exc: BaseException, ctx: JobContext, **extra: Any) -> str:
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


def _dead(ctx: JobContext, exc: BaseException, **fields: Any) -> Outcome:
    return Outcome(ctx.id, ctx.lock_token, "dead", error_json=_error(exc, ctx), **fields)


def _retry_or_dead(ctx: JobContext, exc: BaseException, delay: float) -> Outcome:
    if ctx.attempts >= ctx.max_attempts:
        return _dead(ctx, exc)
    return Outcome(ctx.id, ctx.lock_token, "pending", delay=delay, error_json=_error(exc, ctx))


def decide(ctx: JobContext, backoff: Backoff | str, exc: BaseException) -> Outcome:
    """The outcome of a handler that raised ``exc`` (ENGINE.md, "Handler outcomes")."""
    if isinstance(exc, Fatal | InvalidJobInput):
        return _dead(ctx, exc)
    if isinstance(exc, Delayed):
        deferrals = ctx.deferrals + 1
        if ctx.max_deferrals > 0 and deferrals >= ctx.max_deferrals:
            return _dead(ctx, exc, refund_attempt=1, deferred=1)
        return Outcome(
            ctx.id, ctx.lock_token, "pending", delay=exc.after, refund_attempt=1, deferred=1
        )
    if isinstance(exc, WaitForPrerequisites):
        return Outcome(ctx.id, ctx.lock_token, "pending", refund_attempt=1)
    if isinstance(exc, Retry):
        return _retry_or_dead(ctx, exc, exc.after)
    if isinstance(backoff, str):  # the stored JSON, parsed only when a retry needs it
        backoff = Backoff.from_json(jsonvalue.loads(backoff))
    return _retry_or_dead(ctx, exc, backoff.seconds(ctx.attempts))


async def run(
    kind: Kind[Any], payload: str, backoff: Backoff | str, ctx: JobContext
) -> Outcome | None:
    """Validate the stored payload, call the handler, map the result. None: write nothing
    (the job is no longer ours, or ``ctx.completing()`` already completed it)."""
    try:
        typed = kind.validate_json(payload)
        assert kind.handler is not None
        result = await kind.handler(ctx, typed)
        if ctx.completed:
            return None
        try:
            output = jsonvalue.dumps(pydantic_core.to_jsonable_python(result))
        except (jsonvalue.NotJson, pydantic_core.PydanticSerializationError) as exc:
            raise Fatal(
                f"handler of kind {kind.name!r} returned a value that is not JSON: {exc}"
            ) from exc
    except JobLost:
        return None
    except Exception as exc:
        if ctx.lost:
            return None
        if ctx.completed:
            logger.warning(
                "job %s: handler raised after completing(); the job stays completed: %r",
                ctx.id,
                exc,
            )
            return None
        return decide(ctx, backoff, exc)
    return Outcome(ctx.id, ctx.lock_token, "completed", output_json=output)
