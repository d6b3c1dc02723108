"""Tracking API timings on a large table: `./run bench-tracking` (or python -m bench.tracking).

Builds 1,000,000 finished jobs over 7 days across 10 queues, 10,000 pending jobs, 2,000 small
flows and one 1,000-node flow, sweeps the metrics, then times (median of 5 after a warm-up):
substate_counts for one queue, list_flows first page, flow_view of the 1,000-node flow, and
queue_metrics over 7 days of minute buckets. Prints each call's plan summary (scans used).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta

import asyncpg

from pgjobs import FlowFilter, JobFilter, JobQueue
from pgjobs.devserver import find_or_start_postgres
from pgjobs.maintenance import SweepInput, sweep_metrics

FINISHED = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000


async def timed(label: str, call) -> float:
    await call()
    samples = []
    for _ in range(5):
        start = time.perf_counter()
        await call()
        samples.append((time.perf_counter() - start) * 1000)
    median = statistics.median(samples)
    print(f"{label:<48} {median:8.1f} ms  (min {min(samples):.1f}, max {max(samples):.1f})")
    return median


async def main() -> None:
    dsn = find_or_start_postgres()
    schema = f"bench_tracking_{uuid.uuid4().hex[:6]}"
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=4)
    jobs = await JobQueue.connect(pool=pool, schema=schema)
    await jobs.migrate()
    s = schema
    try:
        t0 = time.perf_counter()
        await pool.execute(
            f"""INSERT INTO {s}.jobs (queue, kind, name, payload, status, max_attempts, backoff, attempts,
                                     created_at, started_at, finished_at)
                SELECT 'q' || (g % 10), 'k', 'job-' || g, '{{}}', CASE WHEN g % 50 = 0 THEN 'dead' ELSE 'completed' END,
                       1, '{{}}', 1, f - interval '1 second', f - interval '1 second', f
                FROM generate_series(1, $1::int) g,
                     LATERAL (SELECT now() - (g::float8 / $1 * interval '7 days') AS f) t""",
            FINISHED,
        )
        await pool.execute(
            f"""INSERT INTO {s}.jobs (queue, kind, name, payload, max_attempts, backoff)
                SELECT 'q' || (g % 10), 'k', 'pending-' || g, '{{}}', 1, '{{}}' FROM generate_series(1, 10000) g"""
        )
        # 2,000 small flows of 5 nodes, and one 1,000-node flow (a wide tree).
        await pool.execute(
            f"""WITH fl AS (INSERT INTO {s}.flows (name) SELECT 'flow-' || g FROM generate_series(1, 2000) g RETURNING id)
                INSERT INTO {s}.jobs (queue, kind, name, payload, max_attempts, backoff, flow_id, status, finished_at)
                SELECT 'q' || (fl.id % 10), 'k', 'node', '{{}}', 1, '{{}}', fl.id, 'completed', now()
                FROM fl, generate_series(1, 5)"""
        )
        big = await pool.fetchval(f"INSERT INTO {s}.flows (name) VALUES ('big') RETURNING id")
        await pool.execute(
            f"""INSERT INTO {s}.jobs (queue, kind, name, payload, max_attempts, backoff, flow_id, pending_deps)
                SELECT 'q1', 'k', 'big-' || g, '{{}}', 1, '{{}}', $1, CASE WHEN g = 1 THEN 0 ELSE 1 END
                FROM generate_series(1, 1000) g""",
            big,
        )
        await pool.execute(
            f"""INSERT INTO {s}.job_edges (prerequisite_id, dependent_id, policy)
                SELECT r.id, j.id, 'block' FROM {s}.jobs j,
                     (SELECT min(id) AS id FROM {s}.jobs WHERE flow_id = $1) r
                WHERE j.flow_id = $1 AND j.id <> r.id""",
            big,
        )
        await pool.execute(f"VACUUM ANALYZE {s}.jobs")
        await pool.execute(f"VACUUM ANALYZE {s}.job_edges")
        print(
            f"built {FINISHED:,} finished + 10,000 pending + flows in {time.perf_counter() - t0:.0f}s"
        )
        t1 = time.perf_counter()
        await sweep_metrics(jobs.db, SweepInput(settle_seconds=0, keep_minutes_days=14))
        print(f"first metrics sweep over everything: {time.perf_counter() - t1:.1f}s")
        # Let a live tail exist past the watermark.
        await pool.execute(
            f"""INSERT INTO {s}.jobs (queue, kind, name, payload, status, max_attempts, backoff, finished_at)
                SELECT 'q1', 'k', 'late', '{{}}', 'completed', 1, '{{}}', now() FROM generate_series(1, 500)"""
        )

        week_ago = datetime.now(UTC) - timedelta(days=7)
        await timed(
            "substate_counts(queue='q1')", lambda: jobs.substate_counts(JobFilter(queue="q1"))
        )
        await timed("substate_counts() whole table", lambda: jobs.substate_counts())
        await timed(
            "list_jobs(queue='q1', sub_state='ready') page",
            lambda: jobs.list_jobs(JobFilter(queue="q1", sub_state="ready")),
        )
        await timed("list_flows() first page (50)", lambda: jobs.list_flows())
        await timed(
            "list_flows(queue='q3') first page", lambda: jobs.list_flows(FlowFilter(queue="q3"))
        )
        await timed("flow_view(1,000-node flow)", lambda: jobs.flow_view(big))
        await timed(
            "queue_metrics('q1', minute, 7 days)",
            lambda: jobs.queue_metrics("q1", "minute", week_ago),
        )
        await timed("queue_stats()", lambda: jobs.queue_stats())

        from pgjobs.sql import filters

        for name, where in (("substate_counts", JobFilter(queue="q1")),):
            sql, params = filters.where(where, 1, "j", s)
            plan = await pool.fetch(
                "EXPLAIN " + jobs.db.statements[name].replace("{where}", sql), *params
            )
            print(f"\nplan of {name}(queue='q1'):")
            print("\n".join("  " + r[0] for r in plan if "Scan" in r[0] or "Aggregate" in r[0]))
    finally:
        await pool.execute(f"DROP SCHEMA {s} CASCADE")
        await pool.close()


if __name__ == "__main__":
    asyncio.run(main())
