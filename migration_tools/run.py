"""The migration as a library: ``await migrate(MigrationOptions(...))`` returns a Report whose
``exit_code`` the CLI passes on. Steps (bullmq_redis_layout.md §12): discover, refuse while
clients are connected, wait for active jobs, fingerprint, snapshot (whole flow trees, across
queues), transform, write in batches (each one transaction with its ledger rows), schedules,
dedup holds and queue settings, fingerprint again, verify through the facade, and only then,
if asked, delete from Redis."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, TextIO

import asyncpg

from bullmq_compat import Queue, facade_registry
from migration_tools import snapshot as snap
from migration_tools.layout import LegacyLayout, split_job_key
from migration_tools.ledger import Ledger
from migration_tools.progress import Progress
from migration_tools.transform import Plan, Skip, Transformer, Unit, checksum
from pgjobs import InvalidOption, JobQueue, SchemaMissing, validate_schema


class ExitCode(IntEnum):
    OK = 0
    INCOMPLETE = 1  # something was not migrated, or verification found a difference
    REFUSED = 2  # nothing written: bad arguments, live clients, a legacy layout, no schema
    CHANGED = 3  # Redis changed while the migration ran: rerun to pick the rest up


REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


@dataclass
class MigrationOptions:
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
    batch_size: int = 500
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
        if not (isinstance(self.wait_active, int | float) and 0 <= self.wait_active < math.inf):
            raise InvalidOption(
                "wait_active", f"must be a finite number of seconds >= 0, got {self.wait_active!r}"
            )


@dataclass
class Report:
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

    @property
    def exit_code(self) -> ExitCode:
        if self.refused:
            return ExitCode.REFUSED
        if self.changed:
            return ExitCode.CHANGED
        live = [s for s in (self.plan.skipped if self.plan else []) if "live lock" in s.reason]
        if self.problems or self.verified is False or live:
            return ExitCode.INCOMPLETE
        return ExitCode.OK

    def skipped_summary(self) -> list[tuple[str, str, list[str]]]:
        """Skipped jobs by (queue, reason), with their ids, in first-seen order."""
        groups: dict[tuple[str, str], list[str]] = {}
        for skip in self.plan.skipped if self.plan else []:
            groups.setdefault((skip.queue, skip.reason), []).append(skip.job_id)
        return [(queue, reason, ids) for (queue, reason), ids in groups.items()]

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
            "flows": sum(1 for u in plan.units if u.edges) if plan else 0,
            "schedules": len(plan.schedules) if plan else 0,
            "dedup_holds": len(plan.holds) if plan else 0,
            "skipped": [
                {"queue": queue, "reason": reason, "count": len(ids), "job_ids": ids}
                for queue, reason, ids in self.skipped_summary()
            ],
            "warnings": plan.warnings if plan else [],
            "written": self.written,
            "already_migrated": self.already_done,
            "verified": self.verified,
            "problems": self.problems,
            "changed": self.changed,
            "deleted": self.deleted,
            "notes": self.notes,
        }

    def render(self) -> str:
        lines: list[str] = []
        if self.refused:
            return f"REFUSED: {self.refused}"
        lines.append(f"queues: {', '.join(self.queues) or '(none)'}")
        lines.extend(f"  note: {n}" for n in self.notes)
        plan = self.plan
        if plan is not None:
            for queue, counts in sorted(plan.counts.items()):
                parts = ", ".join(f"{state} {n}" for state, n in sorted(counts.items()))
                lines.append(f"  {queue}: {parts}")
            flows = sum(1 for u in plan.units if u.edges)
            lines.append(
                f"jobs: {plan.job_count} in {len(plan.units)} units ({flows} flows); "
                f"schedules: {len(plan.schedules)}; dedup holds: {len(plan.holds)}; "
                f"queue settings: {len(plan.settings)}"
            )
            for queue, reason, ids in self.skipped_summary():
                shown = ", ".join(ids[:5]) + (
                    f", ... ({len(ids) - 5} more)" if len(ids) > 5 else ""
                )
                lines.append(f"  skipped in {queue}: {len(ids)} {reason} ({shown})")
            for warning in plan.warnings:
                lines.append(f"  warning: {warning}")
        lines.append(f"written: {self.written}; already migrated: {self.already_done}")
        if self.verified is not None:
            lines.append("verification: " + ("passed" if self.verified else "FAILED"))
        lines.extend(f"  problem: {p}" for p in self.problems)
        lines.extend(f"  changed during the run: {c}" for c in self.changed)
        lines.extend(f"  deleted from Redis: {d}" for d in self.deleted)
        lines.append(f"exit status: {int(self.exit_code)} ({self.exit_code.name})")
        return "\n".join(lines)


async def migrate(options: MigrationOptions) -> Report:
    """Run the migration; every outcome is in the Report (a refusal when nothing could be
    read or written, a problem when a run stopped part way), never an exception."""
    import redis.asyncio as aioredis
    from redis.exceptions import RedisError

    report = Report()
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
    known = await snap.discover(redis, options.prefixes)
    refs = [r for r in known if not options.queues or r.name in options.queues]
    if not refs:
        report.refused = "no BullMQ queue found (looked for <prefix>:<queue>:meta keys)"
        return
    writing = not (options.dry_run or options.verify_only)
    if writing and options.wait_active > 0:
        await snap.wait_for_active(redis, refs, options.wait_active)
    clients = await snap.connected_clients(redis, known)
    if clients and writing and not options.allow_connected:
        report.refused = (
            f"{len(clients)} BullMQ client(s) still connected ({', '.join(clients[:5])}); stop "
            "producers and workers first, or pass --allow-connected"
        )
        return
    before = {ref: await snap.fingerprint(redis, ref) for ref in refs}
    snapshots = await _snapshots_with_flows(redis, refs, known, report)
    report.queues = [str(r) for r in snapshots]
    plan = Transformer(snapshots, options.include_history, locks_may_be_held=bool(clients)).build()
    for snapshot in snapshots.values():
        snapshot.jobs.clear()  # the plan holds what is written and verified from here on
    report.plan = plan
    if options.dry_run:
        return
    ledger = Ledger(jobs)
    if writing:
        await _write(jobs, ledger, plan, options, report)
    after = {ref: await snap.fingerprint(redis, ref) for ref in before}
    report.changed = [
        f"{ref} (sizes, id counter or last event moved; rerun to migrate the rest)"
        for ref in before
        if before[ref] != after[ref]
    ]
    await _verify(jobs, ledger, plan, snapshots, report)
    if writing and options.delete_from_redis:
        if report.exit_code is ExitCode.OK:
            await _delete(options, list(snapshots), report)
        else:
            report.problems.append("not deleting from Redis: the migration did not verify")


async def _snapshots_with_flows(
    redis: Any, refs: list[snap.QueueRef], known: list[snap.QueueRef], report: Report
) -> dict[snap.QueueRef, snap.QueueSnapshot]:
    """Read the chosen queues, then every other queue a flow of theirs reaches."""
    bases = [(r.prefix, r.name) for r in known]
    snapshots: dict[snap.QueueRef, snap.QueueSnapshot] = {}
    todo = list(refs)
    while todo:
        ref = todo.pop(0)
        if ref in snapshots:
            continue
        snapshots[ref] = await snap.read_queue(redis, ref)
        for job in snapshots[ref].jobs.values():
            links = [
                job.fields.get("parentKey") or "",
                *job.dependencies,
                *job.processed,
                *job.failed_children,
                *job.unsuccessful,
            ]
            for key in links:
                found = split_job_key(key, bases) if key else None
                if found is None:
                    continue
                other = snap.QueueRef(found[0], found[1])
                if other not in snapshots and other not in todo:
                    todo.append(other)
                    report.notes.append(f"queue {other} added: it holds part of a flow of {ref}")
    return snapshots


def _batches(units: list[Unit], size: int) -> list[list[Unit]]:
    batches: list[list[Unit]] = []
    current: list[Unit] = []
    count = 0
    for unit in units:
        if current and count + len(unit.jobs) > size:
            batches.append(current)
            current, count = [], 0
        current.append(unit)
        count += len(unit.jobs)
    if current:
        batches.append(current)
    return batches


async def _write(
    jobs: JobQueue, ledger: Ledger, plan: Plan, options: MigrationOptions, report: Report
) -> None:
    progress = Progress(plan.job_count, "migrating", options.progress)
    for batch in _batches(plan.units, options.batch_size):
        async with jobs.transaction() as conn:
            keys = [(e.prefix, e.queue, e.job_id) for u in batch for e in u.ledger]
            done = await ledger.done(conn, keys)
            todo = [
                u for u in batch if not all((e.prefix, e.queue, e.job_id) in done for e in u.ledger)
            ]
            report.already_done += len(batch) - len(todo)
            rows: list[tuple[str, str, str, int, str, str]] = []
            # In plan order (it is BullMQ's processing order): runs of single jobs in one
            # statement, each flow tree in its own (it gets its own flow).
            for group in _runs(todo):
                edges = [e for u in group for e in u.edges]
                results = await jobs.import_jobs(
                    [j for u in group for j in u.jobs], edges, connection=conn
                )
                _ledger_rows(group, results, rows)
            if rows:
                await ledger.record(conn, rows)
            report.written += sum(len(u.jobs) for u in todo)
        progress.advance(sum(len(u.jobs) for u in batch))
        if options.after_batch is not None:
            result = options.after_batch(report.written)
            if result is not None:
                await result
    progress.close()
    # The engine ids of every schedule's pending iteration and every hold's job: one read.
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
    for setting in plan.settings:
        if setting.paused:
            await jobs.pause(setting.queue)
        if setting.concurrency:
            await jobs.set_concurrency(setting.queue, setting.concurrency)
        if setting.rate:
            await jobs.set_rate_limit(setting.queue, setting.rate[0], setting.rate[1])
    await jobs.reserve_ids(plan.max_numeric_id)


def _runs(units: list[Unit]) -> list[list[Unit]]:
    """Consecutive single-job units together; every flow unit alone."""
    groups: list[list[Unit]] = []
    for unit in units:
        if not unit.edges and groups and not groups[-1][0].edges:
            groups[-1].append(unit)
        else:
            groups.append([unit])
    return groups


def _ledger_rows(
    units: list[Unit], results: list[Any], rows: list[tuple[str, str, str, int, str, str]]
) -> None:
    """Ledger rows for the jobs of ``units`` (placeholders have no ledger entry)."""
    by_handle: dict[str, int] = {}
    flat = [j for u in units for j in u.jobs]
    for job, result in zip(flat, results, strict=True):
        if job.handle is not None:
            by_handle[job.handle] = result.id
    position = 0
    for unit in units:
        for entry in unit.ledger:
            engine_id = by_handle.get(entry.handle)
            if engine_id is None:  # a proto-job (no handle): the unit's only job
                engine_id = results[position].id
            rows.append(
                (entry.prefix, entry.queue, entry.job_id, engine_id, entry.state, entry.checksum)
            )
        position += len(unit.jobs)


async def _verify(
    jobs: JobQueue,
    ledger: Ledger,
    plan: Plan,
    snapshots: dict[snap.QueueRef, snap.QueueSnapshot],
    report: Report,
) -> None:
    """Every job of the plan, read back through the facade: present, in the expected state,
    with the same data (canonical checksum)."""
    ok = True
    for ref in snapshots:
        queue = Queue(ref.name, {"connection": jobs, "prefix": ref.prefix, "schema": jobs.schema})
        seen: dict[str, tuple[str, str]] = {}
        for state in (
            "waiting",
            "prioritized",
            "delayed",
            "waiting-children",
            "completed",
            "failed",
            "active",
        ):
            for job in await queue.getJobs([state], 0, -1, asc=True):
                seen[str(job.id)] = (state, checksum(job.data))
        entries = await ledger.entries(ref.prefix, ref.name)
        expected = [
            e for u in plan.units for e in u.ledger if (e.prefix, e.queue) == (ref.prefix, ref.name)
        ]
        for entry in expected:
            if entry.job_id not in entries:
                ok = False
                report.problems.append(f"{ref} {entry.job_id}: not in the ledger")
                continue
            key = entry.job_id if not entry.job_id.startswith("dn:") else None
            if key is None:
                continue
            found = seen.get(key)
            if found is None:
                ok = False
                report.problems.append(f"{ref} {key}: not found through the facade")
                continue
            state, data_sum = found
            allowed = {entry.state}
            if entry.state not in ("completed", "failed"):
                # a job still to run may have run in the engine since (or fallen due, or been
                # released by its children): later states are fine, earlier ones are not
                allowed |= {"active", "completed", "failed"}
                if entry.state in ("delayed", "waiting-children"):
                    allowed |= {"waiting", "prioritized"}
            if state not in allowed:
                ok = False
                report.problems.append(f"{ref} {key}: state {state}, expected {entry.state}")
            if data_sum != entry.checksum:  # both sides are the stored (jsonb-safe) data
                ok = False
                report.problems.append(f"{ref} {key}: data differs from Redis")
        await queue.close()
    report.verified = ok


async def _delete(options: MigrationOptions, refs: list[snap.QueueRef], report: Report) -> None:
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


async def _leftovers(redis_url: str, ref: snap.QueueRef) -> int:
    import redis.asyncio as aioredis

    client = aioredis.from_url(redis_url)
    try:
        return sum([1 async for _ in client.scan_iter(match=f"{ref.base}*", count=1000)])
    finally:
        await client.aclose()


__all__ = ["ExitCode", "MigrationOptions", "Report", "Skip", "migrate"]
