"""Writes handler outcomes in batches: one fenced statement for everything that finished
while the previous write was in flight (group commit, no timer)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any, Literal

from pgjobs.config import notify_channel
from pgjobs.executor import TRANSIENT_ERRORS, Database
from pgjobs.outcomes import Outcome
from pgjobs.retrying import Outage, retry_delay

logger = logging.getLogger("pgjobs.completer")

MAX_BATCH = 1000

Written = Literal["written", "lost", "refused"]
"""What became of an outcome: written; lost (no longer owned by its claim: nothing written);
refused (a completion of a job with pending prerequisites: nothing written, still owned)."""


class Completer:
    """Buffer outcomes; ``submit`` resolves to what became of the outcome (``Written``):
    ``"written"``, ``"lost"`` when the job was no longer owned by its claim (the write was a
    fenced no-op), ``"refused"`` for a completion of a job with pending prerequisites."""

    def __init__(
        self,
        db: Database,
        on_lost: Callable[[Outcome], None],
        commit: str | None = None,
        outage: Outage | None = None,
    ) -> None:
        self._db = db
        self._on_lost = on_lost
        self._commit = commit
        self._outage = outage or Outage(logger, "completer")
        self._buffer: list[tuple[Outcome, asyncio.Future[Written]]] = []
        self._ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="pgjobs-completer")

    async def submit(self, outcome: Outcome) -> Written:
        future: asyncio.Future[Written] = asyncio.get_running_loop().create_future()
        self._buffer.append((outcome, future))
        self._ready.set()
        return await future

    async def stop(self) -> None:
        """Flush what is buffered, then stop."""
        if self._task is None:
            return
        while self._buffer:
            await self._flush_once()
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._task = None

    async def _run(self) -> None:
        while True:
            await self._ready.wait()
            self._ready.clear()
            while self._buffer:
                await self._flush_once()

    async def _flush_once(self) -> None:
        batch, self._buffer = self._buffer[:MAX_BATCH], self._buffer[MAX_BATCH:]
        failures = 0
        while True:
            sent = time.monotonic()
            try:
                written, refused = await self._write([outcome for outcome, _ in batch])
                self._outage.answered()
                break
            except Exception as exc:
                if isinstance(exc, TRANSIENT_ERRORS) and not self._db.closed:
                    # The outcomes are still in memory and still fenced: retrying is safe.
                    failures += 1
                    self._outage.failed(f"writing {len(batch)} outcome(s)", exc, sent)
                    await asyncio.sleep(retry_delay(failures, first=0.05))
                    continue
                # Not transient, or the pool was closed: give up on this batch and keep the
                # completer alive. The jobs stay running until their lease expires; then they
                # are rescued and run again.
                logger.exception("writing %d outcomes failed; their leases will expire", len(batch))
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                return
        for outcome, future in batch:
            result: Written = "written"
            if outcome.job_id in refused:
                result = "refused"
            elif outcome.job_id not in written:
                result = "lost"
                self._on_lost(outcome)
            if not future.done():
                future.set_result(result)

    async def _write(self, outcomes: list[Outcome]) -> tuple[set[int], set[int]]:
        return await write_outcomes_refusing(self._db, outcomes, commit=self._commit)


async def write_outcomes(
    db: Database, outcomes: list[Outcome], conn: Any = None, commit: str | None = None
) -> set[int]:
    """Write ``outcomes`` in one fenced statement (on ``conn``, inside its transaction, if
    given); returns the ids written: a missing one was no longer owned by its claim, or its
    completion was refused (see ``write_outcomes_refusing``). ``commit``: the transaction's
    synchronous_commit (validation.commit_setting)."""
    written, _refused = await write_outcomes_refusing(db, outcomes, conn, commit)
    return written


async def write_outcomes_refusing(
    db: Database, outcomes: list[Outcome], conn: Any = None, commit: str | None = None
) -> tuple[set[int], set[int]]:
    """``write_outcomes``, also returning the ids whose completion was refused: the job still
    had pending prerequisites (finish_jobs.sql); nothing was written for it, and it is still
    running and owned by its claim."""
    rows = await db.fetch(
        "finish",
        [o.job_id for o in outcomes],
        [o.lock_token for o in outcomes],
        [o.status for o in outcomes],
        [o.output_json for o in outcomes],
        [o.delay for o in outcomes],
        [o.error_json for o in outcomes],
        [o.refund_attempt for o in outcomes],
        [o.deferred for o in outcomes],
        notify_channel(db.schema),
        commit,
        conn=conn,
    )
    ids = [row["id"] for row in rows]
    return {i for i in ids if i > 0}, {-i for i in ids if i < 0}
