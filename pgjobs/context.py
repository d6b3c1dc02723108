"""What a handler sees of its job, and its fenced writes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from pgjobs import jsonvalue, validation
from pgjobs.completer import write_outcomes_refusing
from pgjobs.errors import InvalidOption, JobLost, PendingPrerequisites
from pgjobs.executor import Connection, Database
from pgjobs.models import ClaimedRow, Keep
from pgjobs.outcomes import Outcome, decide

_UNSET: Any = object()


async def read_prerequisites(
    db: Database, job_id: int, *, tenant: str | None = None, any_tenant: bool = True
) -> list[dict[str, Any]]:
    """Each prerequisite of ``job_id``: id, kind, name, queue, job_key, status, output
    (decoded), and the policy, state and recorded failure (decoded) of its edge. None unless
    ``job_id`` belongs to ``tenant`` (any tenant by default: a job reading its own)."""
    rows = await db.fetch("prerequisite_results", job_id, tenant, any_tenant)
    return [
        {
            **dict(row),
            "output": jsonvalue.loads(row["output"]),
            "failure": jsonvalue.loads(row["failure"]),
        }
        for row in rows
    ]


class JobContext:
    """The running job: identity, counters, and writes fenced by this claim's lock token.

    Every write returns False (or raises JobLost) once another actor took the job over
    (its lease expired and it was reclaimed, or it was cancelled or purged): a
    dispossessed handler can never overwrite its successor.

    A job claimed by hand (``JobQueue.claim``) is finished through the same context:
    ``complete``, ``fail`` (the outcome a handler raising that exception would get),
    ``release``; ``extend_lease`` keeps it while it runs.
    """

    __slots__ = (
        "_backoff",
        "_commit",
        "_db",
        "_lease_seconds",
        "_payload",
        "attempts",
        "cancel_reason",
        "cancelled",
        "completed",
        "created_at",
        "deferrals",
        "deferred_failure",
        "flow_id",
        "id",
        "job_key",
        "kind",
        "last_error",
        "lease_until",
        "lock_token",
        "lost",
        "max_attempts",
        "max_deferrals",
        "metadata",
        "name",
        "output",
        "priority",
        "queue",
        "settled",
        "stalls",
        "tenant",
    )

    def __init__(
        self,
        db: Database,
        row: ClaimedRow,
        lease_seconds: float,
        commit: str | None = None,
        leased_at: float | None = None,
    ) -> None:
        self._db = db
        self._lease_seconds = lease_seconds
        self._commit = commit
        self.id: int = row["id"]
        self.queue: str = row["queue"]
        self.kind: str = row["kind"]
        self.name: str = row["name"]
        self.priority: int = row["priority"]
        self.attempts: int = row["attempts"]
        """Attempts started, this one included (1 on the first run)."""
        self.max_attempts: int = row["max_attempts"]
        self.deferrals: int = row["deferrals"]
        """Deferrals used so far (this run's, if it defers, not yet counted)."""
        self.max_deferrals: int = row["max_deferrals"]
        self.stalls: int = row["stalls"]
        """Times the job stalled (its worker stopped heartbeating) before this claim."""
        self.deferred_failure: dict[str, Any] | None = jsonvalue.loads(row["deferred_failure"])
        """The failure this claim records instead of running the handler (the error record of
        a stall past its queue's stall budget); None for every other claim."""
        self.last_error: dict[str, Any] | None = jsonvalue.loads(row["last_error"])
        """The job's last error record as it was claimed, without its traceback: that of its
        previous failed attempt (or of a stall, ``LeaseExpired``); None on a first run."""
        self.tenant: str | None = row["tenant"]
        self.metadata: Any = jsonvalue.loads(row["metadata"])
        self.flow_id: int | None = row["flow_id"]
        self.lock_token: Any = row["lock_token"]
        self.job_key: str | None = row["job_key"]
        self.created_at: Any = row["created_at"]
        self.lease_until = (time.monotonic() if leased_at is None else leased_at) + lease_seconds
        """When the lease ends on this process's monotonic clock, at the latest: when the
        statement that last set it was sent (``leased_at``: the claim's), plus the lease."""
        self.lost = False
        """True once a fenced write found the job taken over, or its lease ran out before the
        worker could renew it: the handler should stop, and no write of this context lands."""
        self.completed = False
        """True once ``completing()`` committed: the job is completed, the worker writes nothing."""
        self.output: Any = None
        """The output ``completing()`` stored."""
        self.settled: str | None = None
        """The status this context wrote for the job (complete, fail, release): the worker
        then writes nothing more."""
        self.cancelled = asyncio.Event()
        """Set once the job was cancelled (``JobQueue.cancel``, ``Worker.cancel_job``): a
        handler that can stop early waits on it or checks ``cancelled.is_set()``."""
        self.cancel_reason: Any = None
        self._payload: str = row["payload"]
        self._backoff: str = row["backoff"]

    @property
    def payload(self) -> Any:
        """The job's input as stored (decoded JSON, before its kind validates it)."""
        return jsonvalue.loads(self._payload)

    def cancel(self, reason: Any = None) -> bool:
        """Signal the handler to stop (``cancelled`` is set, ``cancel_reason`` kept); False if it
        already was. Nothing is written: what the job becomes is what the handler does next."""
        if self.cancelled.is_set():
            return False
        self.cancel_reason = reason
        self.cancelled.set()
        return True

    def _encode_progress(self, value: Any) -> str:
        try:
            return jsonvalue.dumps(value)
        except jsonvalue.NotJson as exc:
            raise InvalidOption("progress", str(exc)) from None

    async def progress(self, value: Any) -> bool:
        """Store ``value`` (any JSON) as the job's progress and extend its lease.

        Returns False, and writes nothing, when this worker no longer owns the job.
        """
        return await self._write_progress(self._encode_progress(value), None)

    async def _write_progress(self, encoded: str, conn: Connection | None) -> bool:
        if self.lost:
            return False
        sent = time.monotonic()
        row = await self._db.fetchrow(
            "set_progress", self.id, self.lock_token, encoded, self._lease_seconds, conn=conn
        )
        if row is None:
            self.lost = True
        else:
            self._renewed(sent, self._lease_seconds)
        return row is not None

    def _renewed(self, sent: float, seconds: float) -> None:
        """A statement sent at ``sent`` set the lease to ``seconds`` from the database's now."""
        if not self.lost:
            self.lease_until = sent + seconds

    async def log(self, line: str) -> int:
        """Append a line to the job's log; the number of lines it holds now, or 0 (nothing
        written) once the job is not ours."""
        if self.lost:
            return 0
        if not isinstance(line, str):
            raise InvalidOption("line", f"must be a string, got {type(line).__name__}")
        lines = await self._db.fetchval(
            "append_log_fenced", self.id, self.lock_token, jsonvalue.strip_nul(line)
        )
        if lines is None:
            self.lost = True
        return int(lines or 0)

    async def keep(self, *, completed: Keep | None = None, dead: Keep | None = None) -> bool:
        """Set how long the job stays once this run finishes it: ``completed`` and ``dead``
        (each a ``Keep``, as ``keep_completed``/``keep_dead`` at enqueue) replace the rule of
        that status, the other's is kept. False, and nothing written, once the job is not
        ours."""
        rules = validation.retention(completed, dead)
        if rules is None:
            raise InvalidOption("keep", "give completed, dead or both")
        if self.lost:
            return False
        row = await self._db.fetchrow(
            "set_retention_fenced", self.id, self.lock_token, jsonvalue.dumps(rules)
        )
        if row is None:
            self.lost = True
        return row is not None

    async def open_prerequisites(self) -> int:
        """How many of this job's prerequisites are still open (or blocked by a failure); raises
        JobLost if the job was taken over. Raise ``WaitForPrerequisites`` to wait for them."""
        count = await self._db.fetchval("open_prerequisites", self.id, self.lock_token)
        if count is None:
            self.lost = True
            raise JobLost(self.id)
        return int(count)

    # -- finishing a job by hand ---------------------------------------------------------------

    async def _settle(self, outcome: Outcome) -> bool:
        if self.settled is not None or self.completed:
            raise InvalidOption(
                "outcome", f"job {self.id} is already {self.settled or 'completed'}"
            )
        if self.lost:
            return False
        done, refused = await write_outcomes_refusing(self._db, [outcome], commit=self._commit)
        if self.id in refused:
            raise PendingPrerequisites(self.id)
        written = self.id in done
        if written:
            self.settled = outcome.status
        else:
            self.lost = True
        return written

    async def complete(self, output: Any = None) -> bool:
        """Complete the job with ``output`` (JSON); False (nothing written) if it was taken over.
        Raises PendingPrerequisites (nothing written, the job still ours and running) while
        prerequisites attached to it are pending."""
        try:
            encoded = jsonvalue.dumps(output)
        except jsonvalue.NotJson as exc:
            raise InvalidOption("output", str(exc)) from None
        return await self._settle(
            Outcome(self.id, self.lock_token, "completed", output_json=encoded)
        )

    async def fail(self, error: BaseException) -> str | None:
        """Give the job the outcome of a handler that raised ``error``: a retry after its backoff
        (or at ``Retry.after``), a deferral for ``Delayed``, dead once its attempts are used or
        for ``Fatal``. Returns the status written (``pending`` or ``dead``), None if the job
        was taken over."""
        outcome = decide(self, self._backoff, error)
        return outcome.status if await self._settle(outcome) else None

    async def release(self) -> bool:
        """Give the job back unrun: pending again, in its place, its attempt not used."""
        return await self._settle(
            Outcome(self.id, self.lock_token, "pending", delay=None, refund_attempt=1)
        )

    async def extend_lease(self, seconds: float | None = None) -> bool:
        """Keep the job for ``seconds`` (default: the claim's lease) from now; False once it is
        not ours. A worker does this for its jobs; a job claimed by hand needs it while it
        runs longer than its lease."""
        if self.lost:
            return False
        lease = self._lease_seconds if seconds is None else float(seconds)
        sent = time.monotonic()
        rows = await self._db.fetch("heartbeat", [self.id], [self.lock_token], lease)
        if not rows:
            self.lost = True
        else:
            self._renewed(sent, lease)
        return bool(rows)

    async def prerequisites(self) -> list[dict[str, Any]]:
        """This job's prerequisites in its flow: id, kind, name, queue, status, output, and the
        policy, state and recorded failure of each edge."""
        return await read_prerequisites(self._db, self.id)

    @asynccontextmanager
    async def _fenced(
        self, still_ours: Callable[[Connection], Awaitable[bool]]
    ) -> AsyncIterator[Connection]:
        """A transaction on a pool connection that commits only if ``still_ours(conn)``, run
        after the caller's writes, finds the job still owned by this claim (and its lease has
        not run out meanwhile); otherwise it rolls back, marks the job lost and raises
        JobLost."""
        async with self._db.transaction() as conn:
            yield conn
            if self.lost or not await still_ours(conn):
                self.lost = True
                raise JobLost(self.id)

    @asynccontextmanager
    async def transaction(self, progress: Any = _UNSET) -> AsyncIterator[Connection]:
        """A transaction whose commit is conditional on still owning the job.

        The handler's own writes on the yielded connection commit together with a fenced
        checkpoint (``progress``, if given, else the lease is just extended). If the job was
        taken over meanwhile, everything is rolled back and JobLost is raised: the handler's
        batch is never committed by a dispossessed worker.

        >>> async with ctx.transaction(progress={"cursor": 500}) as conn:
        ...     await conn.execute("INSERT INTO results ...")
        """

        async def checkpoint(conn: Connection) -> bool:
            if progress is _UNSET:
                row = await self._db.fetchrow(
                    "heartbeat", [self.id], [self.lock_token], self._lease_seconds, conn=conn
                )
            else:
                row = await self._db.fetchrow(
                    "set_progress",
                    self.id,
                    self.lock_token,
                    self._encode_progress(progress),
                    self._lease_seconds,
                    conn=conn,
                )
            return row is not None

        async with self._fenced(checkpoint) as conn:
            yield conn

    @asynccontextmanager
    async def completing(self, output: Any = None) -> AsyncIterator[Connection]:
        """A transaction that completes the job when it commits: exactly-once effects.

        The handler's writes on the yielded connection and the job's completion (with
        ``output``) commit together or not at all. If the job was taken over meanwhile
        (lease expired, cancelled, purged), everything is rolled back and JobLost is raised;
        if it has prerequisites still pending (attached while it ran), everything is rolled
        back and PendingPrerequisites is raised. If the worker dies before the commit, nothing
        was written and the job runs again. The handler's return value is then ignored: the
        job is already completed.

        >>> async with ctx.completing(output={"charged": 12}) as conn:
        ...     await conn.execute("INSERT INTO charges ...")
        """
        if self.completed:
            raise InvalidOption("completing", f"job {self.id} is already completed")
        try:
            outcome = Outcome(
                self.id, self.lock_token, "completed", output_json=jsonvalue.dumps(output)
            )
        except jsonvalue.NotJson as exc:
            raise InvalidOption("output", str(exc)) from None

        async def finish(conn: Connection) -> bool:
            done, refused = await write_outcomes_refusing(self._db, [outcome], conn)
            if self.id in refused:
                raise PendingPrerequisites(self.id)  # rolls the transaction back
            return self.id in done

        async with self._fenced(finish) as conn:
            yield conn
        self.completed = True
        self.output = output
