"""The one seam between pgjobs and asyncpg: run named statements on the pool or on a
caller's connection, each under a client-side deadline (network.py), and turn "relation does
not exist" into a clear SchemaMissing."""

from __future__ import annotations

import asyncio
import copy
import heapq
import logging
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractContextManager, asynccontextmanager
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, TypeVar

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from pgjobs import network, pool, sql
from pgjobs.config import validate_schema
from pgjobs.errors import DatabaseTimeout, SchemaMissing
from pgjobs.network import Timeouts

if TYPE_CHECKING:
    Connection: TypeAlias = asyncpg.Connection[Any] | PoolConnectionProxy[Any]
    """An asyncpg connection, or a connection acquired from a pool."""
else:  # asyncpg's classes are generic only in its stubs
    Connection = asyncpg.Connection | PoolConnectionProxy


T = TypeVar("T")
IsolationLevel: TypeAlias = Literal[
    "read_committed", "read_uncommitted", "serializable", "repeatable_read"
]
MAX_DEADLOCK_RETRIES = 5
logger = logging.getLogger("pgjobs.database")

UNBOUNDED_STATEMENTS = frozenset(
    {
        # bulk writes: their work grows with their input
        "enqueue_many", "enqueue_uniform", "insert_flow", "insert_keyless_flow",
        "insert_edges", "import_jobs", "import_logs", "reserve_ids", "hold_dedup_key",
        "record_imports", "imports_of", "check_imports", "imported",
        # operations by filter, and what waits for their lock
        "cancel_jobs", "in_flight_ids_where", "requeue_where", "remove_jobs",
        "count_running_where", "flow_job_ids", "purge_lock", "reschedule",
        # maintenance: garbage collection, metrics, vacuum, trims of the event log
        "try_lock", "gc_jobs", "gc_flows", "gc_dedup_holds", "gc_workers", "sweep_window",
        "sweep_count", "sweep_advance", "downsample", "dead_tuples", "vacuum_jobs_live",
        "vacuum_job_events", "history_batch", "create_history_partition", "move_to_history",
        "droppable_history_days", "drop_history_day", "set_lock_timeout", "vacuum_dedup_holds",
        "vacuum_queue_settings",
        "trim_queue_events", "trim_events",
        # reads whose time grows with history
        "substate_counts", "list_jobs", "queue_stats", "list_flows", "queue_metrics",
    }
)  # fmt: skip
"""Statements with no client-side deadline: a slow one is not a dead one. TCP keepalives
(network.py) still bound how long they wait on a dead network."""

_DEFAULT: Any = object()

TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.CannotConnectNowError,
    asyncpg.AdminShutdownError,
    # asyncpg's protocol can be left mid-operation by a connection the server terminated
    # ("cannot switch to state ..."): the connection is dropped, a retry gets another one.
    asyncpg.exceptions._base.InternalClientError,
    # The server rolled the statement back to break a lock cycle or a serialization conflict:
    # nothing was written, and every engine write is fenced, so running it again is safe.
    asyncpg.DeadlockDetectedError,
    asyncpg.SerializationError,
)
"""Errors after which the same statement may simply be retried (on another connection)."""

SCHEMA_MISSING_ERRORS: tuple[type[BaseException], ...] = (
    asyncpg.UndefinedTableError,
    asyncpg.UndefinedFunctionError,
    asyncpg.InvalidSchemaNameError,  # a function called in a schema that does not exist
)
"""What PostgreSQL raises for a statement that names what the schema does not have (yet)."""


async def _keep_session(conn: asyncpg.Connection) -> None:
    """Nothing beyond asyncpg's own cleanup (an open transaction is rolled back, listeners
    dropped): the engine leaves no session state behind (advisory locks are transaction-scoped,
    settings are SET LOCAL), so the default reset round trip on every release is skipped."""


async def create_pool(
    dsn: str | None = None,
    *,
    min_size: int = 1,
    max_size: int = 10,
    timeouts: Timeouts | dict[str, Any] | None = None,
    **kwargs: Any,
) -> Any:
    """An asyncpg pool (``dsn`` or asyncpg's connection keywords) without the per-release reset
    query, which would double the round trips of every single-statement call, and with a spare
    lane (pgjobs.pool) that hands a clean connection from one call to the next without asyncpg's
    acquire and release. Code sharing it must not leave session state (use SET LOCAL inside
    transactions, transaction-scoped advisory locks).

    Every connection it opens carries TCP keepalives and ``TCP_USER_TIMEOUT`` and is opened
    within ``timeouts.connect`` (``timeouts``: a ``Timeouts``, a dict of its fields, or the
    defaults; libpq's TCP parameters in ``dsn`` override them)."""
    stripped, resolved = network.split_dsn(dsn, Timeouts.of(timeouts))
    kwargs["connect"] = network.connector(resolved, kwargs.get("connect"))
    return await pool.create(
        stripped, min_size=min_size, max_size=max_size, reset=_keep_session, **kwargs
    )


