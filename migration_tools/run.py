"""The migration as a library: ``await migrate(MigrationOptions(...))`` returns a Report whose
``exit_code`` the CLI passes on. Steps (bullmq_redis_layout.md §12): discover, refuse while
clients are connected, wait for active jobs, fingerprint, then a batch at a time: read a page
of a container (and the whole flow trees it reaches, across queues), transform it, write it in
one transaction with its ledger rows, and verify it (PostgreSQL compares each stored payload
with BullMQ's own text). Then schedules, dedup holds and queue settings, fingerprint again, and
only then, if asked, delete from Redis. Memory is bounded by the batch size (and the largest
flow tree), not by the size of the queues."""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, TextIO

import asyncpg

from bullmq_compat import DIALECT, bullmq_state, engine_queue, facade_registry
from migration_tools import live, reader
from migration_tools.layout import CONTAINERS, LegacyLayout, base, state_of
from migration_tools.ledger import JobRef, Ledger, source
from migration_tools.progress import Progress
from migration_tools.reader import FINISHED, UNFINISHED, QueueRef
from migration_tools.transform import Key, LedgerEntry, Plan, Skip, Transformer, Unit
from pgjobs import ImportRecord, InvalidOption, JobQueue, SchemaMissing, validate_schema


class ExitCode(IntEnum):
    """The exit status of a migration (``Report.exit_code``, the CLI's status)."""

    OK = 0
    INCOMPLETE = 1  # something was not migrated, or verification found a difference
    REFUSED = 2  # nothing written: bad arguments, live clients, a legacy layout, no schema
    CHANGED = 3  # Redis changed while the migration ran: rerun to pick the rest up


REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


@dataclass
class MigrationOptions:
    """What ``migrate`` moves and how, as the CLI's options. Bad options raise
    ``InvalidOption`` naming the option, before anything connects."""

    redis_url: str
    postgres_dsn: str | None = None
    schema: str = "pgjobs"
    prefixes: list[str] | None = None
    queues: list[str] | None = None
    dry_run: bool = False
    verify_only: bool = False
    include_history: bool = False
    wait_active: float = 0.0
    allow_connected: bool = False
    delete_from_redis: bool = False
    batch_size: int = 1000
    live: bool = False
    """Move while BullMQ producers and workers keep running on Redis (live.py): pass over the
    queues until Redis holds none of their unfinished jobs, or ``live_deadline`` passes."""
    live_deadline: float | None = None
    """Seconds after which a live move stops passing and reports what is left."""
    live_interval: float = 1.0
    """Seconds between two passes of a live move."""
    live_quiet: float = 0.0
    """A live move ends once Redis has held none of the queues' unfinished jobs for this many
    seconds (producers still adding to Redis keep it going); 0: at the first empty pass."""
    progress: TextIO | None = None
    after_batch: Callable[[int], Awaitable[None] | None] | None = None
    """Called after each committed batch with the number written so far (tests, monitoring)."""

    def __post_init__(self) -> None:
        """Refuse bad options before anything connects, naming the option (InvalidOption)."""
        if not isinstance(self.redis_url, str) or not self.redis_url.startswith(REDIS_SCHEMES):
            raise InvalidOption(
                "redis_url", f"must be a URL starting with one of {REDIS_SCHEMES}, "
                f"got {self.redis_url!r}"
            )  # fmt: skip
        if self.postgres_dsn is not None and (
            not isinstance(self.postgres_dsn, str)
            or not self.postgres_dsn.startswith(("postgresql://", "postgres://"))
        ):
            raise InvalidOption(
                "postgres_dsn",
                f"must be a postgresql:// URL, got {self.postgres_dsn!r}",
            )
        validate_schema(self.schema)
        for option in ("prefixes", "queues"):
            names = getattr(self, option)
            if names is not None and not all(isinstance(n, str) and n for n in names):
                raise InvalidOption(option, f"must be non-empty strings, got {names!r}")
        if any(":" in name for name in self.queues or []):
            raise InvalidOption("queues", "a BullMQ queue name cannot contain ':'")
        if (
            isinstance(self.batch_size, bool)
            or not isinstance(self.batch_size, int)
            or (self.batch_size < 1)
        ):
            raise InvalidOption("batch_size", f"must be an integer >= 1, got {self.batch_size!r}")
        if self.live and (self.dry_run or self.verify_only or self.delete_from_redis):
            raise InvalidOption(
                "live",
                "cannot be combined with dry_run, verify_only or delete_from_redis (a live "
                "move removes each job from Redis as it writes it)",
            )
        for option in ("live_deadline", "live_interval", "live_quiet"):
            value = getattr(self, option)
            least = 0 if option == "live_quiet" else math.ulp(0)
            if value is not None and not (
                isinstance(value, int | float)
                and not isinstance(value, bool)
                and least <= value < math.inf
            ):
                raise InvalidOption(
                    option, f"must be a finite number of seconds >= {least:g}, got {value!r}"
                )
        if not (isinstance(self.wait_active, int | float) and 0 <= self.wait_active < math.inf):
            raise InvalidOption(
                "wait_active", f"must be a finite number of seconds >= 0, got {self.wait_active!r}"
            )


