"""A worker process for the load scenario: no-op jobs keeping the newest 1,000 completed (as a
BullMQ app with ``removeOnComplete: 1000``). Prints ``rss <KiB> <completed>`` every tenth of a second
and, after SIGTERM (a graceful stop), ``final <KiB> <completed>``."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

from pgjobs import JobContext, JobQueue, Keep, Registry


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


async def main(dsn: str, schema: str) -> None:
    registry = Registry()

    @registry.kind("load", input=dict[str, int], keep_completed=Keep(count=1000))
    async def load(ctx: JobContext, data: dict[str, int]) -> None:
        return None

    jobs = await JobQueue.connect(dsn, schema=schema, registry=registry, max_size=12)
    worker = jobs.worker(concurrency=10)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    task = worker.start()
    while not stop.is_set():
        print(f"rss {rss_kib()} {worker.stats.completed}", flush=True)
        try:
            await asyncio.wait_for(stop.wait(), 0.1)
        except TimeoutError:
            pass
    await worker.stop()
    await task
    await jobs.close()
    print(f"final {rss_kib()} {worker.stats.completed}", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