def is_gone(conn: Any) -> bool:
    """``conn`` is closed: a pool's connection whose socket was closed is taken back by the
    pool at once, leaving its proxy detached."""
    if isinstance(conn, PoolConnectionProxy) and getattr(conn, "_con", None) is None:
        return True
    return bool(conn.is_closed())


def terminate(conn: Any) -> None:
    """Close ``conn`` at once, without a goodbye to the server (which may not be listening); a
    pool's connection gives its slot back. Nothing if it is gone already."""
    if not is_gone(conn):
        conn.terminate()


class _Deadlines:
    """The statement deadlines of one event loop, behind one timer: a statement's deadline is
    a heap entry, and the loop's timer is set for the earliest one still open. Entering and
    leaving a statement that answers in time costs a heap push and a flag, not a timer handle
    created and cancelled: the timer moves only for a deadline earlier than every open one."""

    __slots__ = ("_handle", "_heap", "_loop", "_order")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._heap: list[tuple[float, int, _Watchdog]] = []
        self._order = 0  # ties broken by arrival, never by comparing watchdogs
        self._handle: asyncio.TimerHandle | None = None

    @classmethod
    def of(cls, loop: asyncio.AbstractEventLoop) -> _Deadlines:
        deadlines = _DEADLINES.get(loop)
        if deadlines is None:
            deadlines = _DEADLINES[loop] = cls(loop)
        return deadlines

    def add(self, when: float, watchdog: _Watchdog) -> None:
        self._order += 1
        heapq.heappush(self._heap, (when, self._order, watchdog))
        if self._handle is None or when < self._handle.when():
            self._arm(when)

    def settled(self) -> None:
        """A statement was left: the entries at the head that are closed go (statements mostly
        end in the order they began, so the heap stays about as large as what is in flight)."""
        heap = self._heap
        while heap and heap[0][2].closed:
            heapq.heappop(heap)
        if not heap and self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _arm(self, when: float) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle = self._loop.call_at(when, self._expire)

    def _expire(self) -> None:
        self._handle = None
        heap = self._heap
        now = self._loop.time()
        while heap and (heap[0][2].closed or heap[0][0] <= now):
            _, _, watchdog = heapq.heappop(heap)
            if not watchdog.closed:
                watchdog.fire()
        if heap:
            self._arm(heap[0][0])


_DEADLINES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Deadlines] = (
    weakref.WeakKeyDictionary()
)


class _Watchdog:
    """A statement's deadline: if it is not left within ``seconds``, the connection is
    terminated (which fails the statement at once, and never hands a half-read connection back
    to the pool) and the statement's error becomes DatabaseTimeout. Its loop's ``_Deadlines``
    keeps the time. With ``seconds`` None there is no deadline, only the bound on a
    cancellation (``bound_cancellation``): what is left of the deadline, or ``grace`` seconds."""

    __slots__ = ("_conn", "_deadlines", "_grace", "_on_fire", "_seconds", "_what", "_when",
                 "closed", "fired")  # fmt: skip

    def __init__(
        self,
        conn: Any,
        seconds: float | None,
        what: str,
        on_fire: Callable[[], None],
        grace: float,
    ) -> None:
        self._conn = conn
        self._seconds = seconds
        self._what = what
        self._on_fire = on_fire
        self._grace = grace
        self._deadlines: _Deadlines | None = None
        self._when = 0.0
        self.closed = False
        self.fired = False

    def __enter__(self) -> _Watchdog:
        if self._seconds is not None:
            loop = asyncio.get_running_loop()
            self._when = loop.time() + self._seconds
            self._deadlines = _Deadlines.of(loop)
            self._deadlines.add(self._when, self)
        return self

    def fire(self) -> None:
        self.fired = self.closed = True
        logger.debug("no answer to %s within %.1fs: closing its connection", self._what,
                     self._seconds)  # fmt: skip
        try:
            terminate(self._conn)
        finally:
            self._on_fire()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        grace = self._grace
        self.closed = True
        if self._deadlines is not None:
            self._deadlines.settled()
            grace = max(self._when - asyncio.get_running_loop().time(), 0.0)
        if error is None:
            return
        if self.fired and isinstance(error, Exception):
            assert self._seconds is not None
            raise DatabaseTimeout(self._what, self._seconds) from error
        if isinstance(error, asyncio.CancelledError):
            bound_cancellation(self._conn, grace)


