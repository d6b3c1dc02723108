"""The ``pgjobs`` command: parse, call one library function, print. Decides nothing itself.

Every error a user can cause (a DSN that does not parse or connect, an unknown database or
role, a missing schema, a registry that does not import) is one line on stderr and exit
status 2; nothing is started or half-written.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from pgjobs.config import DEFAULT_SCHEMA, dsn_from_env
from pgjobs.errors import PgJobsError
from pgjobs.migrate import migrate
from pgjobs.process import (
    CONNECTION_ERRORS,
    CommandError,
    configure_logging,
    health,
    load_registry,
    serve,
)


def _version() -> str:
    try:
        return version("pgjobs-engine")
    except PackageNotFoundError:  # pragma: no cover - running from a bare source tree
        return "unknown"


def _connection_arguments(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--dsn", default=None, help="PostgreSQL DSN (default: $PGJOBS_DSN, $DATABASE_URL, local)"
    )
    command.add_argument(
        "--schema", default=DEFAULT_SCHEMA, help=f"schema name (default: {DEFAULT_SCHEMA})"
    )


def _logging_arguments(command: argparse.ArgumentParser) -> None:
    command.add_argument("--log-format", choices=("text", "json"), default="text")
    command.add_argument("--log-level", default="INFO", help="DEBUG logs every outcome")


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pgjobs", description="pgjobs: a job queue in PostgreSQL")
    parser.add_argument("--version", action="version", version=f"pgjobs {_version()}")
    commands = parser.add_subparsers(dest="command", required=True)
    mig = commands.add_parser("migrate", help="create or upgrade the pgjobs schema (idempotent)")
    _connection_arguments(mig)
    work = commands.add_parser(
        "worker", help="run a worker for a registry until SIGTERM/SIGINT (graceful stop)"
    )
    work.add_argument("registry", help="MODULE:REGISTRY, e.g. myapp.jobs:registry")
    _connection_arguments(work)
    work.add_argument("--queues", default=None, help="comma-separated (default: the kinds' own)")
    work.add_argument("--concurrency", type=_positive, default=10)
    work.add_argument(
        "--shutdown-timeout",
        type=float,
        default=30.0,
        help="seconds running jobs get to finish on SIGTERM before they are given back",
    )
    work.add_argument("--name", default=None, help="the worker's name in list_workers")
    work.add_argument("--durability", choices=("durable", "async"), default="durable")
    work.add_argument(
        "--pgbouncer",
        action="store_true",
        help="--dsn is a transaction-mode pooler: no prepared-statement cache",
    )
    work.add_argument(
        "--listen-dsn",
        default=None,
        help="a direct (session) DSN for LISTEN when --dsn is a transaction-mode pooler",
    )
    _logging_arguments(work)
    sched = commands.add_parser("scheduler", help="emit due schedules until SIGTERM/SIGINT")
    _connection_arguments(sched)
    _logging_arguments(sched)
    check = commands.add_parser(
        "healthcheck",
        help="exit 0 if the database answers, the schema is current and workers heartbeat",
    )
    _connection_arguments(check)
    check.add_argument("--queue", default=None, help="count only workers of this queue")
    check.add_argument(
        "--min-workers", type=int, default=1, help="workers that must heartbeat (0: none)"
    )
    check.add_argument("--json", action="store_true")
    queues = commands.add_parser("queues", help="every queue with its counts by sub-state")
    _connection_arguments(queues)
    queues.add_argument("--json", action="store_true")
    jobs = commands.add_parser("jobs", help="list, retry or cancel jobs from the shell")
    actions = jobs.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="jobs matching the filters, newest first")
    _connection_arguments(listing)
    listing.add_argument("--queue", default=None)
    listing.add_argument("--kind", default=None)
    listing.add_argument("--sub-state", default=None, help="ready, delayed, retry, active, ...")
    listing.add_argument("--limit", type=_positive, default=50)
    listing.add_argument("--json", action="store_true")
    for name, what in (("retry", "re-drive finished jobs (fresh attempts, due now)"),
                       ("cancel", "cancel pending or running jobs")):  # fmt: skip
        action = actions.add_parser(name, help=what)
        _connection_arguments(action)
        action.add_argument("ids", nargs="+", type=int, metavar="ID")
        action.add_argument("--json", action="store_true")
    dash = commands.add_parser("dashboard", help="serve the web dashboard (dashboard extra)")
    _connection_arguments(dash)
    dash.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback)")
    dash.add_argument("--port", type=int, default=8765)
    dash.add_argument("--read-only", action="store_true", help="refuse every action")
    dash.add_argument(
        "--read-dsn",
        help="a read replica of the same database: the pages read there (actions go to --dsn)",
    )
    return parser


def _fail(command: str, message: object) -> int:
    print(f"pgjobs {command}: {' '.join(str(message).split())}", file=sys.stderr)
    return 2


def _migrate(args: argparse.Namespace) -> int:
    applied = asyncio.run(migrate(args.dsn or dsn_from_env() or "", args.schema))
    if applied.versions:
        print(f"applied migrations {applied.versions} to {args.schema}")
    elif applied.definitions_applied:
        print(f"refreshed the function and trigger definitions of {args.schema}")
    else:
        print(f"schema {args.schema} already up to date")
    return 0


def _worker(args: argparse.Namespace) -> int:
    from pgjobs.client import JobQueue

    registry = load_registry(args.registry)
    queues = [q.strip() for q in args.queues.split(",") if q.strip()] if args.queues else None
    configure_logging(args.log_format, args.log_level)

    # Behind a transaction-mode pooler, prepared statements do not survive the transaction.
    pooled: dict[str, Any] = {"statement_cache_size": 0} if args.pgbouncer else {}

    async def main() -> int:
        jobs = await JobQueue.connect(
            args.dsn,
            schema=args.schema,
            registry=registry,
            max_size=args.concurrency + 4,
            listen_dsn=args.listen_dsn,
            **pooled,
        )
        try:
            await jobs.check_schema()
            worker = jobs.worker(
                queues=queues,
                concurrency=args.concurrency,
                shutdown_timeout=args.shutdown_timeout,
                name=args.name,
                durability=args.durability,
            )
            return await serve(worker.run(), worker.stop, f"worker {worker.name}")
        finally:
            await jobs.close()

    return asyncio.run(main())


def _scheduler(args: argparse.Namespace) -> int:
    from pgjobs.client import JobQueue

    configure_logging(args.log_format, args.log_level)

    async def main() -> int:
        jobs = await JobQueue.connect(args.dsn, schema=args.schema)
        try:
            await jobs.check_schema()
            scheduler = jobs.scheduler()
            return await serve(scheduler.run(), scheduler.stop, "scheduler")
        finally:
            await jobs.close()

    return asyncio.run(main())


def _healthcheck(args: argparse.Namespace) -> int:
    found = asyncio.run(
        health(args.dsn, args.schema, queue=args.queue, min_workers=args.min_workers)
    )
    if args.json:
        print(
            json.dumps({"healthy": found.healthy, "checks": found.checks, "failed": found.failed})
        )
    else:
        for name, detail in found.checks.items():
            mark = "FAIL" if name in found.failed else "ok"
            print(f"{mark:4} {name}: {detail}")
    return 0 if found.healthy else 1


def _queues(args: argparse.Namespace) -> int:
    from pgjobs.client import JobQueue

    async def main() -> list[dict[str, Any]]:
        jobs = await JobQueue.connect(args.dsn, schema=args.schema, max_size=2)
        try:
            await jobs.check_schema()
            return [
                {
                    "queue": q.queue,
                    "paused": q.paused,
                    "counts": {s.value: n for s, n in q.counts.items()},
                }
                for q in await jobs.queue_stats()
            ]
        finally:
            await jobs.close()

    found = asyncio.run(main())
    if args.json:
        print(json.dumps(found))
    for queue in found if not args.json else []:
        counts = " ".join(f"{state}={n}" for state, n in queue["counts"].items() if n)
        print(f"{queue['queue']}{' (paused)' if queue['paused'] else ''}: {counts or 'empty'}")
    return 0


def _jobs(args: argparse.Namespace) -> int:
    from pgjobs.client import JobQueue
    from pgjobs.models import JobFilter

    async def main() -> Any:
        jobs = await JobQueue.connect(args.dsn, schema=args.schema, max_size=2)
        try:
            await jobs.check_schema()
            if args.action == "list":
                where = JobFilter(queue=args.queue, kind=args.kind, sub_state=args.sub_state)
                return await jobs.list_jobs(where, limit=args.limit)
            act = jobs.requeue if args.action == "retry" else jobs.cancel
            return {job_id: await act(job_id, any_tenant=True) for job_id in args.ids}
        finally:
            await jobs.close()

    result = asyncio.run(main())
    if args.action == "list":
        rows = [
            {"id": r.id, "queue": r.queue, "kind": r.kind, "name": r.name,
             "sub_state": r.sub_state.value, "attempts": r.attempts,
             "max_attempts": r.max_attempts, "run_at": r.run_at.isoformat(),
             "last_error": (r.last_error or {}).get("message")}
            for r in result
        ]  # fmt: skip
        if args.json:
            print(json.dumps(rows))
        for row in rows if not args.json else []:
            error = f"  {row['last_error']}" if row["last_error"] else ""
            print(f"{row['id']:>8} {row['queue']} {row['kind']} {row['sub_state']} "
                  f"{row['attempts']}/{row['max_attempts']}{error}")  # fmt: skip
        return 0
    if args.json:
        print(json.dumps({str(k): v for k, v in result.items()}))
    else:
        done_word = {"retry": "requeued", "cancel": "cancelled"}[args.action]
        for job_id, done in result.items():
            outcome = done_word if done else "nothing to do (absent, or not in a state for it)"
            print(f"{job_id}: {outcome}")
    return 0 if all(result.values()) else 1


def _dashboard(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from pgjobs.dashboard import create_app
    except ImportError:
        raise CommandError("install the extra: pip install 'pgjobs-engine[dashboard]'") from None
    from pgjobs.client import JobQueue

    async def serve_dashboard() -> None:
        jobs = await JobQueue.connect(args.dsn, schema=args.schema)
        reads = None
        try:
            await jobs.check_schema()
            if args.read_dsn:
                reads = await JobQueue.connect(args.read_dsn, schema=args.schema)
                await reads.check_schema()
            app = create_app(jobs, read_only=args.read_only, reads=reads)
            config = uvicorn.Config(app, host=args.host, port=args.port, log_level="info")
            await uvicorn.Server(config).serve()
        finally:
            if reads is not None:
                await reads.close()
            await jobs.close()

    asyncio.run(serve_dashboard())
    return 0


COMMANDS: dict[str, Any] = {
    "migrate": _migrate,
    "worker": _worker,
    "scheduler": _scheduler,
    "healthcheck": _healthcheck,
    "queues": _queues,
    "jobs": _jobs,
    "dashboard": _dashboard,
}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return int(COMMANDS[args.command](args))
    except (CommandError, PgJobsError) as exc:
        return _fail(args.command, exc)
    except CONNECTION_ERRORS as exc:
        return _fail(args.command, f"cannot use PostgreSQL ({type(exc).__name__}: {exc})")


if __name__ == "__main__":
    sys.exit(main())
