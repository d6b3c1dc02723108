"""BullMQ Pro's group methods of a Queue (docs.bullmq.io, "BullMQ Pro", "Groups"), on the
engine's groups (``JobQueue.pause_group`` and the rest). Python has no BullMQ Pro package: the
names follow the Node documentation, camelCase as the rest of the facade.

A group's jobs are its ready jobs (waiting or prioritized, due now), as BullMQ Pro keeps in a
group's list; its delayed jobs join it when due, and its active jobs are counted apart
(``getGroupActiveCount``). A group's status is one of ``waiting``, ``limited``, ``maxed``,
``paused``; a group with nothing to run and nothing held has none (``getGroupStatus`` is None,
and ``getGroups`` leaves it out)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pgjobs
from bullmq_compat.job import Job
from bullmq_compat.mapping import KIND, rate_limit, to_engine_priority
from bullmq_compat.paging import in_range, job_range
from pgjobs import JobFilter, SubState

STATUSES = ("waiting", "limited", "maxed", "paused")
_READY = (SubState.READY,)


def _group_id(group_id: Any) -> str:
    if not isinstance(group_id, str) or not group_id:
        raise pgjobs.InvalidOption(
            "groupId", f"must be a non-empty string (as in BullMQ Pro 3+), got {group_id!r}"
        )
    return group_id


def _slice(items: list[Any], start: int, end: int) -> list[Any]:
    """BullMQ's ``start``..``end`` (inclusive; -1: the last); ``end`` below -1 is refused, as
    BullMQ Pro's group getters refuse it."""
    if end < -1:
        raise ValueError("end must be greater than -1")
    return in_range(items, start, end)


