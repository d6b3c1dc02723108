"""For the dashboard tests: a seeded database (hostile names and payloads, every sub-state, a
flow, two tenants), the dashboard served on a local port, and Debian's Chromium."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
import uvicorn
from playwright.async_api import Browser, async_playwright

from pgjobs import Fatal, Flow, JobContext, JobQueue, Registry
from pgjobs.dashboard import create_app

HOSTILE = "<script>alert('x')</script>"


@pytest.fixture
async def seeded(jobs: JobQueue, registry: Registry) -> dict[str, int]:
    @registry.kind("work", input=Any, queue="mail", max_attempts=1)
    async def work(ctx: JobContext, data: Any) -> Any:
        if data.get("fail"):
            raise Fatal("it broke <b>badly</b>")
        await ctx.log(f"log line {HOSTILE}")
        return {"ok": True}

    ids: dict[str, int] = {}
    ids["done"] = (await jobs.enqueue("work", {"n": 1}, name=HOSTILE)).id
    ids["failed"] = (
        await jobs.enqueue("work", {"fail": True, "html": "<img src=x onerror=alert(1)>"})
    ).id
    flow = Flow("import <42>")
    flow.add("a", "work", {"n": 2})
    flow.add("b", "work", {"fail": True})
    flow.add("c", "work", {"n": 3})
    flow.edge("a", "c")
    flow.edge("b", "c")
    submitted = await jobs.submit_flow(flow)
    ids["flow"] = submitted.flow_id
    await jobs.worker(queues=["mail"], concurrency=1).run(until_drained=True)
    ids["waiting"] = (await jobs.enqueue("work", {"n": 4}, delay=3600)).id
    ids["tenant_a"] = (await jobs.enqueue("work", {"n": 5}, queue="a-only", tenant="a")).id
    ids["tenant_b"] = (await jobs.enqueue("work", {"n": 6}, queue="b-only", tenant="b")).id
    return ids


CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    """Debian's Chromium, headless, driven by Playwright (no browser is downloaded)."""
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(
            "the browser tests need Debian's Chromium at /usr/bin/chromium: apt-get install "
            "chromium (./run test installs it when run as root)",
            pytrace=False,
        )
    async with async_playwright() as p:
        instance = await p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                           args=["--no-sandbox"])  # fmt: skip
        yield instance
        await instance.close()


@pytest.fixture
async def dashboard_url(jobs: JobQueue) -> AsyncIterator[str]:
    """The dashboard on ``jobs``, served on a free local port."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = uvicorn.Config(create_app(jobs), host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    await task