@dataclass
class Report:
    """What a migration did: the plan, what it wrote and verified, what it refused or skipped
    and why. ``exit_code`` says how it ended, ``render()`` prints it for people, ``as_dict()``
    for scripts."""

    queues: list[str] = field(default_factory=list)
    plan: Plan | None = None
    written: int = 0
    already_done: int = 0
    verified: bool | None = None
    problems: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    refused: str | None = None
    deleted: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    passes: int = 0
    """Passes of a live move."""
    left: dict[str, dict[str, int]] = field(default_factory=dict)
    """After a live move: what each queue still holds in Redis, by container."""
    collisions: list[str] = field(default_factory=list)
    """Redis jobs not written because PostgreSQL already had a job under their jobId or
    deduplication id (BullMQ's rule: the existing job stays), with both jobs' states."""
    rekeyed: list[str] = field(default_factory=list)
    """Jobs added on PostgreSQL before the move under an automatic id that a moved Redis job
    also had: the moved job keeps the id, the PostgreSQL job gets a new one, named here."""
    progressed: dict[str, int] = field(default_factory=dict)
    """Jobs moved by an earlier run whose state has moved on since (by their state now)."""
    earlier: dict[str, int] = field(default_factory=dict)
    """With nothing left in Redis: the jobs earlier runs moved, by queue."""

    @property
    def exit_code(self) -> ExitCode:
        if self.refused:
            return ExitCode.REFUSED
        if self.changed:
            return ExitCode.CHANGED
        groups = self.plan.skip_groups if self.plan else {}
        live = [reason for _, reason in groups if "live lock" in reason]
        if self.problems or self.verified is False or live:
            return ExitCode.INCOMPLETE
        return ExitCode.OK

    def skipped_summary(self) -> list[tuple[str, str, int, list[str]]]:
        """Skipped jobs by (queue, reason): how many, and the first ids, in first-seen order."""
        groups = self.plan.skip_groups if self.plan else {}
        return [(queue, reason, count, ids) for (queue, reason), (count, ids) in groups.items()]

    def as_dict(self) -> dict[str, Any]:
        """The report for scripts (``--json``): every field, plus the exit status."""
        plan = self.plan
        return {
            "exit_code": int(self.exit_code),
            "exit": self.exit_code.name,
            "refused": self.refused,
            "queues": self.queues,
            "counts": plan.counts if plan else {},
            "jobs": plan.job_count if plan else 0,
            "flows": plan.flow_count if plan else 0,
            "schedules": len(plan.schedules) if plan else 0,
            "dedup_holds": len(plan.holds) if plan else 0,
            "skipped": [
                {"queue": queue, "reason": reason, "count": count, "job_ids": ids}
                for queue, reason, count, ids in self.skipped_summary()
            ],
            "warnings": plan.warnings if plan else [],
            "written": self.written,
            "already_migrated": self.already_done,
            "verified": self.verified,
            "problems": self.problems,
            "changed": self.changed,
            "deleted": self.deleted,
            "notes": self.notes,
            "collisions": self.collisions,
            "rekeyed": self.rekeyed,
            "progressed_since_moved": self.progressed,
            "moved_earlier": self.earlier,
            "passes": self.passes,
            "left_in_redis": self.left,
        }

    def render(self) -> str:
        """The report as text for people: the queues and the plan by state, what was written,
        verified, skipped, refused or changed, and the exit status."""
        lines: list[str] = []
        if self.refused:
            return f"REFUSED: {self.refused}"
        if self.earlier and not self.queues:
            lines.append("nothing left to move: Redis holds no BullMQ queue of these")
            lines.extend(
                f"  {queue}: {n} job(s) moved by earlier runs"
                for queue, n in sorted(self.earlier.items())
            )
            lines.append(f"exit status: {int(self.exit_code)} ({self.exit_code.name})")
            return "\n".join(lines)
        lines.append(f"queues: {', '.join(self.queues) or '(none)'}")
        lines.extend(f"  note: {n}" for n in self.notes)
        plan = self.plan
        if plan is not None:
            for queue, counts in sorted(plan.counts.items()):
                parts = ", ".join(f"{state} {n}" for state, n in sorted(counts.items()))
                lines.append(f"  {queue}: {parts}")
            lines.append(
                f"jobs: {plan.job_count} in {plan.unit_count} units ({plan.flow_count} flows); "
                f"schedules: {len(plan.schedules)}; dedup holds: {len(plan.holds)}; "
                f"queue settings: {len(plan.settings)}"
            )
            for queue, reason, count, ids in self.skipped_summary():
                shown = ", ".join(ids[:5]) + (f", ... ({count - 5} more)" if count > 5 else "")
                lines.append(f"  skipped in {queue}: {count} {reason} ({shown})")
            for warning in plan.warnings:
                lines.append(f"  warning: {warning}")
        lines.append(f"written: {self.written}; already migrated: {self.already_done}")
        lines.extend(f"  kept PostgreSQL's job: {c}" for c in self.collisions)
        lines.extend(f"  new id on PostgreSQL: {r}" for r in self.rekeyed)
        if self.progressed:
            parts = ", ".join(f"{state} {n}" for state, n in sorted(self.progressed.items()))
            lines.append(f"  moved earlier and progressed since: {parts}")
        if self.verified is not None:
            lines.append("verification: " + ("passed" if self.verified else "FAILED"))
        lines.extend(f"  problem: {p}" for p in self.problems)
        lines.extend(f"  changed during the run: {c}" for c in self.changed)
        lines.extend(f"  deleted from Redis: {d}" for d in self.deleted)
        if self.passes:
            lines.append(f"live move: {self.passes} pass(es)")
            for queue, counts in sorted(self.left.items()):
                if counts:
                    parts = ", ".join(f"{c} {n}" for c, n in sorted(counts.items()))
                    lines.append(f"  still in Redis: {queue}: {parts}")
        lines.append(f"exit status: {int(self.exit_code)} ({self.exit_code.name})")
        return "\n".join(lines)


