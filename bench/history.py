"""Finished jobs written straight into a schema, in the row shape the engine gives finished
facade jobs and where GC keeps them (completed ones in the history partition of their UTC day,
dead ones in ``jobs_live``: sql/schema/history.sql), counted into ``finished_counts`` as the
engine counts them: the history that the dashboard and scale benchmarks put beside the jobs
they time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pgjobs import JobQueue
from pgjobs.maintenance import SweepInput, sweep_metrics


async def top_up_history(
    jobs: JobQueue,
    size: int,
    *,
    queue: str = "bull:history",
    spread_seconds: int = 172_800,
    ended_seconds_ago: int = 0,
) -> int:
    """Finished jobs of ``queue`` up to ``size`` (1 in 20 failed), their finish times spread
    evenly over the ``spread_seconds`` (two days by default) that ended ``ended_seconds_ago``,
    then folded and
    swept into the metrics rollup as any running worker does within a minute; how many rows
    it wrote."""
    schema = jobs.db.schema
    have = await jobs.pool.fetchval(f"SELECT count(*) FROM {schema}.jobs WHERE queue = $1", queue)
    missing = size - have
    if missing <= 0:
        return 0
    now = datetime.now(UTC)
    day = (now - timedelta(seconds=ended_seconds_ago + spread_seconds + 2)).date()
    while day <= (now - timedelta(seconds=ended_seconds_ago)).date():
        await jobs.pool.fetchval(f"SELECT {schema}.create_history_partition($1)", day)
        day += timedelta(days=1)
    batch = 1_000_000  # one statement per million rows: a bounded transaction each
    for start in range(have + 1, size + 1, batch):
        await jobs.pool.execute(
            f"""
            WITH ins AS (
            INSERT INTO {schema}.jobs (queue, kind, name, payload, output, status, max_attempts,
                                       attempts, backoff, created_at, started_at, finished_at,
                                       last_error, metadata, record_events, history_day)
            SELECT $3, 'bullmq', 'render', jsonb_build_object('n', g),
                   CASE WHEN g % 20 = 0 THEN NULL ELSE '{{"ok": true}}'::jsonb END,
                   CASE WHEN g % 20 = 0 THEN 'dead' ELSE 'completed' END, 1, 1, '{{}}'::jsonb,
                   now() - make_interval(secs => (g % $6) * $4::float8 / $6 + $5 + 1),
                   now() - make_interval(secs => (g % $6) * $4::float8 / $6 + $5 + 0.5),
                   now() - make_interval(secs => (g % $6) * $4::float8 / $6 + $5),
                   CASE WHEN g % 20 = 0
                        THEN '{{"type": "Error", "message": "render failed"}}'::jsonb END,
                   '{{"opts": {{}}}}'::jsonb, true,
                   CASE WHEN g % 20 = 0 THEN 'infinity'::date
                        ELSE ((now() - make_interval(secs => (g % $6) * $4::float8 / $6 + $5))
                              AT TIME ZONE 'UTC')::date END
            FROM generate_series($1::bigint, $2::bigint) AS g
            RETURNING status, history_day
            )
            INSERT INTO {schema}.finished_counts (queue, status, history_day, n)
            SELECT $3, status, history_day, count(*) FROM ins GROUP BY status, history_day
            """,
            start,
            min(start + batch - 1, size),
            queue,
            spread_seconds,
            ended_seconds_ago,
            max(missing, 1),
        )
    await jobs.pool.execute(f"ANALYZE {schema}.jobs")
    await jobs.fold_finished_counts()
    await sweep_metrics(jobs.db, SweepInput())
    return int(missing)
