"""Every dashboard route, server side: status codes, escaping of hostile data, CSRF, read-only
refusal, tenant scoping."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from pgjobs import JobFilter, JobQueue, Status
from pgjobs.dashboard import create_app


def client_for(jobs: JobQueue, **options: Any) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=create_app(jobs, **options))
    return httpx.AsyncClient(transport=transport, base_url="http://dash")


@pytest.fixture
async def client(jobs: JobQueue) -> AsyncIterator[httpx.AsyncClient]:
    async with client_for(jobs) as c:
        yield c


def csrf_of(page: httpx.Response) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found, "no action form on the page"
    return found.group(1)


async def test_every_page_renders_and_escapes_user_data(
    client: httpx.AsyncClient, seeded: dict[str, int]
) -> None:
    pages = {
        "/": "mail",
        "/queues/mail": "mail",
        "/queues/mail?sub_state=failed&kind=work&name_prefix=%3C": "Queue mail",
        f"/jobs/{seeded['done']}": "log line",
        f"/jobs/{seeded['failed']}": "it broke",
        "/flows": "import",
        f"/flows/{seeded['flow']}": "<svg",
        "/queues/mail/metrics?granularity=hour": "completed",
        "/queues/mail/purge?sub_state=failed": "This deletes",
    }
    for path, expected in pages.items():
        response = await client.get(path)
        assert response.status_code == 200, (path, response.text[:300])
        assert expected in response.text, path
        assert "<script>alert" not in response.text, path  # hostile names arrive escaped
        assert "<img src=x" not in response.text and "<b>badly</b>" not in response.text, path
        assert response.headers["x-frame-options"] == "DENY"
    detail = await client.get(f"/jobs/{seeded['done']}")
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in detail.text
    flow = await client.get(f"/flows/{seeded['flow']}")
    assert flow.text.count('class="node"') == 3 and flow.text.count("<line ") == 2


async def test_bad_requests_get_clear_errors(
    client: httpx.AsyncClient, seeded: dict[str, int]
) -> None:
    assert (await client.get("/jobs/999999999")).status_code == 404
    assert (await client.get("/jobs/abc")).status_code == 404
    assert (await client.get("/flows/999999")).status_code == 404
    bad = await client.get("/queues/mail?sub_state=nonsense")
    assert bad.status_code == 400 and "nonsense" in bad.text
    assert (await client.get("/flows?outcome=weird")).status_code == 400
    assert (await client.get("/queues/mail/metrics?granularity=year")).status_code == 400
    assert (await client.get("/nowhere")).status_code == 404


async def test_actions_need_the_csrf_token(
    client: httpx.AsyncClient, jobs: JobQueue, seeded: dict[str, int]
) -> None:
    failed = seeded["failed"]
    refused = await client.post(f"/jobs/{failed}/retry", data={"csrf": "forged"})
    assert refused.status_code == 403 and "CSRF" in refused.text
    page = await client.get(f"/jobs/{failed}")
    done = await client.post(f"/jobs/{failed}/retry", data={"csrf": csrf_of(page)})
    assert done.status_code == 303 and done.headers["location"].startswith(f"/jobs/{failed}")
    row = await jobs.get(failed)
    assert row is not None and row.status == Status.PENDING


async def test_job_queue_flow_and_purge_actions(
    client: httpx.AsyncClient, jobs: JobQueue, seeded: dict[str, int]
) -> None:
    token = csrf_of(await client.get(f"/jobs/{seeded['waiting']}"))
    assert (
        await client.post(f"/jobs/{seeded['waiting']}/promote", data={"csrf": token})
    ).status_code == 303
    assert (await jobs.get(seeded["waiting"])).sub_state == "ready"  # type: ignore[union-attr]
    assert (
        await client.post(f"/jobs/{seeded['waiting']}/cancel", data={"csrf": token})
    ).status_code == 303
    assert (await jobs.get(seeded["waiting"])).status == Status.CANCELLED  # type: ignore[union-attr]
    assert (await client.post("/queues/mail/pause", data={"csrf": token})).status_code == 303
    assert (await jobs.queue_settings("mail")).paused
    assert "data-paused" in (await client.get("/")).text
    assert (await client.post("/queues/mail/resume", data={"csrf": token})).status_code == 303
    assert not (await jobs.queue_settings("mail")).paused
    requeued = await client.post(f"/flows/{seeded['flow']}/requeue", data={"csrf": token})
    assert requeued.status_code == 303 and "requeued" in requeued.headers["location"]
    confirm = await client.get("/queues/mail/purge?sub_state=completed")
    count = int(re.search(r"<strong>(\d+)</strong>", confirm.text).group(1))  # type: ignore[union-attr]
    before = len(await jobs.list_jobs(JobFilter(queue="mail", sub_state="completed")))
    assert count == before > 0
    purged = await client.post("/queues/mail/purge", data={"csrf": token, "sub_state": "completed"})
    assert purged.status_code == 303
    assert await jobs.list_jobs(JobFilter(queue="mail", sub_state="completed")) == []
    removed = await client.post(f"/jobs/{seeded['failed']}/remove", data={"csrf": token})
    assert removed.status_code == 303 and await jobs.get(seeded["failed"]) is None
    assert (await client.post("/jobs/1/explode", data={"csrf": token})).status_code == 404


async def test_read_only_refuses_every_action(jobs: JobQueue, seeded: dict[str, int]) -> None:
    async with client_for(jobs, read_only=True) as client:
        page = await client.get(f"/jobs/{seeded['failed']}")
        assert page.status_code == 200 and "<form" not in page.text and "read-only" in page.text
        token = page.cookies.get("pgjobs_csrf") or "x"
        for path in (f"/jobs/{seeded['failed']}/retry", "/queues/mail/pause",
                     "/queues/mail/purge", f"/flows/{seeded['flow']}/requeue"):  # fmt: skip
            response = await client.post(path, data={"csrf": token})
            assert response.status_code == 403, path
        assert (await client.get("/queues/mail/purge")).status_code == 403
    assert (await jobs.get(seeded["failed"])).status == Status.DEAD  # type: ignore[union-attr]


async def test_a_tenant_sees_and_touches_only_its_own_jobs(
    jobs: JobQueue, seeded: dict[str, int]
) -> None:
    async with client_for(jobs, tenant_resolver=lambda r: r.headers.get("x-tenant")) as client:
        client.headers["x-tenant"] = "a"
        overview = await client.get("/")
        assert "a-only" in overview.text and "b-only" not in overview.text
        assert "mail" not in overview.text  # jobs without a tenant are not this tenant's
        assert (await client.get(f"/jobs/{seeded['tenant_a']}")).status_code == 200
        assert (await client.get(f"/jobs/{seeded['tenant_b']}")).status_code == 404
        assert (await client.get(f"/jobs/{seeded['done']}")).status_code == 404
        assert "no jobs match" in (await client.get("/queues/b-only")).text
        assert (await client.get(f"/flows/{seeded['flow']}")).status_code == 404
        assert "import" not in (await client.get("/flows")).text
        page = await client.get(f"/jobs/{seeded['tenant_a']}")
        token = csrf_of(page)
        other = await client.post(f"/jobs/{seeded['tenant_b']}/cancel", data={"csrf": token})
        assert other.status_code == 303 and "nothing+to+do" in other.headers["location"]
        assert (await jobs.get(seeded["tenant_b"], tenant="b")).status == Status.PENDING  # type: ignore[union-attr]
        removal = await client.post(f"/jobs/{seeded['tenant_b']}/remove", data={"csrf": token})
        assert removal.status_code == 404
        assert (await client.post("/queues/b-only/pause", data={"csrf": token})).status_code == 403
        assert (await client.post("/queues/b-only/purge", data={"csrf": token})).status_code == 403
        assert (await client.get("/queues/a-only/metrics")).status_code == 403
        del client.headers["x-tenant"]
        assert (await client.get("/")).status_code == 403  # no tenant, no page
    assert await jobs.get(seeded["tenant_b"], tenant="b") is not None


async def test_the_dashboard_command_serves_the_app(pg_dsn: str, jobs: JobQueue) -> None:
    import asyncio
    import socket
    import sys

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "pgjobs", "dashboard", "--dsn", pg_dsn, "--schema", jobs.schema,
        "--port", str(port), "--read-only",
    )  # fmt: skip
    try:
        async with httpx.AsyncClient() as client:
            for _ in range(200):
                try:
                    response = await client.get(f"http://127.0.0.1:{port}/")
                    break
                except httpx.ConnectError:
                    await asyncio.sleep(0.05)
            else:
                raise AssertionError("the dashboard did not start")
        assert response.status_code == 200 and "read-only" in response.text
    finally:
        process.terminate()
        await process.wait()


async def test_a_queue_whose_name_holds_a_slash_or_a_percent_has_its_pages(
    client: httpx.AsyncClient, jobs: JobQueue, registry: Any
) -> None:
    registry.declare("plain", input=dict)
    for queue in ("team/mail", "50%-off", "a%2Fb"):
        await jobs.enqueue("plain", {}, queue=queue, name=f"in {queue}")
    home = await client.get("/")
    for queue in ("team/mail", "50%-off", "a%2Fb"):
        link = re.search(rf'href="(/queues/[^"?]+)">{re.escape(queue)}</a>', home.text)
        assert link, queue
        page = await client.get(link.group(1))
        assert page.status_code == 200 and f"in {queue}" in page.text, queue
        for other in {"team/mail", "50%-off", "a%2Fb"} - {queue}:
            assert f"in {other}" not in page.text
        metrics = await client.get(link.group(1) + "/metrics")
        assert metrics.status_code == 200, queue
        pause = await client.post(link.group(1) + "/pause", data={"csrf": csrf_of(home)})
        assert pause.status_code == 303, queue
        assert (await jobs.queue_settings(queue)).paused
