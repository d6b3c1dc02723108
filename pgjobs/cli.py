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
    return parser


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
        if applied:
            print(f"applied migrations {applied} to {args.schema}")
        else:
            print(f"schema {args.schema} already up to date")
        return 0
    return 2  # pragma: no cover - argparse rejects unknown commands


if __name__ == "__main__":
    sys.exit(main())