def bound_cancellation(conn: Any, grace: float) -> None:
    """A statement on ``conn`` was cancelled (its task was): asyncpg asks the server to cancel
    it, and the connection can be neither used nor handed back until the server's answer comes
    on it. On a connection gone silent that answer never comes, so the connection is closed if
    it is still waiting ``grace`` seconds from now."""
    raw = getattr(conn, "_con", conn)
    protocol = getattr(raw, "_protocol", None)
    if raw is None or protocol is None:
        return

    def close_if_still_cancelling() -> None:
        if raw._protocol is protocol and protocol._is_cancelling():
            logger.debug("a cancelled statement got no answer within %.1fs: closing", grace)
            raw.terminate()

    asyncio.get_running_loop().call_later(grace, close_if_still_cancelling)


class Database:
    """A pool plus the schema's named statements. Methods take an optional ``conn`` so the
    same statement runs inside a caller's transaction."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        schema: str,
        *,
        owns_pool: bool,
        listen_dsn: str | None = None,
        timeouts: Timeouts | dict[str, Any] | None = None,
    ) -> None:
        self.pool = pool
        self.schema = validate_schema(schema)
        self.statements = sql.queries(self.schema)
        self.owns_pool = owns_pool
        self.listen_dsn = listen_dsn
        """Where LISTEN connections go instead of the pool (a session that a transaction-mode
        pooler would not keep: PostgreSQL itself, or a session-mode pool)."""
        self.timeouts = Timeouts.of(timeouts)
        self.deadline: float | None = self.timeouts.statement
        """Seconds a statement run through this object may go unanswered (None: no limit);
        see ``with_deadline``."""

    def with_deadline(self, seconds: float | None) -> Database:
        """The same database (pool, schema, statements) whose statements have ``seconds`` as
        their deadline: what a worker's loops, a scheduler or an event stream use. Closing it
        leaves the pool open."""
        view = copy.copy(self)
        view.deadline = seconds
        view.owns_pool = False
        return view

    def _watch(self, conn: Any, what: str, deadline: Any = _DEFAULT) -> AbstractContextManager[Any]:
        """The deadline of one statement named ``what`` on ``conn``: this object's, none for
        UNBOUNDED_STATEMENTS, or ``deadline`` if given; and a bound on its cancellation."""
        if deadline is _DEFAULT:
            deadline = None if what in UNBOUNDED_STATEMENTS else self.deadline
        return _Watchdog(
            conn, deadline, what, self._connection_timed_out, deadline or self.timeouts.loop
        )

    def _connection_timed_out(self) -> None:
        """A connection missed its deadline: the idle ones opened before it likely share its
        fate (the same network), so they are dropped rather than each tried in turn."""
        drop_idle = getattr(self.pool, "drop_idle", None)
        if drop_idle is not None:
            drop_idle()

    @classmethod
    async def connect(
        cls,
        dsn: str,
        schema: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        listen_dsn: str | None = None,
        timeouts: Timeouts | dict[str, Any] | None = None,
        **options: Any,
    ) -> Database:
        validate_schema(schema)
        resolved = Timeouts.of(timeouts)
        pool = await create_pool(
            dsn, min_size=min_size, max_size=max_size, timeouts=resolved, **options
        )
        return cls(pool, schema, owns_pool=True, listen_dsn=listen_dsn, timeouts=resolved)

    async def close(self) -> None:
        if self.owns_pool:
            await self.pool.close()

    @property
    def closed(self) -> bool:
        """The pool is closing or closed: no statement can run on it any more, so a retry
        loop that meets this must end rather than wait."""
        return bool(self.pool.is_closing())

    def _sql(self, name: str, parts: dict[str, str] | None = None) -> str:
        statement = self.statements[name]
        for marker, text in (parts or {}).items():
            statement = statement.replace("{" + marker + "}", text)
        return statement

    async def fetch(
        self,
        name: str,
        *args: Any,
        conn: Any = None,
        parts: dict[str, str] | None = None,
        deadline: float | None = _DEFAULT,
    ) -> list[asyncpg.Record]:
        """Run statement ``name``; ``parts`` fill its ``{marker}`` holes (only pgjobs' own
        builders, which emit column names and bind placeholders, never values). ``deadline``:
        this call's, instead of the object's (seconds; None for none). A statement past its
        deadline raises DatabaseTimeout, its connection closed."""
        statement = self._sql(name, parts)
        try:
            if conn is not None:
                with self._watch(conn, name, deadline):
                    rows: list[asyncpg.Record] = await conn.fetch(statement, *args)
                    return rows
            async with self.pool.acquire() as own:
                with self._watch(own, name, deadline):
                    rows = await own.fetch(statement, *args)
                    return rows
        except SCHEMA_MISSING_ERRORS as exc:
            raise await self._schema_missing() from exc

    async def fetchrow(
        self,
        name: str,
        *args: Any,
        conn: Any = None,
        parts: dict[str, str] | None = None,
        deadline: float | None = _DEFAULT,
    ) -> asyncpg.Record | None:
        statement = self._sql(name, parts)
        try:
            if conn is not None:
                with self._watch(conn, name, deadline):
                    row: asyncpg.Record | None = await conn.fetchrow(statement, *args)
                    return row
            async with self.pool.acquire() as own:
                with self._watch(own, name, deadline):
                    row = await own.fetchrow(statement, *args)
                    return row
        except SCHEMA_MISSING_ERRORS as exc:
            raise await self._schema_missing() from exc

    async def fetchval(
        self,
        name: str,
        *args: Any,
        conn: Any = None,
        parts: dict[str, str] | None = None,
        deadline: float | None = _DEFAULT,
    ) -> Any:
        statement = self._sql(name, parts)
        try:
            if conn is not None:
                with self._watch(conn, name, deadline):
                    return await conn.fetchval(statement, *args)
            async with self.pool.acquire() as own:
                with self._watch(own, name, deadline):
                    return await own.fetchval(statement, *args)
        except SCHEMA_MISSING_ERRORS as exc:
            raise await self._schema_missing() from exc

    async def execute(self, name: str, *args: Any, conn: Any = None) -> str:
        """Run a statement that returns no rows (VACUUM, DDL); its status tag."""
        statement = self._sql(name)
        try:
            if conn is not None:
                with self._watch(conn, name):
                    status: str = await conn.execute(statement, *args)
                    return status
            async with self.pool.acquire() as own:
                with self._watch(own, name):
                    status = await own.execute(statement, *args)
                    return status
        except SCHEMA_MISSING_ERRORS as exc:
            raise await self._schema_missing() from exc

    @asynccontextmanager
    async def transaction(
        self, *, isolation: IsolationLevel | None = None, readonly: bool = False
    ) -> AsyncIterator[Connection]:
        """A pool connection inside a transaction: committed on exit, rolled back on error.
        BEGIN, COMMIT and ROLLBACK have this object's deadline; a ROLLBACK that cannot be sent
        closes the connection instead (the server then rolls back)."""
        async with self.pool.acquire() as conn:
            tx = conn.transaction(isolation=isolation, readonly=readonly)
            with self._watch(conn, "BEGIN"):
                await tx.start()
            try:
                yield conn
            except BaseException:
                await self._roll_back(conn, tx)
                raise
            with self._watch(conn, "COMMIT"):
                await tx.commit()

    async def _roll_back(self, conn: Any, tx: Any) -> None:
        if is_gone(conn):
            return  # the server rolled it back when the connection went
        try:
            with self._watch(conn, "ROLLBACK"):
                await tx.rollback()
        except BaseException as exc:
            terminate(conn)  # never hand back a connection left inside a transaction
            if not isinstance(exc, Exception):
                raise  # a cancellation goes on; an error gives way to the caller's

    async def in_transaction(
        self, work: Callable[[Connection], Awaitable[T]], connection: Connection | None = None
    ) -> T:
        """``work(conn)`` in one transaction: a savepoint of the caller's ``connection`` (whose
        transaction decides), or one of our own, run again when PostgreSQL broke a deadlock or
        refused a serialization conflict, such as a row it waited for having moved to a history
        partition (it rolled everything back, so nothing was half-written)."""
        if connection is not None:
            async with connection.transaction():
                return await work(connection)
        for attempt in range(MAX_DEADLOCK_RETRIES):
            try:
                async with self.transaction() as conn:
                    return await work(conn)
            except (asyncpg.DeadlockDetectedError, asyncpg.SerializationError):
                if attempt == MAX_DEADLOCK_RETRIES - 1:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    async def schema_version(self) -> int | None:
        """The highest applied migration; None when the schema or its ledger is missing."""
        return (await self._schema_state())[0]

    async def _schema_state(self) -> tuple[int | None, str | None]:
        async with self.pool.acquire() as conn:
            tables = await self.fetchrow("ledger_tables", conn=conn)
            assert tables is not None
            version = digest = None
            if tables["versions"]:
                version = await self.fetchval("schema_version", conn=conn)
            if tables["definitions"]:
                digest = await self.fetchval("recorded_digest", conn=conn)
        return (None if version is None else int(version)), digest

    async def check_schema(self) -> None:
        """Raise SchemaMissing, saying what to run, unless the schema is at this code's version
        and runs this code's function definitions."""
        version, digest = await self._schema_state()
        expected = sql.latest_version()
        if version is None or version < expected or digest != sql.definitions_digest():
            current = version is not None and version >= expected
            raise SchemaMissing(self.schema, version, expected, stale_definitions=current)

    async def _schema_missing(self) -> SchemaMissing:
        version, _ = await self._schema_state()
        return SchemaMissing(self.schema, version, sql.latest_version())
