"""Reading the job event log: an async iterator over the transitions of jobs enqueued with
``events=True`` and the queue events published beside them.

Guarantees: events come in commit-safe order (a transaction's events are delivered only when
every older transaction has ended, so none can appear behind the cursor later); a stream that
starts "now" skips exactly the transactions committed before it started; a stream resumed from a
cursor misses nothing the log still holds. The log is trimmed by the GC (newest 10,000 per
queue by default), so a cursor older than that resumes at the oldest event kept. A read that
fails because the database is out of reach is retried with backoff (and logged): a stream
waits out a restart.

After a server crash a stream misses nothing either: it goes back to its newest position known
to be on disk and reads on from there, so events it delivered in the moments before the crash
may come again (sql/schema/event_positions.sql says why a position can be unsafe). A cursor
saved by the application is taken as safe: one from an event that a crash then lost (an
asynchronous write's, a claim's) may skip the events committed after the crash that recovery
gave older transaction ids than it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections import deque
from collections.abc import Sequence
from typing import Any

from pgjobs.config import events_channel
from pgjobs.errors import InvalidOption, PoolClosed
from pgjobs.executor import TRANSIENT_ERRORS, Database
from pgjobs.models import JobEvent
from pgjobs.notifier import Notifier
from pgjobs.retrying import retry_delay

logger = logging.getLogger("pgjobs.events")

FROM_START = "0"
"""Cursor meaning: every event the log still holds."""

IDLE_POLL_SECONDS = 1.0  # safety net when a notification is missed
READER_TTL_SECONDS = 60.0
"""How long a stream's registration as a reader lasts unless renewed (every third of it):
writes of events notify only the queues a registered reader follows (sql/schema/wake.sql)."""
HELD_BACK_POLL_SECONDS = 0.02  # an event was announced but an older transaction is still open
HELD_BACK_ROUNDS = 50


Cursor = tuple[str, int, int]
"""(txid, row id, part): part is a job's position in a row of several jobs' events, else 0."""


def _parse_cursor(cursor: str) -> Cursor:
    if cursor == FROM_START:
        return "0", 0, 0
    parts = cursor.split(":")
    if len(parts) not in (2, 3) or not all(part.isdigit() for part in parts):
        raise InvalidOption("after", f"must be {FROM_START!r} or a JobEvent.cursor, got {cursor!r}")
    return parts[0], int(parts[1]), int(parts[2]) if len(parts) == 3 else 0


def _format_cursor(txid: str, row_id: int, part: int) -> str:
    return f"{txid}:{row_id}:{part}" if part else f"{txid}:{row_id}"


class EventStream:
    """``async for event in stream``; ``await stream.close()`` (or ``async with``) to stop.

    Create it with ``JobQueue.events(...)``; ``await stream.start()`` (done by ``async with`` and
    by the first iteration) fixes the starting point, so events committed after ``start`` returns
    are never missed.
    """

    def __init__(
        self,
        db: Database,
        queues: Sequence[str],
        *,
        after: str | None,
        tenant: str | None,
        any_tenant: bool,
        batch: int = 500,
    ) -> None:
        if isinstance(queues, str) or not queues:
            raise InvalidOption("queues", "must be a non-empty list of queue names")
        self._db = db
        self._queues = list(queues)
        self._tenant = tenant
        self._any_tenant = any_tenant
        self._batch = batch
        self._cursor: Cursor | None = None if after is None else _parse_cursor(after)
        self._delivered: Cursor | None = self._cursor
        self._skip_snapshot: str | None = None
        self._buffer: deque[tuple[Cursor, JobEvent]] = deque()
        self._incarnation: str | None = None
        # Crash safety (sql/schema/event_positions.sql): the newest position known to be on
        # disk, and later ones with the WAL insert position their read saw, oldest first.
        self._safe: Cursor | None = self._cursor
        self._unsafe: deque[tuple[int, Cursor]] = deque()
        self._wake = asyncio.Event()
        self._announced = False
        self._notifier = Notifier(db, {events_channel(db.schema): self._on_notify})
        self._reader = uuid.uuid4()
        self._renewing: asyncio.Task[None] | None = None
        self._reconnected = asyncio.Event()
        self._started = False
        self._closed = False

    def _on_notify(self, queue: str | None) -> None:
        if queue is None:  # the LISTEN came back: the server may have lost the registration
            self._reconnected.set()
        if queue is None or queue in self._queues:
            self._announced = True
            self._wake.set()

    async def start(self) -> None:
        """Begin following the queues: register as a reader (so that writers notify this stream) and
        fix the starting point. Idempotent; ``async with`` and the first read call it."""
        if self._started:
            return
        self._started = True
        await self._notifier.start()
        # Registered before the starting point is fixed: a write that did not see the
        # registration has committed by then (sql/schema/wake.sql), so it is either before the
        # start or read by the first read.
        self._incarnation = await self._register()
        self._renewing = asyncio.create_task(self._renew(), name="pgjobs-event-reader")
        while self._cursor is None:
            row = await self._db.fetchrow("events_start")
            assert row is not None
            # The start names ids a crash could hand out again until a durable write follows
            # it; a crash in between (another incarnation) takes the start again.
            if await self._db.fetchval("mark_event_stream_start") == row["incarnation"]:
                self._cursor = self._safe = (row["xmin"], 0, 0)
                self._skip_snapshot = row["snapshot"]
                self._incarnation = row["incarnation"]

    @property
    def cursor(self) -> str | None:
        """Resume point: the cursor of the last event delivered (None before the first)."""
        if self._delivered is None or self._delivered == ("0", 0, 0):
            return None
        return _format_cursor(*self._delivered)

    @property
    def buffered(self) -> int:
        """Events already read and not yet delivered."""
        return len(self._buffer)

    async def close(self) -> None:
        """Stop following: end the reader's registration and close the LISTEN connection. Iteration
        then ends."""
        self._closed = True
        self._wake.set()
        if self._renewing is not None:
            self._renewing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewing
            self._renewing = None
            with contextlib.suppress(*TRANSIENT_ERRORS):
                await self._db.fetch("end_event_reader", self._reader)
        await self._notifier.stop()

    async def _register(self) -> str:
        """Register (or renew) as a reader; the server's incarnation."""
        row = await self._db.fetchrow(
            "register_event_reader", self._reader, self._queues, READER_TTL_SECONDS
        )
        assert row is not None
        if row["incarnation"] == self._incarnation:
            self._flushed_to(row["flushed"])
        return str(row["incarnation"])

    async def _renew(self) -> None:
        """Renew the registration while the stream is open, and at once when the LISTEN
        connection comes back (a server restart empties the unlogged table). One that lapses
        (the database was out of reach) only costs latency: events are read by polling
        meanwhile."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._reconnected.wait(), READER_TTL_SECONDS / 3)
            self._reconnected.clear()
            try:
                await self._register()
            except TRANSIENT_ERRORS as exc:
                current = asyncio.current_task()
                if self._db.closed or (current is not None and current.cancelling()):
                    return  # the pool is gone, or asyncpg turned our cancellation into this
                logger.warning("could not renew an event stream's registration (%s)", exc)

    async def __aenter__(self) -> EventStream:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> JobEvent:
        await self.start()
        held_back_rounds = 0
        failures = 0
        while not self._buffer:
            if self._closed:
                raise StopAsyncIteration
            self._wake.clear()
            announced, self._announced = self._announced, False
            try:
                again = await self._read()
            except TRANSIENT_ERRORS as exc:
                if self._db.closed:
                    raise PoolClosed(
                        f"the event stream on {', '.join(self._queues)}", "it ended"
                    ) from exc
                # The database is out of reach (a restart, a crash, a dropped connection): the
                # stream waits it out, as a worker does, and reads on from where it was.
                failures += 1
                timeout = retry_delay(failures)
                logger.warning(
                    "event stream on %s: read failed (%s); retrying in %.1fs",
                    ", ".join(self._queues),
                    exc,
                    timeout,
                )
            else:
                failures = 0
                if again or self._buffer or self._closed:
                    continue
                if announced:
                    held_back_rounds = HELD_BACK_ROUNDS
                if held_back_rounds:
                    held_back_rounds -= 1
                    timeout = HELD_BACK_POLL_SECONDS
                else:
                    timeout = IDLE_POLL_SECONDS
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)
        self._delivered, event = self._buffer.popleft()
        return event

    async def _read(self) -> bool:
        """Read the next events into the (empty) buffer; whether to read again at once."""
        assert self._cursor is not None
        rows = await self._db.fetch(
            "read_events",
            self._queues,
            self._cursor[0],
            self._cursor[1],
            self._skip_snapshot,
            self._batch,
            self._any_tenant,
            self._tenant,
            self._cursor[2],
            self._incarnation,
        )
        head = rows[0]
        if head["incarnation"] != self._incarnation:
            self._back_to_safe(head["incarnation"])
            return True
        if head["id"] is not None:
            for row in rows:
                self._buffer.append(((row["txid"], row["id"], row["part"]), _event(row)))
            self._cursor = self._buffer[-1][0]
            self._unsafe.append((head["inserted"], self._cursor))
        self._flushed_to(head["flushed"])
        return False

    def _flushed_to(self, flushed: int) -> None:
        """The WAL is on disk up to ``flushed`` (this incarnation): positions whose read saw an
        insert position before it are safe."""
        while self._unsafe and self._unsafe[0][0] <= flushed:
            self._safe = self._unsafe.popleft()[1]

    def _back_to_safe(self, incarnation: str) -> None:
        """The server recovered from a crash since the last read: go back to the newest safe
        position (the buffer is empty: reads happen only once it is)."""
        assert self._safe is not None and not self._buffer
        logger.warning(
            "event stream on %s: the server recovered from a crash; reading again from the "
            "last position known to be on disk (events since then may come twice)",
            ", ".join(self._queues),
        )
        self._cursor = self._safe
        self._unsafe.clear()
        self._incarnation = incarnation


async def publish(
    db: Database,
    queue: str,
    event: str,
    data: Any = None,
    *,
    tenant: str | None = None,
    conn: Any = None,
) -> None:
    """Append a queue-level event (``job_id`` None); with ``conn`` it commits with the caller's
    transaction."""
    from pgjobs import jsonvalue, validation

    name = validation.text("event", event, optional=False)
    if not name:
        raise InvalidOption("event", "must be a non-empty name")
    try:
        encoded = jsonvalue.dumps(data if data is not None else {})
    except jsonvalue.NotJson as exc:
        raise InvalidOption("data", str(exc)) from None
    await db.fetch(
        "publish_event",
        validation.queue(queue),
        name,
        encoded,
        validation.text("tenant", tenant, max_bytes=256),
        events_channel(db.schema),
        conn=conn,
    )


async def trim(db: Database, queue: str, keep: int) -> int:
    """Keep the newest ``keep`` events of ``queue`` (every tenant's), at least that many: a
    row of several jobs' 'added' events goes whole, once the newer ones hold ``keep``. Returns
    how many events went. Readers whose cursor is older simply find them gone, as after the
    GC's trim."""
    from pgjobs import validation

    kept = validation.integer("keep", keep, 0, 2**31 - 1)
    return int(await db.fetchval("trim_queue_events", validation.queue(queue), kept))


def _event(row: Any) -> JobEvent:
    return JobEvent(
        cursor=_format_cursor(row["txid"], row["id"], row["part"]),
        queue=row["queue"],
        event=row["event"],
        job_id=row["job_id"],
        job_key=row["job_key"],
        tenant=row["tenant"],
        prev=row["prev"],
        data=json.loads(row["data"]) if row["data"] is not None else {},
        at=row["at"],
    )
