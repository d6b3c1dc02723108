"""A seeded database for the dashboard tests: hostile names and payloads, every sub-state, a
flow, two tenants."""

from __future__ import annotations

from typing import Any

import pytest

from pgjobs import Fatal, Flow, JobContext, JobQueue, Registry

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
