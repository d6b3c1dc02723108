"""``bullmq-to-pgjobs`` / ``python -m migration_tools``: a thin layer over migration_tools.migrate.

Exit status: 0 everything migrated and verified; 1 something was not migrated or did not verify
(or a connection failed: rerun);
2 refused, nothing written (bad arguments, clients connected, legacy layout, missing schema);
3 Redis changed during the run (rerun to pick up the rest).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from migration_tools.run import ExitCode, MigrationOptions, migrate
from pgjobs import PgJobsError, dsn_from_env


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="bullmq-to-pgjobs",
        description="Drain BullMQ queues from Redis into pgjobs, once, losing nothing.",
    )
    p.add_argument("--redis", required=True, help="redis://host:6379/0")
    p.add_argument(
        "--postgres", default=None, help="PostgreSQL DSN (default: PGJOBS_DSN, then DATABASE_URL)"
    )
    p.add_argument("--schema", default="pgjobs", help="the pgjobs schema (migrated beforehand)")
    p.add_argument("--prefix", action="append", dest="prefixes", help="BullMQ prefix (repeatable)")
    p.add_argument("--queue", action="append", dest="queues", help="queue name (repeatable)")
    p.add_argument("--dry-run", action="store_true", help="read and plan; write nothing")
    p.add_argument("--verify-only", action="store_true", help="compare Redis with the engine")
    p.add_argument(
        "--include-history", action="store_true", help="also migrate completed and failed jobs"
    )
    p.add_argument(
        "--wait-active",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="wait this long for active jobs to finish first",
    )
    p.add_argument(
        "--allow-connected",
        action="store_true",
        help="run although BullMQ clients are still connected",
    )
    p.add_argument(
        "--delete-from-redis",
        action="store_true",
        help="after a verified run, remove the queues from Redis with BullMQ's client",
    )
    p.add_argument(
        "--live",
        action="store_true",
        help="move while BullMQ producers and workers keep running: pass over the queues until "
        "Redis holds none of their unfinished jobs (each job leaves Redis as it is written)",
    )
    p.add_argument(
        "--deadline",
        type=float,
        default=None,
        metavar="SECONDS",
        help="with --live: stop passing after this long and report what is left",
    )
    p.add_argument(
        "--interval",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="with --live: seconds between two passes (default 1)",
    )
    p.add_argument(
        "--quiet-for",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="with --live: end only once Redis has held no unfinished job of the queues for "
        "this long (producers still adding to Redis keep the move going); default 0",
    )
    p.add_argument("--batch-size", type=int, default=1000)
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    return p


_FLAGS = {
    "redis_url": "redis",
    "postgres_dsn": "postgres",
    "prefixes": "prefix",
    "queues": "queue",
    "wait_active": "wait-active",
    "batch_size": "batch-size",
    "live_deadline": "deadline",
    "live_interval": "interval",
    "live_quiet": "quiet-for",
}
"""MigrationOptions field -> the CLI flag that sets it, for error messages."""


def _options(args: argparse.Namespace) -> MigrationOptions:
    return MigrationOptions(
        redis_url=args.redis,
        postgres_dsn=args.postgres or dsn_from_env(),
        schema=args.schema,
        prefixes=args.prefixes,
        queues=args.queues,
        dry_run=args.dry_run,
        verify_only=args.verify_only,
        include_history=args.include_history,
        wait_active=args.wait_active,
        allow_connected=args.allow_connected,
        delete_from_redis=args.delete_from_redis,
        batch_size=args.batch_size,
        live=args.live,
        live_deadline=args.deadline,
        live_interval=args.interval,
        live_quiet=args.quiet_for,
        progress=sys.stderr,
    )


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.dry_run and (args.verify_only or args.delete_from_redis):
        print(
            "--dry-run writes nothing: it cannot be combined with --verify-only or "
            "--delete-from-redis",
            file=sys.stderr,
        )
        return int(ExitCode.REFUSED)
    try:
        options = _options(args)
    except PgJobsError as exc:  # InvalidOption, InvalidSchemaName: named, nothing connected
        flag = getattr(exc, "option", None)
        where = f"--{_FLAGS.get(flag, flag)}: " if flag else ""
        print(f"bullmq-to-pgjobs: {where}{exc}; nothing was written", file=sys.stderr)
        return int(ExitCode.REFUSED)
    report = asyncio.run(migrate(options))
    if args.json:
        print(json.dumps(report.as_dict()))
    elif report.refused:
        print(f"bullmq-to-pgjobs: {report.refused}", file=sys.stderr)
    else:
        print(report.render())
    return int(report.exit_code)


if __name__ == "__main__":
    sys.exit(main())