class GroupMethods:
    """The group methods ``Queue`` has (``Queue`` supplies ``engine`` and ``qualifiedName``)."""

    qualifiedName: str

    async def engine(self) -> pgjobs.JobQueue:
        raise NotImplementedError

    async def _groups(self, group_id: str | None = None) -> list[pgjobs.Group]:
        jobs = await self.engine()
        return await jobs.list_groups(self.qualifiedName, group_id)

    async def pauseGroup(self, groupId: str) -> bool:
        """Pause a group (also one with no job yet): its jobs wait, its active ones finish.
        False when it was paused already."""
        jobs = await self.engine()
        return await jobs.pause_group(self.qualifiedName, _group_id(groupId))

    async def resumeGroup(self, groupId: str) -> bool:
        """Resume a group; False when it does not exist or is not paused."""
        jobs = await self.engine()
        return await jobs.resume_group(self.qualifiedName, _group_id(groupId))

    async def getGroups(self, start: int = 0, end: int = -1) -> list[dict[str, Any]]:
        """The groups with a status, as ``{id, status}``, waiting ones first, then limited,
        maxed and paused, each in the order they are served, from ``start`` to ``end``."""
        groups = [g for g in await self._groups() if g.status is not None]
        ordered = sorted(groups, key=lambda g: STATUSES.index(g.status or "waiting"))
        return _slice([{"id": g.key, "status": g.status} for g in ordered], start, end)

    async def getGroupsByStatus(
        self, status: str, start: int = 0, end: int = -1
    ) -> list[dict[str, Any]]:
        """The groups in ``status``, as ``{id, count}`` (count: its jobs), from ``start`` to
        ``end``."""
        if status not in STATUSES:
            raise pgjobs.InvalidOption("status", f"must be one of {list(STATUSES)}, got {status!r}")
        found = [
            {"id": g.key, "count": g.ready} for g in await self._groups() if g.status == status
        ]
        return _slice(found, start, end)

    async def getGroupsCount(self) -> int:
        """How many groups have a status."""
        return sum(1 for g in await self._groups() if g.status is not None)

    async def getGroupsCountByStatus(self) -> dict[str, int]:
        """How many groups are in each status."""
        counts = dict.fromkeys(STATUSES, 0)
        for group in await self._groups():
            if group.status is not None:
                counts[group.status] += 1
        return counts

    async def getGroupJobsCount(self, groupId: str) -> int:
        """How many jobs the group holds (waiting or prioritized, due)."""
        return sum(g.ready for g in await self._groups(_group_id(groupId)))

    async def getGroupsJobsCount(self, maxCount: int | None = None) -> int:
        """How many jobs all groups hold (``maxCount``, BullMQ Pro's batch size, is not
        needed: one query counts them)."""
        return sum(g.ready for g in await self._groups())

    async def getCountsPerPriorityForGroup(
        self, groupId: str, priorities: list[int]
    ) -> dict[str, int]:
        """How many of the group's jobs have each of ``priorities`` (its ``group.priority``; 0
        for none), keyed by the priority as text."""
        jobs = await self.engine()
        key = _group_id(groupId)
        counts: dict[str, int] = {}
        for priority in priorities:
            where = JobFilter(
                queue=self.qualifiedName, group_key=key, sub_state=_READY,
                priority=to_engine_priority(priority),
            )  # fmt: skip
            counts[str(priority)] = sum((await jobs.substate_counts(where)).values())
        return counts

    async def getGroupActiveCount(self, groupId: str) -> int:
        """How many jobs of the group are active."""
        return sum(g.running for g in await self._groups(_group_id(groupId)))

    async def getGroupStatus(self, groupId: str) -> str | None:
        """``waiting``, ``limited``, ``maxed`` or ``paused``; None for a group with nothing
        to run and nothing held."""
        found = await self._groups(_group_id(groupId))
        return found[0].status if found else None

    async def getGroupJobs(self, groupId: str, start: int = 0, end: int = -1) -> list[Job]:
        """The group's jobs in the order it runs them, from ``start`` to ``end`` (inclusive;
        -1: the last)."""
        jobs = await self.engine()
        where = JobFilter(
            queue=self.qualifiedName, kind=KIND, group_key=_group_id(groupId), sub_state=_READY
        )
        if end < -1:
            raise ValueError("end must be greater than -1")
        rows = await job_range(jobs, where, "claim", start, end, True)
        return [Job.from_row(self, row) for row in rows]  # type: ignore[arg-type]

    async def setGroupConcurrency(self, groupId: str, concurrency: int) -> None:
        """The group's own cap on active jobs, fleet-wide, before the workers' ``group``
        ``concurrency``."""
        jobs = await self.engine()
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise pgjobs.InvalidOption(
                "concurrency", f"must be a whole number >= 1, got {concurrency!r}"
            )
        await jobs.set_group_limits(self.qualifiedName, _group_id(groupId), concurrency=concurrency)

    async def getGroupConcurrency(self, groupId: str) -> int | None:
        """The group's own cap (``setGroupConcurrency``), or None."""
        found = await self._groups(_group_id(groupId))
        return found[0].concurrency if found else None

    async def deleteGroupConcurrency(self, groupId: str) -> None:
        """Drop the group's own cap: the workers' ``group`` ``concurrency`` holds it again."""
        jobs = await self.engine()
        await jobs.set_group_limits(self.qualifiedName, _group_id(groupId), concurrency=None)

    async def setGroupRateLimit(self, groupId: str, max: int, duration: int) -> None:
        """The group's own rate limit, ``max`` jobs per ``duration`` ms, before the workers'
        ``group`` ``limit``."""
        jobs = await self.engine()
        limit = rate_limit(max, duration)
        await jobs.set_group_limits(self.qualifiedName, _group_id(groupId), rate_limit=limit)

    async def deleteGroupRateLimit(self, groupId: str) -> None:
        """Drop the group's own rate limit: the workers' ``group`` ``limit`` holds it again."""
        jobs = await self.engine()
        await jobs.set_group_limits(self.qualifiedName, _group_id(groupId), rate_limit=None)

    async def getGroupRateLimitTtl(self, groupId: str, maxJobs: int | None = None) -> int:
        """Milliseconds until the group may start jobs again: its manual limit
        (``rateLimitGroup``) or its full window; 0 when it is not limited."""
        found = await self._groups(_group_id(groupId))
        if not found or found[0].status != "limited":
            return 0
        group = found[0]
        now = datetime.now(UTC)
        ends = [t for t in (group.limited_until, group.window_ends) if t is not None and t > now]
        return int((max(ends) - now).total_seconds() * 1000) if ends else 0

    async def deleteGroup(self, groupId: str) -> None:
        """Remove the group's jobs that have not started (waiting, prioritized, delayed,
        waiting-children; active ones finish) and clear its pause and limits."""
        jobs = await self.engine()
        key = _group_id(groupId)
        where = JobFilter(queue=self.qualifiedName, group_key=key, status=pgjobs.Status.PENDING)
        await jobs.purge(where)
        await jobs.reset_group(self.qualifiedName, key)

    async def deleteGroups(self) -> None:
        """``deleteGroup`` for every group."""
        for group in await self._groups():
            await self.deleteGroup(group.key)

    async def repairMaxedGroup(self, groupId: str) -> None:
        """Nothing to repair: a group is maxed only while its active jobs reach its cap
        (counted, never stored)."""
        _group_id(groupId)