async def migrate(options: MigrationOptions) -> Report:
    """Run the migration; every outcome is in the Report (a refusal when nothing could be
    read or written, a problem when a run stopped part way), never an exception."""
    report = Report()
    try:
        import redis.asyncio as aioredis
        from redis.exceptions import RedisError
    except ImportError:
        report.refused = (
            "the migration needs the redis package: pip install 'pgjobs-engine[migration]';"
            " nothing was read or written"
        )
        return report
    redis = aioredis.from_url(options.redis_url, decode_responses=False)
    jobs: JobQueue | None = None
    try:
        try:
            await redis.ping()
        except (OSError, RedisError) as exc:
            report.refused = f"cannot reach Redis ({_one_line(exc)}); nothing was read or written"
            return report
        try:
            jobs = await JobQueue.connect(
                options.postgres_dsn, schema=options.schema, registry=facade_registry()
            )
            await jobs.check_schema()
        except SchemaMissing as exc:
            report.refused = str(exc)
            return report
        except (OSError, ValueError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            report.refused = (
                f"cannot use PostgreSQL ({type(exc).__name__}: {_one_line(exc)}); nothing was "
                "written"
            )
            return report
        try:
            await _run(redis, jobs, options, report)
        except (OSError, RedisError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            report.problems.append(
                f"stopped by {type(exc).__name__}: {_one_line(exc)}; {report.written} job(s) "
                "written, each batch in its own transaction: rerun to finish (what is done is "
                "skipped)"
            )
        return report
    except LegacyLayout as exc:
        report.refused = str(exc)
        return report
    finally:
        await redis.aclose()
        if jobs is not None:
            await jobs.close()


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


async def _run(redis: Any, jobs: JobQueue, options: MigrationOptions, report: Report) -> None:
    known = await reader.discover(redis, options.prefixes)
    refs = [r for r in known if not options.queues or r.name in options.queues]
    if not refs:
        report.earlier = await _moved_earlier(jobs, options)
        if not report.earlier:
            report.refused = "no BullMQ queue found (looked for <prefix>:<queue>:meta keys)"
        return
    if options.live:
        await _live(redis, jobs, options, report, known, refs)
        return
    writing = not (options.dry_run or options.verify_only)
    if writing and options.wait_active > 0:
        await reader.wait_for_active(redis, refs, options.wait_active)
    clients = await reader.connected_clients(redis, known)
    if clients and writing and not options.allow_connected:
        report.refused = (
            f"{len(clients)} BullMQ client(s) still connected ({', '.join(clients[:5])}); stop "
            "producers and workers first, or pass --allow-connected"
        )
        return
    run = _Stream(redis, jobs, options, report, known, locks_may_be_held=bool(clients))
    await run.stream(refs)
    if options.dry_run:
        return
    if writing:
        await _settle(jobs, Ledger(jobs), run.plan)
    after = {ref: await reader.fingerprint(redis, ref) for ref in run.before}
    report.changed = [
        f"{ref} (sizes, id counter or last event moved; rerun to migrate the rest)"
        for ref in run.before
        if run.before[ref] != after[ref]
    ]
    report.verified = run.verified
    if writing and options.delete_from_redis:
        if report.exit_code is ExitCode.OK:
            await _delete(options, run.queues, report)
        else:
            report.problems.append("not deleting from Redis: the migration did not verify")


async def _live(
    redis: Any,
    jobs: JobQueue,
    options: MigrationOptions,
    report: Report,
    known: list[QueueRef],
    refs: list[QueueRef],
) -> None:
    """Pass over the queues while BullMQ producers and workers keep running on Redis, each pass
    moving what no BullMQ worker is acting on (live.py), until Redis has held none of their
    unfinished jobs for ``live_quiet`` seconds, or the deadline passes. Queue settings follow
    once, after the first pass; dedup holds after every pass (a hold keeps the later expiry)."""
    loop = asyncio.get_running_loop()
    deadline = None if options.live_deadline is None else loop.time() + options.live_deadline
    out = options.progress
    empty_since: float | None = None
    while True:
        report.passes += 1
        run = _Stream(redis, jobs, options, report, known, locks_may_be_held=True, live=True)
        written_before = report.written
        await run.stream(refs)
        await _settle(jobs, Ledger(jobs), run.plan, settings=report.passes == 1)
        report.left = {str(ref): await live.still_in_redis(redis, ref.base) for ref in run.queues}
        unfinished = {
            queue: {c: n for c, n in counts.items()
                    if options.include_history or c not in FINISHED}
            for queue, counts in report.left.items()
        }  # fmt: skip
        remaining = sum(sum(counts.values()) for counts in unfinished.values())
        active = sum(counts.get("active", 0) for counts in unfinished.values())
        if out is not None:
            print(
                f"pass {report.passes}: moved {report.written - written_before} "
                f"({report.written} in all, {run.moved_schedulers} scheduler(s)); in Redis: "
                f"{active} active (left to their workers), {remaining - active} other",
                file=out,
                flush=True,
            )
        if remaining:
            empty_since = None
        else:
            empty_since = loop.time() if empty_since is None else empty_since
            if loop.time() - empty_since >= options.live_quiet:
                return
        if deadline is not None and loop.time() >= deadline:
            report.problems.append(
                f"live move stopped at its deadline with {remaining} unfinished job(s) still in "
                "Redis (listed under 'still in Redis'): rerun to go on"
            )
            return
        await asyncio.sleep(options.live_interval)
        known = await reader.discover(redis, options.prefixes)


PROBLEMS_LISTED = 1000
COLLIDED = "collided:"
"""The ledger state prefix of a Redis job not written because PostgreSQL's job kept its id."""


class _Stream:
    """One pass over the queues' containers, in BullMQ's processing order, a batch at a time:
    read, transform, write, verify, forget."""

    def __init__(
        self,
        redis: Any,
        jobs: JobQueue,
        options: MigrationOptions,
        report: Report,
        known: list[QueueRef],
        *,
        locks_may_be_held: bool,
        live: bool = False,
    ) -> None:
        self.redis = redis
        self.live = live
        self.left_active = 0  # live: units not moved this pass (a node active or locked)
        self.moved_schedulers = 0
        self.jobs = jobs
        self.options = options
        self.report = report
        self.ledger = Ledger(jobs)
        self.transformer = Transformer(
            options.include_history,
            [(r.prefix, r.name) for r in known],
            locks_may_be_held=locks_may_be_held,
        )
        self.plan = report.plan = self.transformer.plan
        self.writing = not (options.dry_run or options.verify_only)
        self.checking = not options.dry_run
        self.queues: list[QueueRef] = []
        self.before: dict[QueueRef, tuple[Any, ...]] = {}
        self.paged: set[tuple[QueueRef, str]] = set()
        self.done: set[Key] = set()  # emitted already: flow members, jobs in two containers
        self.pending: list[Unit] = []
        self.pending_jobs = 0
        self.verified = True
        self.earlier: dict[JobRef, ImportRecord] = {}  # moved by an earlier run
        self.collided: set[JobRef] = set()  # not written: PostgreSQL's job kept
        self.in_flight: asyncio.Future[None] | None = None
        self.progress = Progress(0, "migrating", options.progress)

    async def add_queue(self, ref: QueueRef) -> None:
        self.before[ref] = await reader.fingerprint(self.redis, ref)
        context = await reader.read_context(self.redis, ref)
        pending = [f"repeat:{sid}:{int(ms)}" for sid, (ms, _) in context.schedulers.items()]
        found = await reader.fetch_jobs(self.redis, ref, pending, None) if pending else {}
        self.transformer.add_queue(context, found)
        if self.live:
            await self.move_schedulers(ref)
        if self.writing:
            # Before any job is written: an add on PostgreSQL from now on gets an id past every
            # id Redis handed out, so no moved job's id is ever given to another job.
            await self.jobs.reserve_ids(self.plan.max_numeric_id)
            # the dashboard shows the queue by its BullMQ name, as the facade's own queues
            await self.jobs.describe_queue(
                engine_queue(ref.prefix, ref.name), label=ref.name, dialect=DIALECT
            )
        self.queues.append(ref)
        self.report.queues.append(str(ref))
        self.progress.total += context.job_count

    async def stream(self, refs: list[QueueRef]) -> None:
        try:
            await self._stream(refs)
            await self.flush()
            await self.settle()
        finally:
            if self.in_flight is not None:  # stopped by an error: let the write end first
                await asyncio.gather(self.in_flight, return_exceptions=True)
        self.progress.close()

    async def _stream(self, refs: list[QueueRef]) -> None:
        for ref in refs:  # every queue's layout is checked before anything is written
            await self.add_queue(ref)
        # Jobs still to run first, queue by queue, so a flow tree is placed where its first
        # waiting member stands; history after. A queue a flow reaches is appended when
        # found; the last round pages whatever such a queue still has.
        rounds: tuple[tuple[str, ...], ...] = (UNFINISHED, FINISHED, UNFINISHED + FINISHED)
        if self.live:  # what an earlier run took out of BullMQ's reach first; never the active
            movable = tuple(c for c in UNFINISHED if c != "active")
            history = FINISHED if self.options.include_history else ()
            rounds = ((live.MOVING, *movable), history, (live.MOVING, *movable, *history))
        for containers in rounds:
            index = 0
            while index < len(self.queues):
                ref = self.queues[index]
                index += 1
                for container in containers:
                    if (ref, container) in self.paged:
                        continue
                    self.paged.add((ref, container))
                    async for ids in reader.pages(
                        self.redis, ref, container, self.options.batch_size
                    ):
                        await self.page(ref, container, ids)
        if self.live:
            return  # keepLastIfActive proto-jobs stay with the Redis job they wait for
        for ref in self.queues:
            for unit in self.transformer.proto_units(self.transformer.contexts[ref]):
                self.pending.append(unit)
                self.pending_jobs += len(unit.jobs)

    async def page(self, ref: QueueRef, container: str, ids: list[str]) -> None:
        fetched = await reader.fetch_jobs(self.redis, ref, ids, container)
        self.transformer.remember(ref, fetched)
        state = state_of({container: ""})  # a job is emitted from its state's container
        for job_id in ids:
            key = (ref, job_id)
            if key in self.done:
                continue
            found = fetched.get(job_id)
            if found is None and container == live.MOVING:
                await live.forget(self.redis, ref.base, job_id)  # removed by the application
                continue
            if found is None:
                self.plan.skip(str(ref), job_id, "listed in a container, no job hash")
                continue
            if container != live.MOVING and self.transformer.state(key) != state:
                continue  # in two containers: the one BullMQ's precedence names emits it
            if self.live and key in self.transformer.iteration_jobs:
                await self.drop_iteration(key)
                continue
            tree = self.transformer.emit(key)
            if tree is None:
                continue
            if self.transformer.links(key):
                tree = await self.tree(key)
            if len(tree) > 1 or len(found.containers) > 1:
                self.done.update(tree)
            if self.live and not await self.take(tree):
                continue
            unit = self.transformer.unit(tree)
            if self.live:
                await self.give_back_unwritten(tree, unit)
            if unit.jobs:
                self.pending.append(unit)
                self.pending_jobs += len(unit.jobs)
        self.progress.advance(len(ids))
        if self.pending_jobs >= self.options.batch_size:
            await self.flush()

    async def tree(self, start: Key) -> list[Key]:
        """Every job connected to ``start`` by parent/child links, in discovery order, read from
        Redis as found (with the queues they are in, when not taking part yet)."""
        seen = {start}
        order = [start]
        frontier = [start]
        while frontier:
            wanted = [k for key in frontier for k in self.transformer.links(key) if k not in seen]
            wanted = list(dict.fromkeys(wanted))
            seen.update(wanted)
            missing: dict[QueueRef, list[str]] = {}
            for ref, job_id in wanted:
                if (ref, job_id) not in self.transformer.cache:
                    missing.setdefault(ref, []).append(job_id)
            for ref, ids in missing.items():
                if ref not in self.transformer.contexts:
                    await self.add_queue(ref)
                    self.report.notes.append(
                        f"queue {ref} added: it holds part of a flow of {start[0]}"
                    )
                self.transformer.remember(ref, await reader.fetch_jobs(self.redis, ref, ids, None))
            frontier = [k for k in wanted if k in self.transformer.cache]
            order.extend(frontier)
        return order

    async def flush(self) -> None:
        """Hand the batch gathered so far to be written and verified, and forget it. The next
        batch is read and transformed while PostgreSQL writes this one; batches are written one
        after the other, each after the one before it committed."""
        units, self.pending, self.pending_jobs = self.pending, [], 0
        self.transformer.forget()
        await self.settle()
        if units:
            self.in_flight = asyncio.ensure_future(self._store(units))

    async def settle(self) -> None:
        """Wait for the batch being written (its error, if any, is raised here)."""
        task, self.in_flight = self.in_flight, None
        if task is not None:
            await task

    async def _store(self, units: list[Unit]) -> None:
        if self.writing:
            await self._write(units)
        if self.live:  # written and committed: the Redis copies go
            await live.release(self.redis, [
                (base(e.prefix, e.queue), e.job_id) for u in units for e in u.ledger
            ])  # fmt: skip
        if self.checking:
            await self._check(units)
        if self.writing and self.options.after_batch is not None:
            result = self.options.after_batch(self.report.written)
            if result is not None:
                await result

    async def _write(self, units: list[Unit]) -> None:
        """Write the units not moved yet, with their ledger rows, in one transaction. A job
        PostgreSQL already holds under the same jobId or deduplication id stays (BullMQ's
        rule) and the Redis job is recorded as collided with it; a job added on PostgreSQL
        whose automatic id a moved job had gets a new id (``assign_job_keys``)."""
        report = self.report
        async with self.jobs.transaction() as conn:
            keys = [(e.prefix, e.queue, e.job_id) for u in units for e in u.ledger]
            earlier = await self.ledger.records(conn, keys)
            self.earlier.update(earlier)
            todo = [u for u in units if not all((e.prefix, e.queue, e.job_id) in earlier
                                                for e in u.ledger)]  # fmt: skip
            readded = 0
            if self.live:
                # A jobId an earlier run moved is free in Redis again and BullMQ accepts it
                # anew: a job with other data under it is not the one the ledger holds, but a
                # collision with it (PostgreSQL's job keeps the id). Same data: not told apart.
                writing = {id(u) for u in todo}
                for unit in units:
                    if id(unit) in writing:
                        continue
                    other = [
                        e
                        for e in unit.ledger
                        if earlier[(e.prefix, e.queue, e.job_id)].checksum != e.checksum
                    ]
                    self.collided.update((e.prefix, e.queue, e.job_id) for e in other)
                    readded += bool(other)
            report.already_done += len(units) - len(todo) - readded
            rows: list[tuple[str, str, str, int, str, str]] = []
            numeric: dict[str, list[int]] = {}
            kept = 0  # Redis jobs whose id PostgreSQL already had
            # In BullMQ's processing order: runs of single jobs in one statement, each flow
            # tree in its own (it gets its own flow).
            for group in _runs(todo):
                edges = [e for u in group for e in u.edges]
                results = await self.jobs.import_jobs(
                    [j for u in group for j in u.jobs], edges, connection=conn
                )
                for entry, result in _entry_results(group, results):
                    state = entry.state
                    if result.duplicate:
                        kept += 1
                        state = COLLIDED + entry.state
                        self.collided.add((entry.prefix, entry.queue, entry.job_id))
                    elif entry.job_id.isdigit() and len(entry.job_id) < 19:
                        queue = engine_queue(entry.prefix, entry.queue)
                        numeric.setdefault(queue, []).append(int(entry.job_id))
                    rows.append((entry.prefix, entry.queue, entry.job_id, result.id, state,
                                 entry.checksum))  # fmt: skip
            for queue, ids in numeric.items():
                given = await self.jobs.assign_job_keys(queue, ids, connection=conn)
                report.rekeyed.extend(
                    f"{queue} {old} is now {key} (a moved job has id {old})"
                    for old, key in sorted(given.items())
                )
            if rows:
                await self.ledger.record(conn, rows)
            report.written += sum(len(u.jobs) for u in todo) - kept

    # -- the live move (live.py) ----------------------------------------------------------------

    async def take(self, tree: list[Key]) -> bool:
        """Take every job of ``tree`` out of BullMQ's reach at once (live.quarantine), and read
        them again as taken (what the write must carry). False, with the tree left to BullMQ,
        when a job of it is active, locked or has moved on since it was read."""
        taken: list[tuple[str, str, str]] = []
        for ref, job_id in tree:
            found = self.transformer.cache.get((ref, job_id))
            if found is None:
                continue
            container = _container_of(found)
            if container == "active":
                self.left_active += 1
                return False
            taken.append((ref.base, job_id, container))
        if await live.quarantine(self.redis, taken) is not None:
            self.left_active += 1
            return False
        by_queue: dict[QueueRef, list[str]] = {}
        for ref, job_id in tree:
            by_queue.setdefault(ref, []).append(job_id)
        for ref, ids in by_queue.items():
            self.transformer.remember(ref, await reader.fetch_jobs(self.redis, ref, ids, None))
        return True

    async def give_back_unwritten(self, tree: list[Key], unit: Unit) -> None:
        """Jobs of a taken tree that the unit does not write (skipped, with a reason in the
        plan) go back to BullMQ as they were."""
        written = {(e.prefix, e.queue, e.job_id) for e in unit.ledger}
        back = [(ref.base, job_id) for ref, job_id in tree
                if (ref.prefix, ref.name, job_id) not in written]  # fmt: skip
        await live.restore(self.redis, back)

    async def drop_iteration(self, key: Key) -> None:
        """A legacy repeatable's pending job: its schedule, upserted in PostgreSQL before any
        job was paged, makes the same run there, so the Redis copy is taken and removed."""
        ref, job_id = key
        found = self.transformer.cache[key]
        container = _container_of(found)
        if container == "active":
            self.left_active += 1
            return
        if await live.quarantine(self.redis, [(ref.base, job_id, container)]) is None:
            await live.release(self.redis, [(ref.base, job_id)])

    async def move_schedulers(self, ref: QueueRef) -> None:
        """The queue's schedulers, before any of its jobs: each taken out of BullMQ's
        ``repeat`` set if its next time is still the one read, upserted in PostgreSQL with that
        next time, then removed from Redis. One whose next time moved meanwhile waits for the
        next pass."""
        kept = []
        for schedule in self.plan.schedules:
            if schedule.scheduler is None or schedule.scheduler[0] != ref:
                kept.append(schedule)
                continue
            _, scheduler_id, next_ms = schedule.scheduler
            iteration = f"repeat:{scheduler_id}:{int(next_ms)}"
            if schedule.pending is not None:
                iteration = schedule.pending[1]
            if not await live.take_scheduler(
                self.redis, ref.base, scheduler_id, next_ms, iteration
            ):
                self.left_active += 1
                continue
            await self.jobs.upsert_schedule(**schedule.arguments, pending_job_id=None)
            await live.release_scheduler(self.redis, ref.base, scheduler_id)
            self.moved_schedulers += 1
        self.plan.schedules[:] = kept

    async def _check(self, units: list[Unit]) -> None:
        """Every job of the batch, as the engine holds it now: in the ledger, under its BullMQ
        id in its queue (what the facade's getJob looks up), in the expected BullMQ state or a
        later one, with a payload PostgreSQL finds equal to BullMQ's data. A job moved by an
        earlier run is verified by what was written: its later progress (another state,
        removal by its retention) is counted, not a failure; a collided job by the id only."""
        entries = [e for u in units for e in u.ledger]
        checks = await self.jobs.check_imports(
            [
                (
                    source(e.prefix, e.queue),
                    e.job_id,
                    None if e.job_id.startswith("dn:") else e.expected,
                )
                for e in entries
            ]
        )
        for entry, check in zip(entries, checks, strict=True):
            ref = (entry.prefix, entry.queue, entry.job_id)
            where = f"{entry.prefix}:{entry.queue} {entry.job_id}"
            if check.job_id is None:
                self._problem(f"{where}: not in the ledger")
                continue
            if entry.job_id.startswith("dn:"):
                continue  # a proto-job: no BullMQ id to find it by
            record = self.earlier.get(ref)
            moved_before = record is not None
            collided = ref in self.collided or (
                record is not None and record.state.startswith(COLLIDED)
            )
            if check.sub_state is None and self.writing:
                # the ledger row committed with the job: it was removed since (its retention,
                # the application)
                self._progressed("removed")
                continue
            if collided:
                if ref in self.collided:
                    there = (
                        "removed"
                        if check.sub_state is None or check.priority is None
                        else bullmq_state(check.sub_state, check.priority)
                    )
                    self.report.collisions.append(
                        f"{where}: PostgreSQL already had a job with this id or deduplication "
                        f"id (state there: {there}; in Redis: {entry.state})"
                    )
                continue
            if (
                check.sub_state is None
                or check.priority is None
                or check.queue != engine_queue(entry.prefix, entry.queue)
                or check.job_key != entry.job_id
            ):
                self._problem(f"{where}: not found through the facade")
                continue
            state = bullmq_state(check.sub_state, check.priority)
            if moved_before:
                if state != entry.state:
                    self._progressed(state)
                if check.payload_matches is False:
                    self._problem(f"{where}: data differs from what was moved")
                continue
            allowed = {entry.state}
            if entry.state not in ("completed", "failed"):
                # a job still to run may have run in the engine since (or fallen due, been
                # released by its children, or failed an attempt and wait for its retry):
                # later states are fine
                allowed |= {"active", "completed", "failed", "delayed"}
                if entry.state in ("delayed", "waiting-children"):
                    allowed |= {"waiting", "prioritized"}
            if state not in allowed:
                self._problem(f"{where}: state {state}, expected {entry.state}")
            if check.payload_matches is False:
                self._problem(f"{where}: data differs from Redis")

    def _progressed(self, state: str) -> None:
        progressed = self.report.progressed
        progressed[state] = progressed.get(state, 0) + 1

    def _problem(self, text: str) -> None:
        self.verified = False
        problems = self.report.problems
        if len(problems) < PROBLEMS_LISTED:
            problems.append(text)
        elif len(problems) == PROBLEMS_LISTED:
            problems.append("... more problems: only the first 1000 are listed")


async def _settle(jobs: JobQueue, ledger: Ledger, plan: Plan, *, settings: bool = True) -> None:
    """Schedules (adopting their pending iterations), dedup holds, queue settings (unless
    ``settings`` is False) and the id counter, once every job is written."""
    wanted = [
        (s.pending[0].prefix, s.pending[0].name, s.pending[1])
        for s in plan.schedules
        if s.pending is not None
    ] + [h.job for h in plan.holds if h.job is not None]
    engine_ids = await ledger.engine_ids(wanted)
    for schedule in plan.schedules:
        pending = None
        if schedule.pending is not None:
            ref, bullmq_id = schedule.pending
            pending = engine_ids.get((ref.prefix, ref.name, bullmq_id))
        await jobs.upsert_schedule(**schedule.arguments, pending_job_id=pending)
    for hold in plan.holds:
        job_id = None if hold.job is None else engine_ids.get(hold.job)
        await jobs.hold_dedup_key(hold.queue, hold.key, hold.until, job_id=job_id)
    for setting in plan.settings if settings else []:
        if setting.paused:
            await jobs.pause(setting.queue)
        if setting.concurrency:
            await jobs.set_concurrency(setting.queue, setting.concurrency)
        if setting.rate:
            await jobs.set_rate_limit(setting.queue, setting.rate[0], setting.rate[1])
    await jobs.reserve_ids(plan.max_numeric_id)


def _container_of(found: Any) -> str:
    """The container a fetched job stands in, by BullMQ's precedence (a job in two takes the
    one that decides its state)."""
    return next((c for c in CONTAINERS if c in found.containers), "wait")


def _runs(units: list[Unit]) -> list[list[Unit]]:
    """Consecutive single-job units together; every flow unit alone."""
    groups: list[list[Unit]] = []
    for unit in units:
        if not unit.edges and groups and not groups[-1][0].edges:
            groups[-1].append(unit)
        else:
            groups.append([unit])
    return groups


def _entry_results(units: list[Unit], results: list[Any]) -> list[tuple[LedgerEntry, Any]]:
    """Each ledger entry of ``units`` with the import result of its job (placeholders have no
    ledger entry)."""
    by_handle: dict[str, Any] = {}
    flat = [j for u in units for j in u.jobs]
    for job, result in zip(flat, results, strict=True):
        if job.handle is not None:
            by_handle[job.handle] = result
    pairs: list[tuple[LedgerEntry, Any]] = []
    position = 0
    for unit in units:
        for entry in unit.ledger:
            result = by_handle.get(entry.handle)
            if result is None:  # a proto-job (no handle): the unit's only job
                result = results[position]
            pairs.append((entry, result))
        position += len(unit.jobs)
    return pairs


async def _moved_earlier(jobs: JobQueue, options: MigrationOptions) -> dict[str, int]:
    """Jobs moved by earlier runs from the selected prefixes and queues, by queue (the ledger's
    records): what a rerun after a finished move reports."""
    found: dict[str, int] = {}
    for prefix in options.prefixes or [""]:
        for name, records in (await jobs.import_sources(source(prefix, "") if prefix
                                                         else "bullmq:")).items():  # fmt: skip
            queue = name.removeprefix("bullmq:")
            if not options.queues or queue.rsplit(":", 1)[-1] in options.queues:
                found[queue] = records
    return found


async def _delete(options: MigrationOptions, refs: list[QueueRef], report: Report) -> None:
    """BullMQ-correct removal, with BullMQ's own client (never a raw DEL of a subset)."""
    try:
        import bullmq
    except ImportError:
        report.problems.append("--delete-from-redis needs the bullmq package: pip install bullmq")
        return
    for ref in refs:
        queue = bullmq.Queue(ref.name, {"connection": options.redis_url, "prefix": ref.prefix})
        try:
            await queue.pause()
            await queue.obliterate(force=True)
            report.deleted.append(str(ref))
            left = await _leftovers(options.redis_url, ref)
            if left:
                report.notes.append(
                    f"{ref}: BullMQ's obliterate left {left} key(s) (waiting-children parents, "
                    "dedup keys of removed jobs); they are already migrated: remove them with "
                    "your BullMQ tooling or leave them"
                )
        finally:
            with contextlib.suppress(Exception):
                await queue.close()


async def _leftovers(redis_url: str, ref: QueueRef) -> int:
    import redis.asyncio as aioredis

    client = aioredis.from_url(redis_url)
    try:
        return sum([1 async for _ in client.scan_iter(match=f"{ref.base}*", count=1000)])
    finally:
        await client.aclose()


__all__ = ["ExitCode", "MigrationOptions", "Report", "Skip", "migrate"]
