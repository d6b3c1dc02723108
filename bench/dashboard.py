"""Server time of each dashboard page beside a growing history: `./run bench-dashboard [SIZES]`
(default 0,200000,1000000 finished jobs in one BullMQ queue, ``history``, beside small queues).

The small queues are written through the BullMQ facade (every state, a paused queue, a
flow); the history as the engine writes finished facade jobs, by one INSERT ... SELECT that
counts them as the engine does, topped up to each size in turn, then folded and swept into
the metrics rollup as any running worker does within a minute. Each page is requested 7 times in-process (httpx's ASGI
transport: no network), after one warm-up; the figure is the median time from request to the
last byte, which is the server's work (SQL and rendering). Prints a Markdown table.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
import uuid
from typing import Any

import httpx

import bullmq_compat
from bench.history import top_up_history
from pgjobs import JobQueue
from pgjobs.dashboard import create_app
from pgjobs.devserver import find_or_start_postgres

SIZES = (0, 200_000, 1_000_000)
REQUESTS = 7


async def seed_small_queues(jobs: JobQueue) -> dict[str, Any]:
    """Small BullMQ queues, one paused; a failed job with three attempts; a flow."""
    opts = {"connection": jobs}
    emails = bullmq_compat.Queue("emails", opts)
    for n in range(120):
        await emails.add("welcome", {"to": f"user{n}@example.com"}, {"priority": n % 3})
    await emails.add("digest", {"n": 1}, {"delay": 3_600_000})
    webhooks = bullmq_compat.Queue("webhooks", opts)
    for n in range(30):
        await webhooks.add("order.created", {"order": n})
    await webhooks.pause()

    async def fail(job: Any, token: Any) -> None:
        raise RuntimeError(f"POST https://hooks.example.com/t/{job.data['n']} answered 503")

    failing = bullmq_compat.Queue("image-resize", opts)
    failed = await failing.add("resize", {"n": 4}, {"attempts": 3, "backoff": 1})
    worker = bullmq_compat.Worker("image-resize", fail, opts)
    while await failing.getJobState(failed.id) != "failed":
        await asyncio.sleep(0.05)
    await worker.close()
    flows = bullmq_compat.FlowProducer(opts)
    tree = await flows.add({
        "name": "ship", "queueName": "orders", "data": {},
        "children": [{"name": "charge-card", "queueName": "payments", "data": {"n": 1}},
                     {"name": "reserve", "queueName": "stock", "data": {}}],
    })  # fmt: skip
    for queue in (emails, webhooks, failing):
        await queue.close()
    await flows.close()
    assert tree is not None
    root = await jobs.get(tree["job"].engine_id)
    assert root is not None
    return {"failed": failed.engine_id, "flow": root.flow_id}


async def page_times(client: httpx.AsyncClient, paths: dict[str, str]) -> dict[str, float]:
    times: dict[str, float] = {}
    for label, path in paths.items():
        response = await client.get(path)
        assert response.status_code == 200, (path, response.status_code, response.text[:200])
        samples = []
        for _ in range(REQUESTS):
            started = time.perf_counter()
            response = await client.get(path)
            samples.append((time.perf_counter() - started) * 1000)
        times[label] = statistics.median(samples)
    return times


async def main(sizes: tuple[int, ...]) -> None:
    dsn = find_or_start_postgres()
    schema = f"bench_dashboard_{uuid.uuid4().hex[:8]}"
    jobs = await JobQueue.connect(dsn, schema=schema, registry=bullmq_compat.facade_registry())
    await jobs.migrate()
    try:
        seeded = await seed_small_queues(jobs)
        await jobs.describe_queue("bull:history", label="history", dialect="bullmq")
        paths = {
            "overview": "/?refresh=0",
            "small queue (latest)": "/queues/emails?refresh=0",
            "small queue, prioritized tab": "/queues/emails?state=prioritized&refresh=0",
            "history queue (latest)": "/queues/history?refresh=0",
            "history, completed tab": "/queues/history?state=completed&refresh=0",
            "history, failed tab, page 10": "/queues/history?state=failed&page=10&refresh=0",
            "history, payload filter": "/queues/history?payload=n+%3D+42&refresh=0",
            "failed job": f"/jobs/{seeded['failed']}?refresh=0",
            "flows": "/flows?refresh=0",
            "flow": f"/flows/{seeded['flow']}?refresh=0",
            "schedules": "/schedules?refresh=0",
            "workers": "/workers?refresh=0",
            "metrics (hour)": "/queues/history/metrics?granularity=hour&refresh=0",
        }
        results: dict[int, dict[str, float]] = {}
        transport = httpx.ASGITransport(app=create_app(jobs))
        async with httpx.AsyncClient(transport=transport, base_url="http://dash") as client:
            for size in sizes:
                await top_up_history(jobs, size)
                results[size] = await page_times(client, paths)
        header = " | ".join(f"{size:,} finished" for size in sizes)
        print(f"| page (ms, median of {REQUESTS}) | {header} |")
        print("| --- |" + " ---: |" * len(sizes))
        for label in paths:
            cells = " | ".join(f"{results[size][label]:.1f}" for size in sizes)
            print(f"| {label} | {cells} |")
    finally:
        await jobs.pool.execute(f"DROP SCHEMA {schema} CASCADE")
        await jobs.close()


if __name__ == "__main__":
    chosen = tuple(int(s) for s in sys.argv[1].split(",")) if len(sys.argv) > 1 else SIZES
    asyncio.run(main(chosen))
