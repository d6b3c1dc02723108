"""Run one claimed job's handler and turn its return or raise into an Outcome. No writes here."""

from __future__ import annotations

import logging
from typing import Any

import pydantic_core

from pgjobs import jsonvalue
from pgjobs.backoff import Backoff
from pgjobs.context import JobContext
from pgjobs.errors import JobLost
from pgjobs.kinds import Kind
from pgjobs.outcomes import Fatal, Outcome, decide, deferred_failure

logger = logging.getLogger("pgjobs.runner")


async def run(
    kind: Kind[Any],
    payload: str,
    backoff: Backoff | str,
    ctx: JobContext,
    worker: str | None = None,
) -> Outcome | None:
    """Validate the stored payload, call the handler, map the result. None: write nothing
    (the job is no longer ours, or ``ctx.completing()`` already completed it). A job carrying
    a deferred failure (it stalled past its queue's stall budget) fails with it unrun. A
    failure's error record names ``worker`` (the one running it), when given."""
    if ctx.deferred_failure is not None:
        return deferred_failure(ctx, ctx.deferred_failure)
    try:
        typed = kind.validate_json(payload)
        assert kind.handler is not None
        result = await kind.handler(ctx, typed)
        if ctx.completed or ctx.settled is not None:
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
        if ctx.lost or ctx.settled is not None:
            return None
        if ctx.completed:
            logger.warning(
                "job %s: handler raised after completing(); the job stays completed: %r",
                ctx.id,
                exc,
            )
            return None
        return decide(ctx, backoff, exc, worker)
    return Outcome(ctx.id, ctx.lock_token, "completed", output_json=output)
