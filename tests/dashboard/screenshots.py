"""The dashboard's screenshots in docs/, taken in Chromium from the fixture dataset
(tests/dashboard/dataset.py): `./run screenshots`. Needs PostgreSQL (found or started as the
test suite does) and Debian's Chromium."""

from __future__ import annotations

import asyncio
import socket
import uuid
from pathlib import Path

import uvicorn
from playwright.async_api import async_playwright

import bullmq_compat
from pgjobs import JobQueue
from pgjobs.dashboard import create_app
from pgjobs.devserver import find_or_start_postgres
from tests.dashboard.conftest import CHROMIUM
from tests.dashboard.dataset import write

DOCS = Path(__file__).resolve().parents[2] / "docs"


async def main() -> None:
    dsn = find_or_start_postgres()
    schema = f"screenshots_{uuid.uuid4().hex[:8]}"
    jobs = await JobQueue.connect(dsn, schema=schema, registry=bullmq_compat.facade_registry())
    await jobs.migrate()
    data = await write(jobs)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(create_app(jobs), host="127.0.0.1", port=port, log_level="warning")
    )
    serving = asyncio.create_task(server.serve())
    base = f"http://127.0.0.1:{port}"
    shots = {
        "dashboard-queues.png": ("/", 1400, "light"),
        "dashboard-queue-failed.png": ("/queues/webhooks?state=failed", 1400, "light"),
        "dashboard-queue-active.png": ("/queues/image-resize?state=active", 1400, "light"),
        "dashboard-job-failed.png": (f"/jobs/{data.failed_job}", 1400, "light"),
        "dashboard-flow.png": (
            f"/flows/{data.blocked_flow}?node={data.blocked_root}",
            1400,
            "light",
        ),
        "dashboard-schedules.png": ("/schedules", 1400, "light"),
        "dashboard-queue-dark.png": ("/queues/emails", 1400, "dark"),
        "dashboard-queues-phone.png": ("/", 375, "light"),
    }
    try:
        while not server.started:
            await asyncio.sleep(0.01)
        async with async_playwright() as p:
            browser = await p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                              args=["--no-sandbox"])  # fmt: skip
            for name, (path, width, scheme) in shots.items():
                page = await browser.new_page(
                    viewport={"width": width, "height": 900}, color_scheme=scheme
                )
                joiner = "&" if "?" in path else "?"
                await page.goto(f"{base}{path}{joiner}refresh=0")
                await page.screenshot(path=str(DOCS / name))
                await page.close()
                print(f"docs/{name}: {path} at {width} px, {scheme}")
            await browser.close()
    finally:
        server.should_exit = True
        await serving
        await data.close()
        await jobs.pool.execute(f"DROP SCHEMA {schema} CASCADE")
        await jobs.close()


if __name__ == "__main__":
    asyncio.run(main())
