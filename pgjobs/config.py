"""Settings shared by the client, the worker and the CLI, and the schema-name rule."""

from __future__ import annotations

import os
import re

from pgjobs.errors import InvalidSchemaName

DEFAULT_SCHEMA = "pgjobs"
"""Everything pgjobs creates lives in this one schema unless told otherwise."""

DEFAULT_LOCAL_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
"""Used when no DSN is given and none is in the environment, as BullMQ defaults to local Redis."""

# A plain identifier, short enough that derived names (channel, index names) stay under 63 bytes.
_SCHEMA_RE = re.compile(r"[a-z_][a-z0-9_]{0,47}")


def validate_schema(schema: str) -> str:
    """Return ``schema`` if it is safe to substitute into SQL as an identifier, else raise."""
    if not isinstance(schema, str) or not _SCHEMA_RE.fullmatch(schema):
        raise InvalidSchemaName(str(schema))
    return schema


def dsn_from_env(default: str | None = DEFAULT_LOCAL_DSN) -> str | None:
    """The DSN from ``PGJOBS_DSN``, then ``DATABASE_URL``, then ``default``."""
    return os.environ.get("PGJOBS_DSN") or os.environ.get("DATABASE_URL") or default


def notify_channel(schema: str) -> str:
    """The LISTEN/NOTIFY channel on which enqueues announce their queue."""
    return f"{validate_schema(schema)}_jobs"


def events_channel(schema: str) -> str:
    """The channel on which the event log announces the queue of each new event (the triggers
    of sql/schema/job_events.sql build the same name)."""
    return f"{validate_schema(schema)}_events"


def cancels_channel(schema: str) -> str:
    """The channel on which a cancel or a purge names each running job it ended (its id), so
    the worker running it can tell the handler at once (sql/schema/cancel_and_remove_jobs.sql
    builds the same name)."""
    return f"{validate_schema(schema)}_cancels"
