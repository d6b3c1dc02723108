"""The job page (``/jobs/{id}``), what an operator reads of one job in seconds: the last error
with the user's frames first, a timeline with durations, the newest logs first, a progress
bar, and a facade job in BullMQ's words. Pure helpers plus one read (``context``); the
template is ``templates/job.html``.

Times are shown one way everywhere on the page, in UTC to the second
(``2026-12-06 15:30:26 UTC``), each beside how long ago it was. The timeline names the worker
that started the latest attempt, and each failed attempt the worker that ran it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar, Protocol
from urllib.parse import urlencode

from starlette.exceptions import HTTPException

from pgjobs.client import JobQueue
from pgjobs.dashboard.formatting import duration, number, parse_moment, relative, stamp
from pgjobs.models import JobRow, LogLine, Status

LOGS_PER_PAGE = 50
MAX_LOGS_PAGE = 100_000
"""Beyond this page of logs the page answers 400 (5,000,000 lines back: nobody pages there)."""
ENGINE_PACKAGES = ("pgjobs", "bullmq_compat", "asyncio")
"""A frame whose file lies in one of these packages is the engine's (or the event loop's),
folded under the user's own frames."""
_ENGINE_PATH = re.compile(r"(?:^|[/\\])(" + "|".join(ENGINE_PACKAGES) + r")[/\\]")
_FRAME = re.compile(r'^  File "(?P<path>.*)", line (?P<line>\d+), in (?P<func>.*)$')
_FRAME_BODY = ("    ", "  [Previous line repeated")
_FINISHED_AS = {
    Status.COMPLETED: "completed",
    Status.DEAD: "failed",
    Status.CANCELLED: "cancelled",
}


class QueueLink(Protocol):
    """How the dashboard names a queue (``views.QueueName``): the name shown, the URL
    segment that leads to it."""

    @property
    def shown(self) -> str: ...

    @property
    def segment(self) -> str: ...


# -- the trace ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Frame:
    """One frame of a Python traceback: its ``File …`` line and the source lines under it."""

    text: str
    path: str
    engine: str | None
    """The engine package the frame's file lies in (``pgjobs``, ``bullmq_compat``,
    ``asyncio``), None for the user's code."""


@dataclass(frozen=True, slots=True)
class Stack:
    """Consecutive frames of one traceback, the user's apart from the engine's."""

    user: tuple[Frame, ...]
    engine: tuple[Frame, ...]
    frames: ClassVar[bool] = True

    @property
    def origins(self) -> list[str]:
        """The engine packages of the folded frames, in the order they first appear."""
        return list(dict.fromkeys(f.engine for f in self.engine if f.engine))


@dataclass(frozen=True, slots=True)
class Text:
    """Lines of a traceback that are no frame: its header, the exception line, a chained
    exception's separator."""

    text: str
    frames: ClassVar[bool] = False


def trace_parts(traceback: str) -> list[Stack | Text]:
    """A Python traceback (``traceback.format_exception``'s text) as its text and its stacks
    of frames, each stack's user frames apart from its engine frames (``ENGINE_PACKAGES``),
    both in their original order. Nothing is dropped: the parts hold every line. Anything
    not laid out as frames (an exception group's ``|`` lines) stays text."""
    parts: list[Stack | Text] = []
    frames: list[Frame] = []
    text: list[str] = []
    lines = traceback.rstrip("\n").split("\n")
    i = 0
    while i < len(lines):
        found = _FRAME.match(lines[i])
        if found is None:
            if frames:
                parts.append(_stack(frames))
                frames = []
            text.append(lines[i])
            i += 1
            continue
        if text:
            parts.append(Text("\n".join(text)))
            text = []
        body = [lines[i]]
        i += 1
        while i < len(lines) and lines[i].startswith(_FRAME_BODY):
            body.append(lines[i])
            i += 1
        engine = _ENGINE_PATH.search(found["path"])
        frames.append(Frame("\n".join(body), found["path"], engine[1] if engine else None))
    if frames:
        parts.append(_stack(frames))
    if text:
        parts.append(Text("\n".join(text)))
    return parts


