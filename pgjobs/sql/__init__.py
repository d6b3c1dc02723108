"""The engine's SQL, read once from the files beside this module.

- Named statements (``queries.sql`` and its siblings): a block under a ``-- name: NAME``
  header. ``{schema}`` is replaced by the validated schema name; values are always bind
  parameters. ``{fragment:NAME}`` stands for a piece of ``fragments.sql`` several statements
  share.
- ``migrations/``: numbered files (tables, indexes, data changes), applied once each.
- ``schema/``: the current definition of every function, trigger function and trigger, one
  concern per file, written to be re-applied; ``migrate`` applies them whenever their digest
  differs from the one the database recorded.
"""

from __future__ import annotations

import hashlib
import re
from functools import cache
from importlib import resources

from pgjobs.config import validate_schema

JOB_COLUMNS = (
    "id, queue, kind, name, payload, output, status, priority, run_at, attempts, max_attempts, "
    "deferrals, max_deferrals, backoff, dedup_key, group_key, flow_id, pending_deps, tenant, "
    "metadata, progress, last_error, created_at, started_at, finished_at, heartbeat_at, job_key, "
    "retention, stalls, errors, worker, "
    "{schema}.sub_state(status, pending_deps, waits, run_at, attempts) AS sub_state"
)

_HEADER = re.compile(r"^-- name: ([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)
_FRAGMENT = re.compile(r"^-- fragment: ([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)
_USE = re.compile(r"\{fragment:([a-z_][a-z0-9_]*)\}")
_FILES = (
    "migrate.sql",
    "queries.sql",
    "operations.sql",
    "flows.sql",
    "queues.sql",
    "schedules.sql",
    "maintenance.sql",
    "tracking.sql",
    "events.sql",
    "dedup.sql",
    "imports.sql",
    "groups.sql",
)


def _parse(text: str, source: str) -> dict[str, str]:
    parts = _HEADER.split(text)
    found: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in found:
            raise RuntimeError(f"duplicate SQL statement name {name!r} in {source}")
        found[name] = body.strip()
    return found


@cache
def _fragments() -> dict[str, str]:
    """``fragments.sql``: SQL shared by several statements, each under ``-- fragment: NAME``
    (its leading comment lines dropped)."""
    text = resources.files(__package__).joinpath("fragments.sql").read_text(encoding="utf-8")
    parts = _FRAGMENT.split(text)
    return {
        name: "\n".join(
            line for line in body.strip().splitlines() if not line.startswith("--")
        ).strip()
        for name, body in zip(parts[1::2], parts[2::2], strict=True)
    }


def _with_fragments(body: str, name: str) -> str:
    def fragment(match: re.Match[str]) -> str:
        try:
            return _fragments()[match.group(1)]
        except KeyError:
            raise RuntimeError(
                f"SQL statement {name!r} names no fragment {match.group(1)!r}"
            ) from None

    return _USE.sub(fragment, body)


@cache
def _templates() -> dict[str, str]:
    merged: dict[str, str] = {}
    for filename in _FILES:
        text = resources.files(__package__).joinpath(filename).read_text(encoding="utf-8")
        for name, body in _parse(text, filename).items():
            if name in merged:
                raise RuntimeError(f"SQL statement {name!r} is defined twice")
            merged[name] = _with_fragments(body, name)
    return merged


@cache
def queries(schema: str) -> dict[str, str]:
    """Every named statement, ready to run against ``schema``."""
    schema = validate_schema(schema)
    return {
        # {where} is left for sql.filters to fill at call time.
        name: body.replace("{job_columns}", JOB_COLUMNS).replace("{schema}", schema)
        for name, body in _templates().items()
    }


def latest_version() -> int:
    """The schema version this code needs: the number of migration files."""
    return len(migrations())


@cache
def migrations() -> list[tuple[int, str, str]]:
    """``(version, name, template)`` for each file in migrations/, in version order."""
    folder = resources.files(__package__).joinpath("migrations")
    found = []
    for entry in folder.iterdir():
        match = re.fullmatch(r"(\d{4})_([a-z0-9_]+)\.sql", entry.name)
        if match:
            found.append((int(match.group(1)), match.group(2), entry.read_text(encoding="utf-8")))
    found.sort()
    versions = [v for v, _, _ in found]
    if versions != list(range(1, len(versions) + 1)):
        raise RuntimeError(f"migration versions must be 1..N without gaps, found {versions}")
    return found


DEFINITION_FILES = (
    "sub_state.sql",
    "attempt_errors.sql",
    "flow_stats.sql",
    "job_edges_integrity.sql",
    "resolve_dependents.sql",
    "attach_prerequisites.sql",
    "groups.sql",
    "claim_jobs.sql",
    "hand_offs.sql",
    "wake.sql",
    "enqueue_job.sql",
    "sql_enqueue.sql",
    "finish_jobs.sql",
    "rescue_stalled_jobs.sql",
    "cancel_and_remove_jobs.sql",
    "job_events.sql",
    "finished_counts.sql",
    "job_logs_integrity.sql",
    "history.sql",
    "event_positions.sql",
)
"""The files of schema/, in applying order (a SQL function is checked against the functions it
calls when it is created; a trigger needs its function)."""


@cache
def definitions() -> list[tuple[str, str]]:
    """``(file name, template)`` of each schema definition file, in applying order."""
    folder = resources.files(__package__).joinpath("schema")
    present = sorted(e.name for e in folder.iterdir() if e.name.endswith(".sql"))
    if sorted(DEFINITION_FILES) != present:
        raise RuntimeError(f"sql/schema/ holds {present}; DEFINITION_FILES: {DEFINITION_FILES}")
    return [(name, folder.joinpath(name).read_text(encoding="utf-8")) for name in DEFINITION_FILES]


@cache
def definitions_digest() -> str:
    """The digest a database records once it runs these definitions."""
    digest = hashlib.sha256()
    for name, template in definitions():
        digest.update(name.encode() + b"\0" + template.encode() + b"\0")
    return digest.hexdigest()
