"""Operations whose meaning belongs to the package that writes a queue (its dialect, as
``describe_queue`` records it), found through entry points so that the engine imports none of
those packages.

A package supplies an operation under the entry-point group of its name, with the dialect as
the entry's name; ``pyproject.toml`` declares the BullMQ facade's::

    [project.entry-points."pgjobs.retime_schedule"]
    bullmq = "bullmq_compat.job_scheduler:retime"
"""

from __future__ import annotations

from collections.abc import Awaitable
from datetime import datetime
from functools import cache
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Protocol, cast

if TYPE_CHECKING:
    from pgjobs.client import JobQueue

RETIME_SCHEDULE = "pgjobs.retime_schedule"


class RetimeSchedule(Protocol):
    """Repeat schedule ``name`` on ``cron`` (in ``timezone``) or ``every`` seconds from now on,
    as the dialect's own API would; its next run, or None when there is no such schedule.
    Raises ``InvalidOption`` naming the dialect's option at fault, changing nothing."""

    def __call__(
        self,
        jobs: JobQueue,
        name: str,
        *,
        cron: str | None,
        every: float | None,
        timezone: str,
    ) -> Awaitable[datetime | None]: ...


@cache
def schedule_retimer(dialect: str) -> RetimeSchedule | None:
    """The installed package's way to re-time a schedule of a ``dialect`` queue, or None."""
    for entry in entry_points(group=RETIME_SCHEDULE, name=dialect):
        return cast(RetimeSchedule, entry.load())
    return None