def _stack(frames: list[Frame]) -> Stack:
    return Stack(tuple(f for f in frames if f.engine is None), tuple(f for f in frames if f.engine))


# -- the timeline ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Step:
    """A moment of the job's life (``at``) or the time between two (``seconds``)."""

    label: str
    at: datetime | None = None
    seconds: float | None = None
    note: str = ""
    ongoing: bool = False
    """A span still growing (``running for``, ``waiting for``) or ahead (``due in``)."""


def timeline(row: JobRow, now: datetime) -> list[Step]:
    """Added, waited, started (by which worker), ran, finished; for a job not finished, how
    long it has been running or waiting, or when it is due. ``started_at`` is the start of the
    latest attempt: with earlier attempts, the wait before it includes them, and says so."""
    steps = [Step("added", at=row.created_at)]
    earlier = max(row.attempts - (1 if row.status is Status.RUNNING else 0), 0)
    if row.started_at is not None:
        attempt = max(row.attempts, 1)
        steps.append(
            Step(
                "waited",
                seconds=(row.started_at - row.created_at).total_seconds(),
                note=(f"including {number(attempt - 1)} earlier attempt(s)" if attempt > 1 else ""),
            )
        )
        label = "started" if attempt <= 1 else f"started attempt {number(attempt)}"
        by = f"by worker {row.worker}" if row.worker else ""
        steps.append(Step(label, at=row.started_at, note=by))
    if row.finished_at is not None and row.status in _FINISHED_AS:
        start = row.started_at or row.created_at
        if row.started_at is not None:
            steps.append(Step("ran", seconds=(row.finished_at - start).total_seconds()))
        else:
            steps.append(
                Step(
                    "waited",
                    seconds=(row.finished_at - row.created_at).total_seconds(),
                    note="never started",
                )
            )
        steps.append(Step(_FINISHED_AS[row.status], at=row.finished_at))
        return steps
    if row.status is Status.RUNNING and row.started_at is not None:
        note = ""
        if row.heartbeat_at is not None:
            note = f"last heartbeat {relative(row.heartbeat_at, now)}"
        steps.append(
            Step(
                "running for",
                seconds=(now - row.started_at).total_seconds(),
                note=note,
                ongoing=True,
            )
        )
        return steps
    if row.status is Status.PENDING:
        if row.started_at is not None and earlier:
            failed_at = (
                parse_moment((row.last_error or {}).get("at"))
                if isinstance(row.last_error, dict)
                else None
            )
            if failed_at is not None and failed_at >= row.started_at:
                steps.append(Step("ran", seconds=(failed_at - row.started_at).total_seconds()))
                steps.append(Step(f"attempt {number(earlier)} failed", at=failed_at))
        if row.pending_deps:
            steps.append(
                Step(
                    "waiting for",
                    seconds=(now - row.created_at).total_seconds(),
                    note=f"{number(row.pending_deps)} prerequisite(s) to finish",
                    ongoing=True,
                )
            )
        elif row.run_at > now:
            steps.append(Step("due in", seconds=(row.run_at - now).total_seconds(), ongoing=True))
            steps.append(Step("due", at=row.run_at))
        else:
            since = max(row.run_at, steps[-1].at or row.created_at)
            steps.append(
                Step(
                    "waiting for",
                    seconds=(now - since).total_seconds(),
                    note="due, not yet claimed",
                    ongoing=True,
                )
            )
    return steps


# -- progress, BullMQ, logs ---------------------------------------------------------------------


def progress_percent(progress: Any) -> float | None:
    """The percentage a progress value shows as a bar: a number from 0 to 100 (what BullMQ's
    ``updateProgress(42)`` stores), or an object's numeric ``percentage``; None otherwise."""
    if isinstance(progress, Mapping):
        progress = progress.get("percentage")
    if isinstance(progress, bool) or not isinstance(progress, int | float):
        return None
    return float(progress) if 0 <= progress <= 100 else None


