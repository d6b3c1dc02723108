"""The ``pgjobs`` command: parse, call one library function, print. Decides nothing itself."""

from __future__ import annotations

import argparse
import asyncio
import sys

from pgjobs.config import DEFAULT_SCHEMA, dsn_from_env
from pgjobs.errors import PgJobsError
from pgjobs.migrate import migrate


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pgjobs", description="pgjobs: a job queue in PostgreSQL")
    commands = parser.add_subparsers(dest="command", required=True)
    mig = commands.add_parser("migrate", help="create or upgrade the pgjobs schema (idempotent)")
    mig.add_argument(
        "--dsn", default=None, help="PostgreSQL DSN (default: $PGJOBS_DSN, $DATABASE_URL, local)"
    )
    mig.add_argument(
        "--schema", default=DEFAULT_SCHEMA, help=f"schema name (default: {DEFAULT_SCHEMA})"
    )
    dash = commands.add_parser("dashboard", help="serve the web dashboard (dashboard extra)")
    dash.add_argument("--dsn", default=None, help="PostgreSQL DSN (default as for migrate)")
    dash.add_argument("--schema", default=DEFAULT_SCHEMA)
    dash.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback)")
    dash.add_argument("--port", type=int, default=8765)
    dash.add_argument("--read-only", action="store_true", help="refuse every action")
    return parser


def _dashboard(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from pgjobs.dashboard import create_app
    except ImportError:
        print("pgjobs dashboard: install the extra: pip install 'pgjobs-engine[dashboard]'",
              file=sys.stderr)  # fmt: skip
        return 2
    from pgjobs.client import JobQueue

    async def serve() -> None:
        jobs = await JobQueue.connect(args.dsn or dsn_from_env(), schema=args.schema)
        await jobs.check_schema()
        app = create_app(jobs, read_only=args.read_only)
        config = uvicorn.Config(app, host=args.host, port=args.port, log_level="info")
        try:
            await uvicorn.Server(config).serve()
        finally:
            await jobs.close()

    try:
        asyncio.run(serve())
    except PgJobsError as exc:
        print(f"pgjobs dashboard: {exc}", file=sys.stderr)
        return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "migrate":
        dsn = args.dsn or dsn_from_env()
        assert dsn is not None  # dsn_from_env falls back to the local default
        try:
            applied = asyncio.run(migrate(dsn, args.schema))
        except PgJobsError as exc:
            print(f"pgjobs migrate: {exc}", file=sys.stderr)
            return 2
        except OSError as exc:
            print(f"pgjobs migrate: cannot connect to PostgreSQL: {exc}", file=sys.stderr)
            return 1
        if applied.versions:
            print(f"applied migrations {applied.versions} to {args.schema}")
        elif applied.definitions_applied:
            print(f"refreshed the function and trigger definitions of {args.schema}")
        else:
            print(f"schema {args.schema} already up to date")
        return 0
    if args.command == "dashboard":
        return _dashboard(args)
    return 2  # pragma: no cover - argparse rejects unknown commands


if __name__ == "__main__":
    sys.exit(main())
