"""``pgjobs-bullmq-worker QUEUE MODULE:PROCESSOR``: a BullMQ-style processor run as a process.

The processor is what ``Worker(queue, processor)`` takes (``async def process(job, token)``).
The first SIGTERM or SIGINT stops fetching and lets running jobs finish for up to
``--shutdown-timeout`` seconds, then gives the rest back to waiting without using an attempt;
the process exits 0. A second signal gives them back at once and exits 1.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

import pgjobs
from bullmq_compat.types import WorkerOptions
from bullmq_compat.worker import Worker


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pgjobs-bullmq-worker",
        description="run a BullMQ processor on the pgjobs facade until SIGTERM/SIGINT",
    )
    parser.add_argument("queue", help="the BullMQ queue name")
    parser.add_argument("processor", help="MODULE:FUNCTION, e.g. myapp.jobs:process")
    parser.add_argument(
        "--dsn", default=None, help="PostgreSQL DSN (default: $PGJOBS_DSN, $DATABASE_URL, local)"
    )
    parser.add_argument("--schema", default=pgjobs.DEFAULT_SCHEMA)
    parser.add_argument("--prefix", default="bull", help="BullMQ's key prefix (default bull)")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument(
        "--shutdown-timeout",
        type=float,
        default=30.0,
        help="seconds running jobs get to finish on SIGTERM before they are given back",
    )
    parser.add_argument("--durability", choices=("durable", "async"), default="durable")
    parser.add_argument("--log-format", choices=("text", "json"), default="text")
    parser.add_argument("--log-level", default="INFO")
    return parser


async def _serve(args: argparse.Namespace, processor: object) -> int:
    dsn = args.dsn or pgjobs.dsn_from_env()
    opts: WorkerOptions = {
        "schema": args.schema,
        "prefix": args.prefix,
        "concurrency": args.concurrency,
        "durability": args.durability,
        "shutdownTimeout": int(args.shutdown_timeout * 1000),
        "autorun": False,
    }
    if dsn:
        opts["connection"] = dsn
    jobs = await pgjobs.JobQueue.connect(dsn, schema=args.schema, max_size=2)
    try:
        await jobs.check_schema()  # one clear line for a missing or stale schema, nothing run
    finally:
        await jobs.close()
    worker = Worker(args.queue, processor, opts)  # type: ignore[arg-type]
    failures: list[BaseException] = []
    worker.on("error", failures.append)
    status = await pgjobs.serve_with_signals(worker.run(), worker.close, f"worker {args.queue}")
    if failures and not isinstance(failures[-1], pgjobs.TRANSIENT_ERRORS):
        raise failures[-1]
    return status


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    pgjobs.configure_logging(args.log_format, args.log_level)
    try:
        processor = pgjobs.load_object(args.processor, "MODULE:FUNCTION, e.g. myapp.jobs:process")
        if not callable(processor):
            raise pgjobs.CommandError(f"{args.processor} is not callable")
        return asyncio.run(_serve(args, processor))
    except (pgjobs.CommandError, pgjobs.PgJobsError, *pgjobs.CONNECTION_ERRORS) as exc:
        message = " ".join(str(exc).split()) or type(exc).__name__
        print(f"pgjobs-bullmq-worker: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