def bullmq_view(row: JobRow) -> dict[str, Any] | None:
    """A facade job's fields in BullMQ's names (None for an engine job): ``id`` (the custom
    jobId, else the engine id), ``opts``, ``data``, ``returnvalue`` (a completed job's)."""
    if row.kind != "bullmq":
        return None
    metadata = row.metadata if isinstance(row.metadata, dict) else {}
    opts = metadata.get("opts")
    return {
        "id": row.job_key if row.job_key is not None else str(row.id),
        "opts": opts if isinstance(opts, dict) else {},
        "data": row.payload,
        "returnvalue": row.output if row.status is Status.COMPLETED else None,
    }


@dataclass(frozen=True, slots=True)
class Logs:
    """One page of a job's logs, newest first, and where it stands among the others."""

    lines: list[LogLine]
    total: int
    page: int
    """1 is the newest page."""
    pages: int
    newer: str | None
    """The query string of the page of newer lines (None on the first page)."""
    older: str | None

    @property
    def first(self) -> int:
        """The number of the newest line shown, counted from the oldest (1)."""
        return self.total - (self.page - 1) * LOGS_PER_PAGE

    @property
    def last(self) -> int:
        return self.first - len(self.lines) + 1


def logs_page_of(query: Mapping[str, str]) -> int:
    """``?logs_page=N`` (1, the newest lines, when absent); 400 naming it when not a whole
    number from 1 to ``MAX_LOGS_PAGE``."""
    text = query.get("logs_page") or "1"
    if not text.isdigit() or not 1 <= int(text) <= MAX_LOGS_PAGE:
        raise HTTPException(
            400, f"logs_page must be a whole number from 1 to {MAX_LOGS_PAGE:,}, got {text!r}"
        )
    return int(text)


async def read_logs(
    jobs: JobQueue, job_id: int, page: int, query: Mapping[str, str], scope: dict[str, Any]
) -> Logs:
    """Page ``page`` of the job's log, newest first, with links to its neighbours that keep
    the rest of ``query`` (a status banner aside)."""
    offset = (page - 1) * LOGS_PER_PAGE
    found = await jobs.read_logs(
        job_id, offset=offset, limit=LOGS_PER_PAGE, newest_first=True, **scope
    )
    total = found.total
    if not found.lines and page > 1:  # past the end: the total still tells how far it goes
        total = (await jobs.read_logs(job_id, limit=1, newest_first=True, **scope)).total
    pages = max(-(-total // LOGS_PER_PAGE), 1)
    kept = {k: v for k, v in query.items() if k not in ("logs_page", "message", "sig")}

    def link(n: int) -> str:
        return urlencode({**kept, "logs_page": n}) + "#logs"

    return Logs(
        lines=found.lines,
        total=total,
        page=page,
        pages=pages,
        newer=link(min(page - 1, pages)) if page > 1 else None,
        older=link(page + 1) if page < pages else None,
    )


async def context(
    jobs: JobQueue,
    row: JobRow,
    query: Mapping[str, str],
    scope: dict[str, Any],
    *,
    queue_name: QueueLink | None = None,
    now: datetime | None = None,
) -> dict[str, Any]:
    """What ``job.html`` renders for ``row``, its logs read under ``scope`` (the tenant);
    ``queue_name``: how the dashboard names and reaches the job's queue (its engine name
    when not given)."""
    now = now or datetime.now(UTC)
    logs = await read_logs(jobs, row.id, logs_page_of(query), query, scope)
    last_error = row.last_error if isinstance(row.last_error, dict) else None
    errors = [e for e in reversed(row.errors or []) if isinstance(e, dict)]
    return {
        "job": row,
        "queue_shown": queue_name.shown if queue_name is not None else row.queue,
        "queue_segment": queue_name.segment if queue_name is not None else row.queue,
        "now": now,
        "logs": logs,
        "timeline": timeline(row, now),
        "last_error": last_error,
        "last_trace": trace_parts(str(last_error.get("traceback") or "")) if last_error else [],
        "errors": errors,
        "percent": progress_percent(row.progress),
        "bullmq": bullmq_view(row),
        "stamp": stamp,
        "relative": lambda moment: relative(moment, now),
        "duration": duration,
        "number": number,
        "parse_moment": parse_moment,
        "trace_parts": trace_parts,
    }
