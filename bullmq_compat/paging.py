"""BullMQ's ``start``..``end`` ranges (inclusive; a negative ``end``: to the last), of a list
or of jobs read from the engine a page at a time."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import pgjobs
from pgjobs import JobFilter, JobRow

PAGE = 1000

T = TypeVar("T")


def in_range(items: Sequence[T], start: int, end: int) -> list[T]:
    """``items[start..end]``, BullMQ's inclusive range (a negative ``end``: to the last)."""
    return list(items[start:] if end < 0 else items[start : end + 1])


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
