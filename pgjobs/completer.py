"""Writes handler outcomes in batches: one fenced statement for everything that finished
while the previous write was in flight (group commit, no timer)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from pgjobs.config import notify_channel
from pgjobs.executor import TRANSIENT_ERRORS, Database
from pgjobs.outcomes import Outcome
from pgjobs.retrying import retry_delay

logger = logging.getLogger("pgjobs.completer")

MAX_BATCH = 1000


class Completer:
    """Buffer outcomes; ``submit`` resolves to True when written, False when the job was no
    longer owned by its claim (the write was a fenced no-op)."""

    def __init__(
        self, db: Database, on_lost: Callable[[Outcome], None], commit: str | None = None
    ) -> None:
        self._db = db
        self._on_lost = on_lost
        self._commit = commit
        self._buffer: list[tuple[Outcome, asyncio.Future[bool]]] = []
        self._ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="pgjobs-completer")

    async def submit(self, outcome: Outcome) -> bool:
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
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
            try:
                written = await self._write([outcome for outcome, _ in batch])
                break
            except Exception as exc:
                if isinstance(exc, TRANSIENT_ERRORS) and not self._db.closed:
                    # The outcomes are still in memory and still fenced: retrying is safe.
                    failures += 1
                    delay = retry_delay(failures, first=0.05)
                    logger.warning(
                        "writing %d outcomes failed (%s); retrying in %.2fs",
                        len(batch),
                        exc,
                        delay,
                    )
                    await asyncio.sleep(delay)
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
            owned = outcome.job_id in written
            if not owned:
                self._on_lost(outcome)
            if not future.done():
                future.set_result(owned)

    async def _write(self, outcomes: list[Outcome]) -> set[int]:
        return await write_outcomes(self._db, outcomes, commit=self._commit)


async def write_outcomes(
    db: Database, outcomes: list[Outcome], conn: Any = None, commit: str | None = None
) -> set[int]:
    """Write ``outcomes`` in one fenced statement (on ``conn``, inside its transaction, if
    given); returns the ids written: a missing one was no longer owned by its claim.
    ``commit``: the transaction's synchronous_commit (validation.commit_setting)."""
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
    return {row["id"] for row in rows}
