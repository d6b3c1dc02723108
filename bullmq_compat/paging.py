"""BullMQ's ``start``..``end`` ranges of jobs, read from the engine a page at a time."""

from __future__ import annotations

import pgjobs
from pgjobs import JobFilter, JobRow

PAGE = 1000


async def job_range(
    jobs: pgjobs.JobQueue,
    where: JobFilter,
    order: pgjobs.JobOrder,
    start: int,
    end: int,
    asc: bool,
) -> list[JobRow]:
    """The jobs matching ``where`` in ``order`` (``asc``: first to last), from index ``start``
    to ``end`` (inclusive; -1: to the last)."""
    rows: list[JobRow] = []
    offset = max(start, 0)
    while end < 0 or offset <= end:
        size = PAGE if end < 0 else min(PAGE, end - offset + 1)
        page = await jobs.list_jobs(where, limit=size, offset=offset, oldest_first=asc, order=order)
        rows.extend(page)
        offset += len(page)
        if len(page) < size:
            break
    return rows
