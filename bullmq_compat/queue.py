"""Queue: BullMQ's producer and inspection API on a pgjobs queue named ``<prefix>:<name>``."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pgjobs
from bullmq_compat import job_scheduler as schedulers
from bullmq_compat.connection import EngineConnection
from bullmq_compat.custom_errors import GroupMaxSizeExceededError
from bullmq_compat.groups import GroupMethods
from bullmq_compat.job import Job, job_id_of
from bullmq_compat.mapping import (
    DIALECT,
    KIND,
    NO_PRIORITY,
    durability,
    edge_policy,
    engine_queue,
    enqueue_options,
    event_count,
    events_max_len,
    facade_registry,
    group_max_size,
    json_data,
    options_key,
    rate_limit,
    stored_data,
    stored_data_array,
    to_engine_priority,
)
from bullmq_compat.paging import in_range, job_range
from bullmq_compat.types import BulkJob, JobOptions, QueueBaseOptions
from pgjobs import JobFilter, JobRow, JobSpec, SubState


class MetricsTime:
    """Numbers of one-minute points, as BullMQ names them."""

    ONE_MINUTE = 1
    FIVE_MINUTES = 5
    FIFTEEN_MINUTES = 15
    THIRTY_MINUTES = 30
    ONE_HOUR = 60
    ONE_WEEK = 10080
    TWO_WEEKS = 20160
    ONE_MONTH = 80640


DEFAULT_COUNT_TYPES = (
    "active",
    "completed",
    "delayed",
    "failed",
    "prioritized",
    "waiting",
    "waiting-children",
)
# BullMQ state -> the sub-states it is made of ("waiting" and "prioritized" split ready by
# priority: see _STATE_FILTERS)
_SUB_STATES: dict[str, tuple[SubState, ...]] = {
    "waiting": (SubState.READY,),
    "wait": (SubState.READY,),
    "prioritized": (SubState.READY,),
    "paused": (),
    "delayed": (SubState.DELAYED, SubState.RETRY),
    "active": (SubState.ACTIVE,),
    "completed": (SubState.COMPLETED,),
    "failed": (SubState.FAILED, SubState.CANCELLED),
    "waiting-children": (SubState.WAITING_CHILDREN,),
}


# BullMQ state -> (engine filter fields, the order BullMQ lists it in; asc=True is that order)
_STATE_FILTERS: dict[str, tuple[dict[str, Any], pgjobs.JobOrder]] = {
    "waiting": ({"sub_state": (SubState.READY,), "priority": NO_PRIORITY}, "claim"),
    "prioritized": ({"sub_state": (SubState.READY,), "max_priority": NO_PRIORITY - 1}, "claim"),
    "delayed": ({"sub_state": (SubState.DELAYED, SubState.RETRY)}, "due"),
    "active": ({"sub_state": (SubState.ACTIVE,)}, "started"),
    "completed": ({"sub_state": (SubState.COMPLETED,)}, "finished"),
    "failed": ({"sub_state": (SubState.FAILED, SubState.CANCELLED)}, "finished"),
    "waiting-children": ({"sub_state": (SubState.WAITING_CHILDREN,)}, "created"),
}
_ALIASES = {"wait": "waiting", "paused": "waiting"}

logger = logging.getLogger("bullmq_compat")

ADD_RETRY_SECONDS = 20.0
"""How long ``add``/``addBulk`` retry through a connection loss before raising it."""

OPTIONS_MEMO_SIZE = 256
"""Option sets a queue remembers at most (``Queue._options``); forgotten all at once when full."""

_ONE_JOB_OPTIONS = (
    "job_key",
    "dedup_key",
    "dedup_ttl",
    "dedup_extend",
    "dedup_replace",
    "dedup_keep_last",
    "lifo",
)
"""Engine options that name or order one job: a bulk with any of them goes job by job."""

_CLEANABLE = {"completed", "failed", "delayed", "wait", "waiting", "prioritized", "active"}


def vars_of(spec: JobSpec) -> dict[str, Any]:
    return {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)}


class Queue(GroupMethods):
    """``Queue(name, opts)``: ``opts`` may hold ``connection``, ``prefix`` (default ``bull``),
    ``schema`` (default ``pgjobs``) and ``defaultJobOptions``.

    ``connection`` (the constructor keyword, not the option) shares an open EngineConnection
    (a Worker's or a FlowProducer's own queues); such a queue leaves it open on close."""

    def __init__(
        self,
        name: str,
        opts: QueueBaseOptions | None = None,
        *,
        connection: EngineConnection | None = None,
    ) -> None:
        self.name = name
        self.opts: dict[str, Any] = dict(opts or {})
        self.prefix = self.opts.get("prefix", "bull")
        self.jobsOpts: dict[str, Any] = dict(self.opts.get("defaultJobOptions") or {})
        self.qualifiedName = engine_queue(self.prefix, name)
        self.durability = durability(self.opts)
        self._borrowed = connection is not None
        self.connection = connection or EngineConnection(self.opts)
        self._registry = facade_registry()
        self._record_events = events_max_len(self.opts) != 0
        self._options_memo: dict[Any, dict[str, Any]] = {}  # by options_key (Queue._options)
        self.closing = False
        self._described = False

    async def engine(self) -> pgjobs.JobQueue:
        """The engine JobQueue under this queue (opened on first use): the bridge to what
        BullMQ cannot do (transactional adds, flows beyond trees, tracking)."""
        jobs = await self.connection.open(self._registry)
        if not self._described:
            # the dashboard then shows this queue by its BullMQ name, in BullMQ's words
            await jobs.describe_queue(self.qualifiedName, label=self.name, dialect=DIALECT)
            self._described = True
        return jobs

    @property
    def jobScheduler(self) -> schedulers.JobScheduler:
        return schedulers.JobScheduler(self)

    def _filter(self, **fields: Any) -> JobFilter:
        return JobFilter(queue=self.qualifiedName, kind=KIND, **fields)

    # -- adding ----------------------------------------------------------------------------

    def _plain(self, name: str) -> dict[str, Any]:
        """The engine options of a job without options (the common case)."""
        return self._options(name, {})

    def _spec(
        self, name: str, data: Any, opts: Mapping[str, Any] | None
    ) -> tuple[JobSpec, dict[str, Any]]:
        merged = {**self.jobsOpts, **(opts or {})}
        options = self._options(name, merged)
        payload, raw = stored_data(data)
        if raw is not None:  # a copy: the options above may be shared
            options = {
                **options,
                "metadata": {**(options["metadata"] or {}), "bullmq": {"raw_data": raw}},
            }
        return JobSpec(KIND, payload, **options), merged

    async def _enqueue(
        self, specs: list[JobSpec], connection: Any, *, idempotent: bool
    ) -> list[pgjobs.EnqueueResult]:
        """Enqueue ``specs`` (in ``connection``'s transaction, if given), as ``_write`` says."""

        async def write(jobs: pgjobs.JobQueue, conn: Any) -> list[pgjobs.EnqueueResult]:
            return await jobs.enqueue_many(specs, connection=conn, durability=self.durability)

        return await self._write(write, connection, idempotent=idempotent)

    async def _write(
        self,
        write: Callable[[pgjobs.JobQueue, Any], Awaitable[list[pgjobs.EnqueueResult]]],
        connection: Any,
        *,
        idempotent: bool,
    ) -> list[pgjobs.EnqueueResult]:
        """Run ``write`` on ``connection`` (the caller's transaction) or on a pool connection,
        retrying through a short connection loss for up to ``ADD_RETRY_SECONDS``: always while
        no connection could be had (nothing reached the server), and after a failure
        mid-statement only when ``idempotent`` (every job has a jobId, so a retry finds what a
        lost reply created)."""
        if connection is not None:
            return await write(await self.engine(), connection)
        deadline = time.monotonic() + ADD_RETRY_SECONDS
        failures = 0
        while True:
            sent = False
            try:
                jobs = await self.engine()
                async with jobs.pool.acquire() as conn:
                    sent = True
                    return await write(jobs, conn)
            except pgjobs.TRANSIENT_ERRORS as exc:
                failures += 1
                if (sent and not idempotent) or time.monotonic() >= deadline:
                    raise
                delay = pgjobs.retry_delay(failures)
                logger.warning("add to %s failed (%s); retrying in %.1fs", self.name, exc, delay)
                await asyncio.sleep(delay)

    async def add(
        self,
        name: str,
        data: Any,
        opts: JobOptions | None = None,
        *,
        connection: Any = None,
    ) -> Job:
        """Add one job. An existing ``jobId`` returns the existing job's id (with the new data,
        as BullMQ does); a held deduplication id returns the holder's id. With ``parent``
        ``{id, queue}`` the job becomes a child the (waiting or active) parent waits for.
        ``connection`` (a pgjobs extension): an asyncpg connection in a transaction; the job is
        written in it and exists only if that transaction commits."""
        spec, merged = self._spec(name, data, opts)
        max_size = group_max_size(merged.get("group"))
        if max_size is not None:
            jobs = await self.engine()
            if connection is None:  # the group's bound, checked and kept in one transaction
                async with jobs.transaction() as conn:
                    return await self.add(name, data, opts, connection=conn)
            assert spec.group_key is not None
            held = await jobs.lock_group(self.qualifiedName, spec.group_key, connection=connection)
            if held >= max_size:
                raise GroupMaxSizeExceededError(
                    f"Group {spec.group_key} has reached its max size of {max_size} jobs"
                )
        if merged.get("parent"):
            jobs = await self.engine()
            result = await self._add_child(jobs, spec, merged, connection)
        else:
            idempotent = spec.job_key is not None
            result = (await self._enqueue([spec], connection, idempotent=idempotent))[0]
            jobs = await self.engine()
        holder = await self._duplicate(jobs, merged, result)
        return self.added(name, data, merged, result.id, holder)

    async def addBulk(self, jobs: Sequence[BulkJob], *, connection: Any = None) -> list[Job]:
        """Add many jobs in one statement (all or nothing); ``connection`` as for ``add``."""
        for job in jobs:
            if group_max_size({**self.jobsOpts, **(job.get("opts") or {})}.get("group")):
                raise pgjobs.InvalidOption(
                    "group.maxSize", "is not available for addBulk (as in BullMQ Pro): use add"
                )
        if jobs:
            added = await self._add_uniform_bulk(jobs, connection)
            if added is not None:
                return added
        specs = [self._spec(j["name"], j.get("data"), j.get("opts")) for j in jobs]
        engine = await self.engine()
        if any(merged.get("parent") for _, merged in specs):
            # children of existing parents: one by one, all in one transaction
            if connection is None:
                async with engine.transaction() as conn:
                    return await self.addBulk(jobs, connection=conn)
            return [
                await self.add(j["name"], j.get("data"), j.get("opts"), connection=connection)
                for j in jobs
            ]
        idempotent = all(spec.job_key is not None for spec, _ in specs)
        results = await self._enqueue(
            [spec for spec, _ in specs], connection, idempotent=idempotent
        )
        holders = [
            await self._duplicate(engine, merged, result)
            for (_, merged), result in zip(specs, results, strict=True)
        ]
        return [
            self.added(j["name"], j.get("data"), merged, result.id, holder)
            for j, (_, merged), result, holder in zip(jobs, specs, results, holders, strict=True)
        ]

    async def _add_uniform_bulk(self, jobs: Sequence[BulkJob], connection: Any) -> list[Job] | None:
        """Jobs that share their options (most often none) and that none of which names one
        job (no jobId, deduplication, parent or lifo): one engine batch, the options mapped
        once per name, each job with its own name and data, all the data as one JSON array.
        None otherwise, or when a job's data needs its exact JSON kept beside it or is not
        JSON: then each job goes with its own options, and a bad one is refused as by
        ``add``."""
        given = jobs[0].get("opts") or {}
        if any((j.get("opts") or {}) != given for j in jobs):
            return None
        merged = {**self.jobsOpts, **given}
        if merged.get("parent"):
            return None
        names = [j["name"] for j in jobs]
        if not all(isinstance(name, str) for name in names):
            return None  # the general path names the bad one
        options = {name: self._options(name, merged) for name in set(names)}
        shared = options[names[0]]
        if any(shared.get(option) for option in _ONE_JOB_OPTIONS):
            return None
        payloads = stored_data_array([j.get("data") for j in jobs])
        if payloads is None:
            return None
        batch_options = {
            k: v for k, v in shared.items() if k != "name" and k not in _ONE_JOB_OPTIONS
        }
        engine_names = [options[name]["name"] for name in names]

        async def write(engine: pgjobs.JobQueue, conn: Any) -> list[pgjobs.EnqueueResult]:
            return await engine.enqueue_batch(
                KIND,
                payloads,
                names=engine_names,
                connection=conn,
                durability=self.durability,
                **batch_options,
            )

        results = await self._write(write, connection, idempotent=False)
        return Job.of_bulk(
            self,
            ((j["name"], j.get("data"), r.id) for j, r in zip(jobs, results, strict=True)),
            merged,
        )

    def _options(self, name: str, merged: dict[str, Any]) -> dict[str, Any]:
        """The engine options of a job named ``name`` with BullMQ options ``merged``. An
        application passes a few sets (its queues' ``defaultJobOptions``, mostly): each is
        mapped once and remembered by value (``options_key``), with its own copy of the
        options it stores, so that a caller changing its dicts afterwards changes nothing
        remembered; errors are raised each time."""
        key = options_key(name, merged)
        options = None if key is None else self._options_memo.get(key)
        if options is None:
            options = enqueue_options(
                name, merged, self.prefix, self.name, events=self._record_events
            )
            if key is not None:
                options["metadata"] = copy.deepcopy(options["metadata"])
                if len(self._options_memo) >= OPTIONS_MEMO_SIZE:
                    self._options_memo.clear()
                self._options_memo[key] = options
        return options

    async def _add_child(
        self, jobs: pgjobs.JobQueue, spec: JobSpec, opts: dict[str, Any], connection: Any
    ) -> pgjobs.EnqueueResult:
        parent = opts["parent"]
        if not isinstance(parent, dict) or "id" not in parent or "queue" not in parent:
            raise pgjobs.InvalidOption(
                "parent",
                f"must be {{id, queue}} (queue: the parent's qualifiedName), got {parent!r}",
            )
        parent_id = await self.engine_id_of(jobs, str(parent["queue"]), str(parent["id"]))
        if parent_id is None:
            raise TypeError(f"Missing key for parent job {parent['queue']}:{parent['id']}. addJob")
        fields = {k: v for k, v in vars_of(spec).items() if k not in ("kind", "input")}
        try:
            # an existing jobId becomes the parent's child, unless another parent has it. The
            # parent stays where it is (BullMQ's addJob only adds to its dependencies): a
            # waiting one stays claimable, its completion refused until its children end.
            return await jobs.add_prerequisite(
                parent_id,
                spec.kind,
                spec.input,
                policy=edge_policy(opts),
                connection=connection,
                sole_dependent=True,
                wait=False,
                **fields,
            )
        except pgjobs.PrerequisiteTaken:
            raise TypeError(
                f"The parent job {parent['queue']}:{parent['id']} cannot be replaced. addJob"
            ) from None

    async def engine_id_of(
        self, jobs: pgjobs.JobQueue, qualified_queue: str, job_id: str
    ) -> int | None:
        """The engine id of BullMQ job ``job_id`` in queue ``<prefix>:<name>``."""
        row = await self._row_of(jobs, qualified_queue, job_id)
        return None if row is None else row.id

    async def _row_of(
        self, jobs: pgjobs.JobQueue, qualified_queue: str, job_id: str
    ) -> JobRow | None:
        """BullMQ job ``job_id`` of queue ``<prefix>:<name>``, looked for in that queue only:
        the job whose key it is (a custom jobId, an id a migration brought from Redis, a key a
        migration gave a job whose automatic id Redis also used), else the job of that queue
        with no key whose engine id it is (an automatic id)."""
        rows = await jobs.list_jobs(JobFilter(queue=qualified_queue, job_key=job_id), limit=1)
        if rows:
            return rows[0]
        if job_id.isdigit() and len(job_id) < 19:
            row = await jobs.get(int(job_id))
            if row is not None and row.queue == qualified_queue and row.job_key is None:
                return row
        return None

    async def _duplicate(
        self, jobs: pgjobs.JobQueue, opts: dict[str, Any], result: pgjobs.EnqueueResult
    ) -> str | None:
        """For a dropped add: the holder's BullMQ id, after writing the event BullMQ writes:
        ``duplicated`` when its jobId is taken, else ``deduplicated`` {jobId: the holder,
        deduplicationId, deduplicatedJobId: the add's jobId}, which a replacing add (its
        holder not delayed) does not write unless it was kept (keepLastIfActive). None when the
        add was not dropped; an add that replaced a delayed holder writes ``deduplicated``
        {jobId: the new job, deduplicatedJobId: the replaced one}."""
        dedup = opts.get("deduplication") or {}
        job_id = opts.get("jobId") or None  # an empty jobId is none (an automatic id)
        if result.replaced is not None:
            if self._record_events:
                await self._deduplicated(
                    jobs,
                    job_id_of(result.id, None if job_id is None else str(job_id)),
                    dedup,
                    job_id_of(result.replaced, result.replaced_key),
                )
            return None
        if not result.duplicate:
            return None
        row = await jobs.get(result.id)
        holder = job_id_of(result.id, row.job_key if row else None)
        if job_id is not None and holder == str(job_id):
            if self._record_events:
                await jobs.publish_event(self.qualifiedName, "duplicated", {"jobId": holder})
            return holder
        if self._record_events and (result.kept or not dedup.get("replace")):
            # an automatic id is not drawn for a dropped add: deduplicatedJobId is None then
            await self._deduplicated(jobs, holder, dedup, None if job_id is None else str(job_id))
        return holder

    async def _deduplicated(
        self, jobs: pgjobs.JobQueue, job_id: str, dedup: dict[str, Any], other: str | None
    ) -> None:
        await jobs.publish_event(
            self.qualifiedName,
            "deduplicated",
            {
                "jobId": job_id,
                "deduplicationId": str(dedup.get("id")),
                "deduplicatedJobId": other,
            },
        )

    def added(
        self,
        name: str,
        data: Any,
        opts: dict[str, Any],
        engine_id: int,
        holder: str | None = None,
    ) -> Job:
        """The Job that an add of ``name`` returns, for the engine job ``engine_id`` (``holder``:
        the id of a deduplication holder returned instead)."""
        job_id = holder if holder is not None else opts.get("jobId") or None
        job = Job(self, name, data, opts, str(job_id) if job_id is not None else str(engine_id))
        job.engine_id = engine_id
        return job

    # -- reading ---------------------------------------------------------------------------

    async def getJob(self, job_id: str) -> Job | None:
        """The job with this id: a custom ``jobId``, or an automatic (numeric) id."""
        jobs = await self.engine()
        row = await self._row_of(jobs, self.qualifiedName, str(job_id))
        return None if row is None else await Job.read(self, row)

    async def getJobState(self, job_id: str) -> str:
        """The BullMQ state of the job with this id, "unknown" if there is none."""
        job = await self.getJob(job_id)
        return "unknown" if job is None else await job.getState()

    async def getJobCounts(self, *types: str) -> dict[str, int]:
        """Counts per BullMQ state (the default seven when no type is named)."""
        jobs = await self.engine()
        wanted = types or DEFAULT_COUNT_TYPES
        counts = await jobs.substate_counts(self._filter())
        unprioritized = (await jobs.substate_counts(self._filter(priority=NO_PRIORITY)))[
            SubState.READY
        ]
        result: dict[str, int] = {}
        for state in wanted:
            if state in ("waiting", "wait"):
                result[state] = unprioritized
            elif state == "prioritized":
                result[state] = counts[SubState.READY] - unprioritized
            elif state in _SUB_STATES:
                result[state] = sum(counts[s] for s in _SUB_STATES[state])
            else:
                raise ValueError(f"unknown job state {state!r}")
        return result

    async def getJobCountByTypes(self, *types: str) -> int:
        """How many jobs are in the named states, added up."""
        return sum((await self.getJobCounts(*types)).values())

    async def count(self) -> int:
        """How many jobs wait to run: waiting, prioritized, delayed and waiting-children."""
        return await self.getJobCountByTypes(
            "waiting", "prioritized", "delayed", "waiting-children"
        )

    async def getWaitingCount(self) -> int:
        """How many jobs are waiting (without a priority)."""
        return await self.getJobCountByTypes("waiting")

    async def getActiveCount(self) -> int:
        """How many jobs are active."""
        return await self.getJobCountByTypes("active")

    async def getCompletedCount(self) -> int:
        """How many completed jobs are kept."""
        return await self.getJobCountByTypes("completed")

    async def getFailedCount(self) -> int:
        """How many failed jobs are kept."""
        return await self.getJobCountByTypes("failed")

    async def getDelayedCount(self) -> int:
        """How many jobs are delayed."""
        return await self.getJobCountByTypes("delayed")

    async def getPrioritizedCount(self) -> int:
        """How many jobs with a priority wait their turn."""
        return await self.getJobCountByTypes("prioritized")

    async def getWaitingChildrenCount(self) -> int:
        """How many jobs wait for their children."""
        return await self.getJobCountByTypes("waiting-children")

    async def getCountsPerPriority(self, priorities: list[int]) -> dict[str, int]:
        """Waiting (0) and prioritized jobs per BullMQ priority."""
        jobs = await self.engine()
        counts: dict[str, int] = {}
        for priority in dict.fromkeys(priorities):
            ready = await jobs.substate_counts(
                self._filter(priority=to_engine_priority(priority), sub_state=(SubState.READY,))
            )
            counts[str(priority)] = ready[SubState.READY]
        return counts

    async def getDeduplicationJobId(self, deduplication_id: str) -> str | None:
        """The id of the job holding this deduplication id, if any."""
        jobs = await self.engine()
        holder = await jobs.dedup_holder(self.qualifiedName, str(deduplication_id))
        if holder is None:
            return None
        row = await jobs.get(holder)
        return job_id_of(holder, row.job_key if row is not None else None)

    async def removeDeduplicationKey(self, deduplication_id: str) -> int:
        """Free the deduplication id now; 1 if it was held, else 0."""
        jobs = await self.engine()
        return int(await jobs.release_dedup_key(self.qualifiedName, str(deduplication_id)))

    def sanitizeJobTypes(self, types: Any) -> list[str]:
        """The job types named, deduplicated; BullMQ's seven when none."""
        names = [types] if isinstance(types, str) else list(types or [])
        return list(dict.fromkeys(names)) if names else list(DEFAULT_COUNT_TYPES)

    async def getJobs(
        self,
        types: str | list[str] | None = None,
        start: int = 0,
        end: int = -1,
        asc: bool = False,
    ) -> list[Job]:
        """Jobs in these states, type after type, each in BullMQ's order (waiting and
        prioritized in the order they will run, delayed by due time, active by start, completed
        and failed by finish time; ``asc`` first to last, else last first), each from index
        ``start`` to ``end`` (inclusive; -1 = to its end)."""
        names = [_ALIASES.get(name, name) for name in self.sanitizeJobTypes(types)]
        jobs = await self.engine()
        rows: list[JobRow] = []
        for name in dict.fromkeys(names):
            if name not in _STATE_FILTERS:
                raise ValueError(f"unknown job state {name!r}")
            fields, order = _STATE_FILTERS[name]
            rows.extend(await job_range(jobs, self._filter(**fields), order, start, end, asc))
        return [Job.from_row(self, row) for row in rows]

    async def getWaiting(self, start: int = 0, end: int = -1) -> list[Job]:
        """The waiting jobs, from ``start`` to ``end`` (inclusive; -1: the last)."""
        return await self.getJobs(["waiting"], start, end, asc=True)

    async def getPrioritized(self, start: int = 0, end: int = -1) -> list[Job]:
        """The prioritized jobs, from ``start`` to ``end`` (inclusive; -1: the last)."""
        return await self.getJobs(["prioritized"], start, end, asc=True)

    async def getActive(self, start: int = 0, end: int = -1) -> list[Job]:
        """The active jobs, from ``start`` to ``end`` (inclusive; -1: the last)."""
        return await self.getJobs(["active"], start, end, asc=True)

    async def getDelayed(self, start: int = 0, end: int = -1) -> list[Job]:
        """The delayed jobs, from ``start`` to ``end`` (inclusive; -1: the last)."""
        return await self.getJobs(["delayed"], start, end, asc=True)

    async def getWaitingChildren(self, start: int = 0, end: int = -1) -> list[Job]:
        """The jobs waiting for their children, from ``start`` to ``end`` (inclusive; -1: the
        last)."""
        return await self.getJobs(["waiting-children"], start, end, asc=True)

    async def getCompleted(self, start: int = 0, end: int = -1) -> list[Job]:
        """The kept completed jobs, from ``start`` to ``end`` (inclusive; -1: the last)."""
        return await self.getJobs(["completed"], start, end, asc=False)

    async def getFailed(self, start: int = 0, end: int = -1) -> list[Job]:
        """The kept failed jobs, from ``start`` to ``end`` (inclusive; -1: the last)."""
        return await self.getJobs(["failed"], start, end, asc=False)

    async def getJobLogs(
        self, job_id: str, start: int = 0, end: int = -1, asc: bool = True
    ) -> dict[str, Any]:
        """A job's log lines from ``start`` to ``end`` (inclusive; -1: the last), with their total:
        ``{"logs": [...], "count": n}``; none for an unknown job."""
        job = await self.getJob(job_id)
        if job is None or job.engine_id is None:
            return {"logs": [], "count": 0}
        jobs = await self.engine()
        page = await jobs.read_logs(job.engine_id, offset=0, limit=10_000)
        lines = [line.line for line in page.lines]
        if not asc:
            lines.reverse()
        selected = in_range(lines, start, end)
        return {"logs": selected, "count": page.total}

    async def getMetrics(self, type: str, start: int = 0, end: int = -1) -> dict[str, Any]:
        """Finished jobs per minute, newest first, as BullMQ's ``getMetrics`` shapes them:
        ``{"meta": {"count", "prevTS", "prevCount"}, "data": [...], "count": n}``. ``failed``
        counts final failures. Points cover two weeks (MetricsTime.TWO_WEEKS), from the engine's
        metrics rollup (no worker setting needed)."""
        if type not in ("completed", "failed"):
            raise ValueError(f"getMetrics type must be 'completed' or 'failed', got {type!r}")
        jobs = await self.engine()
        now = datetime.now(UTC).replace(second=0, microsecond=0) + timedelta(minutes=1)
        buckets = await jobs.queue_metrics(
            self.qualifiedName, "minute", now - timedelta(minutes=MetricsTime.TWO_WEEKS), now
        )
        points = [b.completed if type == "completed" else b.dead for b in reversed(buckets)]
        total = sum(points)
        data = in_range(points, start, end)
        newest = buckets[-1].start if buckets else now
        return {
            "meta": {"count": total, "prevTS": int(newest.timestamp() * 1000), "prevCount": total},
            "data": data,
            "count": len(points),
        }

    # -- job schedulers --------------------------------------------------------------------

    async def upsertJobScheduler(
        self,
        job_scheduler_id: str,
        repeat_opts: dict[str, Any],
        job_name: Any = None,
        job_data: Any = None,
        opts: dict[str, Any] | None = None,
        override: bool = True,
        producer_id: str | None = None,
    ) -> Job | None:
        """Create or replace a scheduler: ``every`` (ms) or ``pattern`` (cron, with ``tz``),
        ``limit``, ``count``, ``startDate``, ``endDate``, ``immediately``. Accepts Python's
        ``(job_name, job_data, opts)`` and Node's ``{name, data, opts}`` template. Returns the
        job of its next iteration (``repeat:<id>:<ms>``, created now, replacing one an earlier
        upsert made that has not started), or None when none is left (``limit`` reached,
        ``endDate`` past): the scheduler is then not created. Whichever worker starts an
        iteration creates the next. A pattern whose next iteration's job id is taken (by a job
        of this scheduler still there) raises TypeError, as BullMQ does, unless the upsert
        replaced the next iteration and that job is an iteration of it already started: the
        new iteration then takes its id (BullMQ overwrites it; the started one keeps running
        or finished under its automatic id). ``override=False``
        leaves an existing scheduler as it is; with ``producer_id``, the id of its pending
        iteration, it makes the next iteration (what BullMQ's worker does with it)."""
        name, data, template_opts = schedulers.template(job_name, job_data, opts)
        merged = {**self.jobsOpts, **template_opts}
        repeat = dict(repeat_opts or {})
        if schedulers.first_run(repeat, None, merged) is None:
            return None
        jobs = await self.engine()
        schedule_name = schedulers.schedule_name(self.qualifiedName, job_scheduler_id)
        existing = await jobs.get_schedule(schedule_name)
        if existing is not None and not override:
            if producer_id is not None and existing.pending_job_id is not None:
                producer = await self.engine_id_of(jobs, self.qualifiedName, str(producer_id))
                if producer == existing.pending_job_id:
                    await jobs.advance_schedule(schedule_name, producer)
        else:
            arguments = schedulers.upsert_arguments(
                self.prefix,
                self.name,
                job_scheduler_id,
                repeat,
                name,
                json_data(data),
                merged,
                previous=existing,
            )
            await schedulers.store(jobs, arguments, repeat)
        schedule = await jobs.get_schedule(schedule_name)
        if schedule is None or schedule.pending_job_id is None:
            return None
        row = await jobs.get(schedule.pending_job_id)
        return None if row is None else Job.from_row(self, row)

    async def getJobScheduler(self, job_scheduler_id: str) -> dict[str, Any] | None:
        """The job scheduler of this id as BullMQ describes it, or None."""
        jobs = await self.engine()
        schedule = await jobs.get_schedule(
            schedulers.schedule_name(self.qualifiedName, job_scheduler_id)
        )
        return None if schedule is None else schedulers.as_json(job_scheduler_id, schedule)

    async def isJobScheduler(self, job_scheduler_id: str) -> bool:
        """Whether a job scheduler of this id exists."""
        return await self.getJobScheduler(job_scheduler_id) is not None

    async def getJobSchedulers(
        self, start: int = 0, end: int = -1, asc: bool = False
    ) -> list[dict[str, Any]]:
        """The queue's job schedulers, ordered by next run, from ``start`` to ``end`` (inclusive;
        -1: the last)."""
        jobs = await self.engine()
        prefix = self.qualifiedName + ":"
        found = [
            schedulers.as_json(s.name[len(prefix) :], s)
            for s in await jobs.list_schedules()
            if s.name.startswith(prefix)
        ]
        found.sort(key=lambda s: (s["next"] is None, s["next"] or 0), reverse=not asc)
        return in_range(found, start, end)

    async def getJobSchedulersCount(self) -> int:
        """How many job schedulers the queue has."""
        return len(await self.getJobSchedulers())

    async def removeJobScheduler(self, job_scheduler_id: str) -> int:
        """0 when the scheduler (and its next iteration, unless it has started) was removed,
        1 when there was none: the Python package's values."""
        jobs = await self.engine()
        removed = await jobs.remove_schedule(
            schedulers.schedule_name(self.qualifiedName, job_scheduler_id)
        )
        return 0 if removed else 1

    # -- control ---------------------------------------------------------------------------

    async def pause(self) -> None:
        """Pause the queue: workers take none of its jobs until ``resume``; adds still work."""
        await (await self.engine()).pause(self.qualifiedName)

    async def resume(self) -> None:
        """Resume a paused queue."""
        await (await self.engine()).resume(self.qualifiedName)

    async def isPaused(self) -> bool:
        """Whether the queue is paused."""
        return (await (await self.engine()).queue_settings(self.qualifiedName)).paused

    async def remove(self, job_id: str, opts: dict[str, Any] | None = None) -> int:
        """Remove the job with this id unless it is active; 1 if it was removed, else 0."""
        job = await self.getJob(job_id)
        if job is None or job.engine_id is None:
            return 0
        result = await (await self.engine()).purge(JobFilter(ids=(job.engine_id,)), running="skip")
        return result.deleted

    async def drain(self, delayed: bool = False) -> None:
        """Remove waiting and prioritized jobs (and delayed ones with ``delayed=True``), with
        no 'removed' events, as BullMQ's drain: but the next iteration of each job scheduler;
        a parent of this queue whose last pending children go goes with them."""
        states = (SubState.READY,) + ((SubState.DELAYED, SubState.RETRY) if delayed else ())
        await (await self.engine()).purge(
            self._filter(sub_state=states, pending_run=False),
            removed_events=False,
            take_dependents=True,
        )

    async def trimEvents(self, maxLength: int) -> int:
        """Keep about the newest ``maxLength`` events of this queue's log and return how many
        went, as BullMQ's approximate trim of its event stream: at least ``maxLength`` stay
        (an ``addBulk``'s or a flow's 'added' events go together, once the newer ones hold
        ``maxLength``). A ``QueueEvents`` whose ``lastEventId`` is older finds them gone."""
        keep = event_count("maxLength", maxLength)
        return await (await self.engine()).trim_events(self.qualifiedName, keep)

    async def obliterate(self, force: bool = False) -> None:
        """Delete every job and job scheduler of the queue; refused while jobs are active
        unless ``force``. No 'removed' events, as BullMQ's obliterate. As BullMQ's, it leaves
        a parent waiting for children (``waiting-children``) unless its last pending children
        were of this queue: they take it with them."""
        jobs = await self.engine()
        states = tuple(s for s in SubState if s is not SubState.WAITING_CHILDREN)
        where = JobFilter(queue=self.qualifiedName, sub_state=states)
        prefix = self.qualifiedName + ":"
        mine = [s.name for s in await jobs.list_schedules() if s.name.startswith(prefix)]
        async with jobs.transaction() as conn:  # all of it, or (refused) nothing
            for schedule in mine:
                await jobs.remove_schedule(schedule, connection=conn)
            result = await jobs.purge(
                where,
                running="cancel" if force else "skip",
                connection=conn,
                removed_events=False,
                take_dependents=True,
            )
            if result.skipped_running:
                raise RuntimeError("Cannot obliterate queue with active jobs")

    async def clean(self, grace: int, limit: int = 0, type: str = "completed") -> list[str]:
        """Remove jobs of state ``type`` older than ``grace`` ms (finished for completed and
        failed, added for the others), at most ``limit`` (0: all); returns their ids. One
        'cleaned' event with their count, no 'removed' ones, as BullMQ's clean."""
        if type not in _CLEANABLE:
            raise ValueError(f"clean type must be one of {sorted(_CLEANABLE)}, got {type!r}")
        jobs = await self.engine()
        cutoff = datetime.now(UTC) - timedelta(milliseconds=grace)
        age = (
            {"finished_before": cutoff}
            if type in ("completed", "failed")
            else {"created_before": cutoff}
        )
        # The next iteration of a job scheduler stays, as in BullMQ.
        unfinished = {} if type in ("completed", "failed") else {"pending_run": False}
        where = self._filter(sub_state=_SUB_STATES[type], **age, **unfinished)
        if type in ("waiting", "wait", "prioritized"):
            where = self._filter(
                sub_state=_SUB_STATES[type],
                priority=NO_PRIORITY if type != "prioritized" else None,
                **age,
                **unfinished,
            )
        candidates = await self._list_all(where, limit or None)
        if type == "prioritized":
            candidates = [r for r in candidates if r.priority != NO_PRIORITY]
        if not candidates:
            return []
        ids = tuple(r.id for r in candidates)
        await jobs.purge(
            JobFilter(ids=ids, queue=self.qualifiedName, sub_state=_SUB_STATES[type]),
            removed_events=False,
            take_dependents=True,  # a parent of this queue whose last pending children go
        )
        left = {r.id for r in await jobs.list_jobs(JobFilter(ids=ids), limit=len(ids))}
        removed = [job_id_of(r.id, r.job_key) for r in candidates if r.id not in left]
        if self._record_events and removed:
            await jobs.publish_event(self.qualifiedName, "cleaned", {"count": str(len(removed))})
        return removed

    async def _list_all(self, where: JobFilter, limit: int | None) -> list[JobRow]:
        jobs = await self.engine()
        rows: list[JobRow] = []
        while limit is None or len(rows) < limit:
            page_size = 1000 if limit is None else min(1000, limit - len(rows))
            page = await jobs.list_jobs(where, limit=page_size, offset=len(rows), oldest_first=True)
            rows.extend(page)
            if len(page) < page_size:
                break
        return rows

    async def retryJobs(self, opts: dict[str, Any] | None = None) -> None:
        """Move every ``failed`` (or ``completed``, with ``state``) job back to waiting,
        finished before ``timestamp`` (ms) if given; ``attemptsMade`` is kept, as BullMQ's
        moveJobsToWait keeps it."""
        opts = opts or {}
        state = opts.get("state", "failed")
        if state not in ("failed", "completed"):
            raise ValueError(f"retryJobs state must be 'failed' or 'completed', got {state!r}")
        timestamp = opts.get("timestamp")
        before = None if timestamp is None else datetime.fromtimestamp(timestamp / 1000, UTC)
        jobs = await self.engine()
        await jobs.requeue_finished(
            self._filter(sub_state=_SUB_STATES[state], finished_before=before),
            reset_attempts=False,
            clear_outcome=True,  # moveJobsToWait drops processedOn, finishedOn and the outcome
        )

    async def promoteJobs(self, opts: dict[str, Any] | None = None) -> None:
        """Make every delayed job of the queue due now."""
        jobs = await self.engine()
        for row in await self._list_all(self._filter(sub_state=_SUB_STATES["delayed"]), None):
            await jobs.promote(row.id)

    async def setGlobalConcurrency(self, concurrency: int) -> None:
        """At most ``concurrency`` active jobs of this queue across all workers."""
        await (await self.engine()).set_concurrency(self.qualifiedName, concurrency)

    async def getGlobalConcurrency(self) -> int | None:
        """The queue's global concurrency cap, or None."""
        return (await (await self.engine()).queue_settings(self.qualifiedName)).concurrency

    async def removeGlobalConcurrency(self) -> int:
        """1 when a cap was removed, 0 when there was none."""
        jobs = await self.engine()
        had = (await jobs.queue_settings(self.qualifiedName)).concurrency is not None
        await jobs.set_concurrency(self.qualifiedName, None)
        return int(had)

    async def setGlobalRateLimit(self, max_jobs: int, duration_ms: int) -> int:
        """At most ``max_jobs`` jobs of this queue started per ``duration_ms`` milliseconds by
        all its workers together, those with a ``limiter`` of their own included (a queue
        setting: it holds until ``removeGlobalRateLimit``). Returns 2 when the queue had no
        global rate limit, 0 when this one replaced it (the fields BullMQ's ``HSET`` adds)."""
        limit, period = rate_limit(max_jobs, duration_ms)
        jobs = await self.engine()
        had = (await jobs.queue_settings(self.qualifiedName)).rate_limit is not None
        await jobs.set_rate_limit(self.qualifiedName, limit, period)
        return 0 if had else 2

    async def getGlobalRateLimit(self) -> dict[str, int] | None:
        """The global rate limit as ``{"max": n, "duration": ms}``, or None."""
        settings = await (await self.engine()).queue_settings(self.qualifiedName)
        if settings.rate_limit is None or settings.rate_period is None:
            return None
        return {"max": settings.rate_limit, "duration": int(settings.rate_period * 1000)}

    async def removeGlobalRateLimit(self) -> int:
        """2 (its max and its duration) when a limit was removed, 0 when there was none."""
        jobs = await self.engine()
        had = (await jobs.queue_settings(self.qualifiedName)).rate_limit is not None
        await jobs.set_rate_limit(self.qualifiedName, None)
        return 2 if had else 0

    async def rateLimit(self, expire_time_ms: int) -> None:
        """Hand out no job of this queue, to any worker, for ``expire_time_ms``."""
        await (await self.engine()).limit_queue_for(self.qualifiedName, expire_time_ms / 1000)

    async def getRateLimitTtl(self, max_jobs: int | None = None) -> int:
        """Milliseconds until the queue hands out jobs again, as BullMQ's limiter key says.
        With a rate limit (``max_jobs``, else the queue's ``max``): the rest of a ``rateLimit``
        or of a window (the global rate limit's, or the one the workers with a ``limiter``
        share) that has admitted ``max`` jobs, else 0. Without one: the rest of a
        ``rateLimit``, else of the workers' window while one is open, else -2 (Redis' PTTL of
        a missing key)."""
        settings = await (await self.engine()).queue_settings(self.qualifiedName)
        now = datetime.now(UTC)

        def left(until: datetime | None) -> int:
            return 0 if until is None else max(int((until - now).total_seconds() * 1000), 0)

        manual = left(settings.limited_until)
        workers_window = left(settings.worker_window_end)
        limit = max_jobs or settings.rate_limit
        if not limit:
            return manual or workers_window or -2
        if manual > 0:
            return manual
        full = 0
        if (
            settings.window_start is not None
            and settings.rate_period is not None
            and settings.window_count >= limit
        ):
            full = left(settings.window_start + timedelta(seconds=settings.rate_period))
        if settings.worker_window_count >= limit:
            full = max(full, workers_window)
        return full

    async def removeRateLimitKey(self) -> int:
        """End a ``rateLimit`` now; 1 when one was in force, else 0."""
        in_force = await self.getRateLimitTtl() > 0
        await (await self.engine()).clear_queue_limit(self.qualifiedName)
        return int(in_force)

    async def getWorkers(self) -> list[dict[str, Any]]:
        """The workers of this queue running now, from their heartbeats: ``id``, ``name``,
        ``addr`` (host:pid), ``age`` and ``idle`` (seconds since started and since last seen),
        ``concurrency``, ``running`` (the jobs each holds)."""
        now = datetime.now(UTC)
        return [
            {
                "id": w.id,
                "name": w.name,
                "addr": f"{w.host}:{w.pid}",
                "age": int((now - w.started_at).total_seconds()),
                "idle": int((now - w.last_seen).total_seconds()),
                "concurrency": w.concurrency,
                "running": w.running,
            }
            for w in await (await self.engine()).list_workers(self.qualifiedName)
        ]

    async def getWorkersCount(self) -> int:
        """How many workers of this queue heartbeat."""
        return len(await self.getWorkers())

    async def close(self) -> None:
        """Idempotent; a queue sharing its owner's connection leaves it open."""
        self.closing = True
        if not self._borrowed:
            await self.connection.close()
