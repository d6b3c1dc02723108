"""The one seam between pgjobs and asyncpg: run named statements on the pool or on a
caller's connection, and turn "relation does not exist" into a clear SchemaMissing."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from pgjobs import pool, sql
from pgjobs.config import validate_schema
from pgjobs.errors import SchemaMissing

if TYPE_CHECKING:
    Connection: TypeAlias = asyncpg.Connection[Any] | PoolConnectionProxy[Any]
    """An asyncpg connection, or a connection acquired from a pool."""
else:  # asyncpg's classes are generic only in its stubs
    Connection = asyncpg.Connection | PoolConnectionProxy


T = TypeVar("T")
MAX_DEADLOCK_RETRIES = 5

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
    dsn: str | None = None, *, min_size: int = 1, max_size: int = 10, **kwargs: Any
) -> Any:
    """An asyncpg pool (``dsn`` or asyncpg's connection keywords) without the per-release reset
    query, which would double the round trips of every single-statement call, and with a spare
    lane (pgjobs.pool) that hands a clean connection from one call to the next without asyncpg's
    acquire and release. Code sharing it must not leave session state (use SET LOCAL inside
    transactions, transaction-scoped advisory locks)."""
    return await pool.create(
        dsn, min_size=min_size, max_size=max_size, reset=_keep_session, **kwargs
    )


class Database:
    """A pool plus the schema's named statements. Methods take an optional ``conn`` so the
    same statement runs inside a caller's transaction."""

    def __init__(
        self, pool: asyncpg.Pool, schema: str, *, owns_pool: bool, listen_dsn: str | None = None
    ) -> None:
        self.pool = pool
        self.schema = validate_schema(schema)
        self.statements = sql.queries(self.schema)
        self.owns_pool = owns_pool
        self.listen_dsn = listen_dsn
        """Where LISTEN connections go instead of the pool (a session that a transaction-mode
        pooler would not keep: PostgreSQL itself, or a session-mode pool)."""

    @classmethod
    async def connect(
        cls,
        dsn: str,
        schema: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        listen_dsn: str | None = None,
        **options: Any,
    ) -> Database:
        validate_schema(schema)
        pool = await create_pool(dsn, min_size=min_size, max_size=max_size, **options)
        return cls(pool, schema, owns_pool=True, listen_dsn=listen_dsn)

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
        self, name: str, *args: Any, conn: Any = None, parts: dict[str, str] | None = None
    ) -> list[asyncpg.Record]:
        """Run statement ``name``; ``parts`` fill its ``{marker}`` holes (only pgjobs' own
        builders, which emit column names and bind placeholders, never values)."""
        try:
            return await (conn or self.pool).fetch(self._sql(name, parts), *args)
        except SCHEMA_MISSING_ERRORS as exc:
            raise await self._schema_missing() from exc

    async def fetchrow(
        self, name: str, *args: Any, conn: Any = None, parts: dict[str, str] | None = None
    ) -> asyncpg.Record | None:
        try:
            return await (conn or self.pool).fetchrow(self._sql(name, parts), *args)
        except SCHEMA_MISSING_ERRORS as exc:
            raise await self._schema_missing() from exc

    async def fetchval(
        self, name: str, *args: Any, conn: Any = None, parts: dict[str, str] | None = None
    ) -> Any:
        try:
            return await (conn or self.pool).fetchval(self._sql(name, parts), *args)
        except SCHEMA_MISSING_ERRORS as exc:
            raise await self._schema_missing() from exc

    async def execute(self, name: str, *args: Any, conn: Any = None) -> str:
        """Run a statement that returns no rows (VACUUM, DDL); its status tag."""
        try:
            return await (conn or self.pool).execute(self._sql(name), *args)
        except SCHEMA_MISSING_ERRORS as exc:
            raise await self._schema_missing() from exc

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Connection]:
        """A pool connection inside a transaction: committed on exit, rolled back on error."""
        async with self.pool.acquire() as conn, conn.transaction():
            yield conn

    async def in_transaction(
        self, work: Callable[[Connection], Awaitable[T]], connection: Connection | None = None
    ) -> T:
        """``work(conn)`` in one transaction: a savepoint of the caller's ``connection`` (whose
        transaction decides), or one of our own, run again when PostgreSQL broke a deadlock
        (it rolled everything back, so nothing was half-written)."""
        if connection is not None:
            async with connection.transaction():
                return await work(connection)
        for attempt in range(MAX_DEADLOCK_RETRIES):
            try:
                async with self.transaction() as conn:
                    return await work(conn)
            except asyncpg.DeadlockDetectedError:
                if attempt == MAX_DEADLOCK_RETRIES - 1:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    async def schema_version(self) -> int | None:
        """The highest applied migration; None when the schema or its ledger is missing."""
        return (await self._schema_state())[0]

    async def _schema_state(self) -> tuple[int | None, str | None]:
        async with self.pool.acquire() as conn:
            tables = await conn.fetchrow(self._sql("ledger_tables"))
            assert tables is not None
            version = digest = None
            if tables["versions"]:
                version = await conn.fetchval(self._sql("schema_version"))
            if tables["definitions"]:
                digest = await conn.fetchval(self._sql("recorded_digest"))
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
