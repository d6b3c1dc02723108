"""Running pgjobs as a process (``pgjobs worker``, ``pgjobs scheduler``, ``pgjobs healthcheck``):
the registry named MODULE:ATTRIBUTE, logging as text or JSON lines, and signals.

The first SIGTERM or SIGINT stops claiming and lets running jobs finish for up to the shutdown
timeout, then gives the rest back to pending without using an attempt (their place in the
queue kept); the process exits 0. A second signal gives them back at once and exits 1.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import asyncpg

from pgjobs.kinds import Registry

logger = logging.getLogger("pgjobs.process")

EXTRA_FIELDS = ("job_id", "kind", "queue", "attempt", "max_attempts", "outcome", "error", "status")
"""The fields the worker's outcome and rescue log lines carry (``extra``)."""


class CommandError(Exception):
    """A problem the command reports in one line (exit status 2), with nothing started."""


CONNECTION_ERRORS = (OSError, ValueError, asyncpg.PostgresError, asyncpg.InterfaceError)
"""What a bad DSN, an unreachable server, an unknown database or role raise."""


def load_registry(target: str) -> Registry:
    """The Registry named ``MODULE:ATTRIBUTE`` (an attribute that is a callable is called, so
    a factory works too). The current directory is importable, as for ``python -m``."""
    found = load_object(target, "MODULE:REGISTRY, e.g. myapp.jobs:registry")
    if callable(found) and not isinstance(found, Registry):
        found = found()
    if not isinstance(found, Registry):
        raise CommandError(f"{target} is a {type(found).__name__}, not a pgjobs.Registry")
    return found


def load_object(target: str, expected: str = "MODULE:ATTRIBUTE") -> Any:
    """The attribute named ``MODULE:ATTRIBUTE``, imported with the current directory on the
    path; CommandError (one line: what failed) otherwise."""
    module_name, sep, attribute = target.partition(":")
    if not sep or not module_name or not attribute:
        raise CommandError(f"{target!r}: expected {expected}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # whatever the module raises while importing
        raise CommandError(
            f"importing {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from exc
    if not hasattr(module, attribute):
        raise CommandError(f"module {module_name!r} has no attribute {attribute!r}")
    return getattr(module, attribute)


class JsonLines(logging.Formatter):
    """One JSON object per record: time, level, logger, message, the job fields the worker
    gives (``EXTRA_FIELDS``) and, for an exception, its traceback."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in EXTRA_FIELDS:
            if hasattr(record, name):
                entry[name] = getattr(record, name)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure_logging(log_format: str, level: str) -> None:
    """Send the root logger's records to stderr at ``level``: ``"json"`` prints one JSON object
    per line (with the job fields of the record's ``extra``), anything else plain text."""
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(JsonLines())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


async def serve(run: Awaitable[None], stop: Callable[[], Awaitable[None]], what: str) -> int:
    """Await ``run`` with SIGTERM and SIGINT wired to ``stop`` (called again on a second
    signal). 0 after a graceful stop, 1 after a forced one."""
    loop = asyncio.get_running_loop()
    received: list[int] = []
    stopping: list[asyncio.Task[None]] = []

    def on_signal(signum: int) -> None:
        received.append(signum)
        name = signal.Signals(signum).name
        if len(received) == 1:
            logger.info("%s: %s received, stopping (a second signal forces)", what, name)
        else:
            logger.warning("%s: %s received again, giving running jobs back now", what, name)
        stopping.append(asyncio.ensure_future(stop()))

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum)
    try:
        await run
        if stopping:
            await asyncio.gather(*stopping)
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
    logger.info("%s: stopped", what)
    return 1 if len(received) > 1 else 0


@dataclass
class Health:
    """What ``pgjobs healthcheck`` found; healthy when every check passed."""

    checks: dict[str, str] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)

    def check(self, name: str, ok: bool, detail: str) -> None:
        self.checks[name] = detail
        if not ok:
            self.failed.append(name)

    @property
    def healthy(self) -> bool:
        return not self.failed


async def health(dsn: str | None, schema: str, *, queue: str | None, min_workers: int) -> Health:
    """Database reachable, schema current, and at least ``min_workers`` workers (of ``queue``,
    if given) heartbeating."""
    from pgjobs.client import JobQueue
    from pgjobs.errors import SchemaMissing

    result = Health()
    try:
        jobs = await JobQueue.connect(dsn, schema=schema, min_size=1, max_size=1)
    except (OSError, ValueError) as exc:
        result.check("database", False, f"unreachable: {exc}")
        return result
    except Exception as exc:  # asyncpg's errors: unknown database or role, auth ...
        result.check("database", False, f"{type(exc).__name__}: {exc}")
        return result
    try:
        result.check("database", True, "reachable")
        try:
            await jobs.check_schema()
            result.check("schema", True, f"{schema} current")
        except SchemaMissing as exc:
            result.check("schema", False, str(exc))
            return result
        workers = await jobs.list_workers(queue)
        where = f" of queue {queue}" if queue else ""
        result.check(
            "workers",
            len(workers) >= min_workers,
            f"{len(workers)} heartbeating{where} (need {min_workers})",
        )
        return result
    finally:
        await jobs.close()
