"""Every dashboard route, server side: status codes, escaping of hostile data, CSRF, read-only
refusal, tenant scoping."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

import bullmq_compat
from pgjobs import JobFilter, JobQueue, Status
from pgjobs.dashboard import app as app_module
from tests.dashboard.clients import client_for, csrf_of
from tests.factories import insert_job


@pytest.fixture
async def client(jobs: JobQueue) -> AsyncIterator[httpx.AsyncClient]:
    async with client_for(jobs) as c:
        yield c


async def test_every_page_renders_and_escapes_user_data(
    client: httpx.AsyncClient, seeded: dict[str, int]
) -> None:
    pages = {
        "/": "mail",
        "/queues/mail": "mail",
        "/queues/mail?sub_state=failed&kind=work&name_prefix=%3C": "<h1>mail</h1>",
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
    # Remove asks first: a bare POST leads to the confirmation page and deletes nothing
    unconfirmed = await client.post(f"/jobs/{seeded['failed']}/remove", data={"csrf": token})
    assert unconfirmed.status_code == 303
    assert unconfirmed.headers["location"].endswith(f"/jobs/{seeded['failed']}/remove")
    assert await jobs.get(seeded["failed"]) is not None
    asked = await client.get(f"/jobs/{seeded['failed']}/remove")
    assert asked.status_code == 200 and "This deletes job" in asked.text
    removed = await client.post(
        f"/jobs/{seeded['failed']}/remove", data={"csrf": token, "confirmed": "1"}
    )
    assert removed.status_code == 303 and await jobs.get(seeded["failed"]) is None
    assert (await client.post("/jobs/1/explode", data={"csrf": token})).status_code == 404


async def test_read_only_refuses_every_action(jobs: JobQueue, seeded: dict[str, int]) -> None:
    async with client_for(jobs, read_only=True) as client:
        page = await client.get(f"/jobs/{seeded['failed']}")
        assert page.status_code == 200 and "read-only" in page.text
        assert 'method="post"' not in page.text  # no action form (the id search is a GET)
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
        assert "No jobs." in (await client.get("/queues/b-only")).text
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
    typed = await client.get("/queues/team/mail")  # the name as a user types it
    assert typed.status_code == 200 and "in team/mail" in typed.text


async def test_a_bad_page_number_is_a_400_naming_it(
    client: httpx.AsyncClient, seeded: dict[str, int]
) -> None:
    for path in ("/queues/mail?page=abc", "/queues/mail?page=-1", "/flows?page=1e9",
                 f"/queues/mail?page={10**30}", "/flows?page=100001"):  # fmt: skip
        response = await client.get(path)
        assert response.status_code == 400, path
        assert "page must be a whole number from 0 to 100000" in response.text, path
    assert (await client.get("/queues/mail?page=100000")).status_code == 200  # empty, not an error


async def test_only_the_apps_own_redirects_show_a_status_banner(
    client: httpx.AsyncClient, seeded: dict[str, int]
) -> None:
    faked = await client.get("/?message=Your+session+expired%2C+log+in+at+evil.example")
    assert faked.status_code == 200 and "evil.example" not in faked.text
    token = csrf_of(await client.get(f"/jobs/{seeded['failed']}"))
    done = await client.post(f"/jobs/{seeded['failed']}/retry", data={"csrf": token})
    shown = await client.get(done.headers["location"].removeprefix("http://dash"))
    assert 'role="status"' in shown.text and f"retry: job {seeded['failed']}" in shown.text
    tampered = done.headers["location"].replace("retry", "removed")
    assert 'role="status"' not in (await client.get(tampered)).text


async def test_the_health_route_answers_for_probes(jobs: JobQueue, pool: Any) -> None:
    async with client_for(jobs) as client:
        healthy = await client.get("/health")
        assert healthy.status_code == 200
        assert healthy.json() == {"status": "ok", "schema": "current", "workers": 0}
        await pool.execute(f"UPDATE {jobs.schema}.schema_definitions SET digest = 'older'")
        stale = await client.get("/health")
        assert stale.status_code == 503 and stale.json()["status"] == "unhealthy"
        assert "pgjobs migrate" in stale.json()["error"]


async def test_the_prometheus_endpoint_exposes_depth_lag_pauses_and_workers(
    jobs: JobQueue, registry: Any
) -> None:
    registry.declare("scrape", input=dict)
    for n in range(3):
        await jobs.enqueue("scrape", {"n": n}, queue='we"ird\\q')
    await jobs.enqueue("scrape", {}, queue="later", delay=3600)
    await jobs.pause("later")
    async with client_for(jobs) as client:
        response = await client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    lines = response.text.splitlines()
    assert "# TYPE pgjobs_jobs gauge" in lines
    assert 'pgjobs_jobs{queue="we\\"ird\\\\q",state="ready"} 3' in lines
    assert 'pgjobs_jobs{queue="later",state="delayed"} 1' in lines
    assert 'pgjobs_jobs{queue="later",state="ready"} 0' in lines
    assert 'pgjobs_queue_paused{queue="later"} 1' in lines
    assert 'pgjobs_queue_paused{queue="we\\"ird\\\\q"} 0' in lines
    assert 'pgjobs_queue_lag_seconds{queue="later"} 0.000' in lines
    [lag] = [line for line in lines if line.startswith('pgjobs_queue_lag_seconds{queue="we')]
    assert float(lag.rsplit(" ", 1)[1]) >= 0
    assert 'pgjobs_workers{queue="later"} 0' in lines
    for line in lines:  # every sample line is "name{labels} number"
        if not line.startswith("#"):
            float(line.rsplit(" ", 1)[1])
    async with client_for(jobs, tenant_resolver=lambda request: "acme") as scoped:
        assert (await scoped.get("/metrics")).status_code == 403


async def test_a_job_page_shows_the_error_of_every_attempt(jobs: JobQueue, registry: Any) -> None:
    from pgjobs import Backoff

    @registry.kind("shaky", input=dict, queue="shaky", max_attempts=3, backoff=Backoff.fixed(0))
    async def shaky(ctx: Any, data: dict) -> None:
        raise ValueError(f"attempt <{ctx.attempts}> broke")

    job = await jobs.enqueue("shaky", {})
    await jobs.worker(queues=["shaky"]).run(until_drained=True)
    async with client_for(jobs) as client:
        page = (await client.get(f"/jobs/{job.id}")).text
    assert "Errors of each attempt" in page
    attempts = re.findall(r'<tr data-attempt="(\d+)">', page)
    assert attempts == ["3", "2", "1"]  # newest first
    for n in (1, 2, 3):
        assert f"ValueError: attempt &lt;{n}&gt; broke" in page


async def test_the_workers_page_lists_heartbeating_workers(jobs: JobQueue, registry: Any) -> None:
    import asyncio

    started = asyncio.Event()
    release = asyncio.Event()

    @registry.kind("hold", input=dict, queue="team/<a>")
    async def hold(ctx: Any, data: dict) -> None:
        started.set()
        await release.wait()

    await jobs.enqueue("hold", {})
    worker = jobs.worker(queues=["team/<a>"], concurrency=3, name="<b>night</b> shift")
    running = asyncio.create_task(worker.run())
    await asyncio.wait_for(started.wait(), 30)
    async with client_for(jobs) as client:
        page = (await client.get("/workers")).text
        release.set()
        await worker.stop()
        await running
        after = (await client.get("/workers")).text
        async with client_for(jobs, tenant_resolver=lambda request: "acme") as scoped:
            assert (await scoped.get("/workers")).status_code == 403
    [row] = re.findall(r'<tr class="worker">.*?</tr>', page, re.S)
    assert "&lt;b&gt;night&lt;/b&gt; shift" in row and "<b>night" not in row
    assert 'href="/queues/team%252F%253Ca%253E"' in row and "<td>3</td>" in row
    assert "no worker is running" in after


async def test_the_schedules_page_shows_runs_and_pauses_resumes_and_removes(
    jobs: JobQueue, registry: Any
) -> None:
    registry.declare("report", input=dict)
    await jobs.upsert_schedule("nightly/<report>", "report", {}, cron="0 3 * * *", queue="r")
    await jobs.upsert_schedule("pulse", "report", {}, every=60)
    async with client_for(jobs) as client:
        page = await client.get("/schedules")
        rows = re.findall(r'<tr class="schedule">.*?</tr>', page.text, re.S)
        assert len(rows) == 2
        nightly = next(r for r in rows if "nightly" in r)
        assert "nightly/&lt;report&gt;" in nightly and "<code>0 3 * * *</code> (UTC)" in nightly
        assert "every 1 min" in next(r for r in rows if "pulse" in r)
        schedule = await jobs.get_schedule("nightly/<report>")
        assert schedule is not None and schedule.next_run_at is not None
        assert schedule.next_run_at.strftime("%Y-%m-%d %H:%M:%S") in nightly
        actions = re.findall(r'action="([^"]*nightly[^"]*)"', nightly)
        assert [a.rsplit("/", 1)[1] for a in actions] == ["run-now", "pause", "remove", "edit"]
        paused = await client.post(actions[1], data={"csrf": csrf_of(page)})
        assert paused.status_code == 303
        after = await client.get("/schedules")
        nightly_after = next(
            r
            for r in re.findall(r'<tr class="schedule">.*?</tr>', after.text, re.S)
            if "nightly" in r
        )
        assert "data-paused" in nightly_after and "/resume" in nightly_after
        assert (await jobs.get_schedule("nightly/<report>")).paused  # type: ignore[union-attr]
        resume = re.search(r'action="([^"]*nightly[^"]*/resume)"', nightly_after)
        assert resume is not None
        resumed = await client.post(resume.group(1), data={"csrf": csrf_of(after)})
        assert resumed.status_code == 303 and "resumed" in resumed.headers["location"]
        assert not (await jobs.get_schedule("nightly/<report>")).paused  # type: ignore[union-attr]
        action = re.search(r'action="([^"]*nightly[^"]*/remove)"', nightly)
        assert action is not None
        removed = await client.post(action.group(1), data={"csrf": csrf_of(page)})
        assert removed.status_code == 303
        assert await jobs.get_schedule("nightly/<report>") is None
        assert await jobs.get_schedule("pulse") is not None
        again = await client.post(action.group(1), data={"csrf": csrf_of(page)})
        assert again.status_code == 404
        forged = await client.post("/schedules/pulse/remove", data={"csrf": "forged"})
        assert forged.status_code == 403 and await jobs.get_schedule("pulse") is not None


async def post_pairs(client: httpx.AsyncClient, url: str, pairs: list[tuple[str, str]]) -> Any:
    """A form POST with repeated fields (several ``id``), as a browser sends a selection."""
    from urllib.parse import urlencode

    headers = {"content-type": "application/x-www-form-urlencoded"}
    return await client.post(url, content=urlencode(pairs), headers=headers)


async def _dead_jobs(jobs: JobQueue, registry: Any, count: int, queue: str = "bulk") -> list[int]:
    from pgjobs import Fatal

    @registry.kind(f"doomed-{queue}", input=dict, queue=queue, max_attempts=1)
    async def doomed(ctx: Any, data: dict) -> None:
        if data.get("fail", True):
            raise Fatal("doomed")

    results = await jobs.enqueue_batch(f"doomed-{queue}", [{} for _ in range(count)])
    await jobs.worker(queues=[queue], concurrency=10).run(until_drained=True)
    return [r.id for r in results]


async def test_bulk_actions_on_a_selection_confirm_the_count_first(
    jobs: JobQueue, registry: Any
) -> None:
    dead = await _dead_jobs(jobs, registry, 5)
    waiting = (await jobs.enqueue("doomed-bulk", {}, delay=3600)).id
    async with client_for(jobs) as client:
        page = await client.get("/queues/bulk")
        token = csrf_of(page)
        assert page.text.count('form="selection"') == 6
        chosen = [("id", str(i)) for i in dead[:3]] + [("id", str(waiting))]
        confirm = await post_pairs(
            client, "/queues/bulk/bulk", [("csrf", token), ("do", "retry"), *chosen]
        )
        assert confirm.status_code == 200
        # the waiting one is not finished: a retry applies to the three failed ones only
        assert "<strong>3</strong> job(s)" in confirm.text and "4 selected" in confirm.text
        assert {r.id for r in await jobs.list_jobs(JobFilter(sub_state="failed"))} == set(dead)
        done = await post_pairs(
            client,
            "/queues/bulk/bulk",
            [("csrf", csrf_of(confirm)), ("do", "retry"), ("confirmed", "1"), *chosen],
        )
        assert done.status_code == 303
        shown = await client.get(done.headers["location"].removeprefix("http://dash"))
        assert "retry: 3 job(s)" in shown.text
        ready = {r.id for r in await jobs.list_jobs(JobFilter(queue="bulk", sub_state="ready"))}
        assert ready == set(dead[:3])
        cancel = await post_pairs(
            client,
            "/queues/bulk/bulk",
            [("csrf", token), ("do", "cancel"), ("confirmed", "1"), ("id", str(waiting))],
        )
        assert cancel.status_code == 303
        row = await jobs.get(waiting)
        assert row is not None and row.status is Status.CANCELLED
        nothing = await client.post("/queues/bulk/bulk", data={"csrf": token, "do": "retry"})
        assert nothing.status_code == 303 and "no+job+selected" in nothing.headers["location"]
        forged = await post_pairs(
            client, "/queues/bulk/bulk",
            [("csrf", "x"), ("do", "remove"), ("confirmed", "1"), ("id", str(dead[4]))],
        )  # fmt: skip
        assert forged.status_code == 403 and await jobs.get(dead[4]) is not None
        unknown = await client.post("/queues/bulk/bulk", data={"csrf": token, "do": "explode"})
        assert unknown.status_code == 400
    async with client_for(jobs, read_only=True) as viewer:
        page = await viewer.get("/queues/bulk")
        assert 'form="selection"' not in page.text
        refused = await viewer.post("/queues/bulk/bulk", data={"do": "remove", "id": dead[4]})
        assert refused.status_code == 403


async def test_bulk_actions_on_everything_matching_the_filter_and_per_tenant(
    jobs: JobQueue, registry: Any
) -> None:
    dead = await _dead_jobs(jobs, registry, 40)
    ours = (await jobs.enqueue("doomed-bulk", {"fail": False}, tenant="acme", delay=60)).id
    async with client_for(jobs) as client:
        token = csrf_of(await client.get("/queues/bulk?sub_state=failed"))
        form = {"csrf": token, "do": "remove", "matching": "1", "sub_state": "failed"}
        confirm = await client.post("/queues/bulk/bulk", data=form)
        assert "<strong>40</strong> job(s)" in confirm.text
        assert "sub_state = <code>failed</code>" in confirm.text
        done = await client.post("/queues/bulk/bulk", data={**form, "confirmed": "1"})
        assert done.status_code == 303
        assert all([await jobs.get(i) is None for i in dead])
        assert await jobs.get(ours, tenant="acme") is not None  # not failed: not matched
    async with client_for(jobs, tenant_resolver=lambda request: "other") as other:
        token = csrf_of(await other.get("/queues/bulk"))
        form = {"csrf": token, "do": "cancel", "matching": "1", "confirmed": "1"}
        assert (await other.post("/queues/bulk/bulk", data=form)).status_code == 303
        row = await jobs.get(ours, tenant="acme")
        assert row is not None and row.status is Status.PENDING  # another tenant's job


async def test_search_by_job_id_and_filter_by_a_payload_path(jobs: JobQueue, registry: Any) -> None:
    registry.declare("order", input=dict, queue="orders")
    first = await jobs.enqueue("order", {"user": {"id": 42}}, job_key="order-7")
    second = await jobs.enqueue("order", {"user": {"id": "42"}}, job_key="shared")
    third = await jobs.enqueue("order", {"user": {"id": 7}}, queue="other", job_key="shared")
    async with client_for(jobs) as client:
        by_id = await client.get(f"/search?id={second.id}")
        assert by_id.status_code == 303 and by_id.headers["location"].endswith(f"/jobs/{second.id}")
        by_key = await client.get("/search?id=order-7")
        assert by_key.headers["location"].endswith(f"/jobs/{first.id}")
        both = await client.get("/search?id=shared")
        assert both.status_code == 200 and both.text.count('<tr class="found">') == 2
        assert f"/jobs/{third.id}" in both.text
        assert (await client.get("/search?id=nothing-like-it")).status_code == 404
        assert (await client.get("/search?id=")).status_code == 400
        numbers = await client.get("/queues/orders?payload=user.id+%3D+42")
        assert f'data-job="{first.id}"' in numbers.text
        assert f'data-job="{second.id}"' not in numbers.text  # "42" is a string, not 42
        strings = await client.get('/queues/orders?payload=user.id+%3D+"42"')
        assert (
            f'data-job="{second.id}"' in strings.text
            and 'value="user.id = &#34;42&#34;"' in strings.text
        )
        bare = await client.get("/queues/orders?payload=user.id")
        assert bare.status_code == 400 and "path = value" in bare.text
        bad = await client.get("/queues/orders?payload=user..id+%3D+1")
        assert bad.status_code == 400 and "payload_equals" in bad.text
    async with client_for(jobs, tenant_resolver=lambda request: "acme") as scoped:
        assert (await scoped.get(f"/search?id={first.id}")).status_code == 404


async def test_a_flow_page_shows_what_blocks_it_and_offers_the_requeue(
    client: httpx.AsyncClient, seeded: dict[str, int]
) -> None:
    # The seeded flow: a completed, b failed under the default (block) policy, c held by b.
    page = (await client.get(f"/flows/{seeded['flow']}")).text
    lines = re.findall(r"<line [^>]*>", page)
    blocked = [line for line in lines if 'data-edge-state="blocked"' in line]
    satisfied = [line for line in lines if 'data-edge-state="satisfied"' in line]
    assert len(blocked) == 1 and 'stroke-width="3"' in blocked[0]
    assert "stroke-dasharray" not in blocked[0]
    assert len(satisfied) == 1 and "stroke-dasharray" in satisfied[0]
    assert "Requeue failed and cancelled nodes" in page  # the flow still runs, yet is stuck
    assert 'id="node-legend"' in page and "waiting_children" in page
    assert re.search(r">#\d+<", page)  # nodes are told apart by id, not only by name


async def test_metrics_charts_have_axes_their_own_colours_and_say_when_empty(
    client: httpx.AsyncClient, seeded: dict[str, int]
) -> None:
    page = (await client.get("/queues/mail/metrics?granularity=hour")).text
    legend = re.search(r'<p class="legend">(.*?)</p>', page, re.S)
    assert legend is not None
    assert re.findall(r'background:(#\w+)">(\w+)</span>', legend.group(1)) == [
        ("#4c9a4c", "completed"), ("#d04848", "failed"), ("#8a8a8a", "cancelled"),
    ]  # fmt: skip
    charts = page.split("<h2>")[1:]
    titles = [re.sub(r"<[^>]+>", "", c.split("</h2>")[0]) for c in charts]
    assert titles == ["completed", "failed", "cancelled"]
    completed, failed, cancelled = charts
    assert 'fill="#4c9a4c"' in completed and 'fill="#d04848"' in failed
    assert 'class="axis"' in completed and "total 2" in completed  # done + the flow's a
    assert "no data in this period" in cancelled and "no data" not in completed


async def test_a_job_list_shows_the_last_error_and_when_a_pending_job_runs(
    client: httpx.AsyncClient, seeded: dict[str, int]
) -> None:
    page = (await client.get("/queues/mail")).text
    failed_row = re.search(rf'<tr data-job="{seeded["failed"]}">.*?</tr>', page, re.S)
    assert failed_row and "Fatal: it broke &lt;b&gt;badly&lt;/b&gt;" in failed_row.group(0)
    waiting_row = re.search(rf'<tr data-job="{seeded["waiting"]}">.*?</tr>', page, re.S)
    assert waiting_row and re.search(
        r'title="\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC">due in (59 min|1 h)</span>',
        waiting_row.group(0),
    )


async def test_retry_all_failed_requeues_every_dead_job_of_the_queue(
    client: httpx.AsyncClient, jobs: JobQueue, seeded: dict[str, int]
) -> None:
    page = await client.get("/queues/mail")
    dead = await jobs.list_jobs(JobFilter(queue="mail", status="dead"))
    assert dead  # the seeded failure and the flow's failed node
    assert f"Retry all failed… ({len(dead)})" in page.text  # the button leads to a confirmation
    form = {"csrf": csrf_of(page), "matching": "1", "state": "failed", "do": "retry"}
    confirm = await client.post("/queues/mail/bulk", data=form)
    assert f"<strong>{len(dead)}</strong> job(s)" in confirm.text
    done = await client.post("/queues/mail/retry-failed", data={"csrf": csrf_of(page)})
    assert done.status_code == 303 and f"requeued+{len(dead)}+failed" in done.headers["location"]
    assert await jobs.list_jobs(JobFilter(queue="mail", status="dead")) == []
    for job in dead:
        row = await jobs.get(job.id)
        assert row is not None and row.status is Status.PENDING


async def test_pages_refresh_themselves_when_asked(
    client: httpx.AsyncClient, seeded: dict[str, int]
) -> None:
    still = await client.get("/queues/mail?sub_state=failed&refresh=0")
    assert 'http-equiv="refresh"' not in still.text and '<body data-refresh="">' in still.text
    assert 'href="?sub_state=failed&amp;refresh=30"' in still.text  # keeps the page's filters
    assert 'href="?sub_state=failed"' in still.text  # the default period: 5 s
    # Live by default: with scripts the page updates in place (static/live.js, the browser
    # test checks it); without them it reloads.
    live = await client.get("/queues/mail?sub_state=failed")
    assert '<body data-refresh="5">' in live.text and "/static/live.js" in live.text
    assert '<noscript><meta http-equiv="refresh" content="5"></noscript>' in live.text
    slow = await client.get("/?refresh=30")
    assert '<noscript><meta http-equiv="refresh" content="30"></noscript>' in slow.text
    assert '<body data-refresh="5">' in (await client.get("/?refresh=1")).text  # not a choice
    confirm = await client.get("/queues/mail/purge?sub_state=failed")
    assert 'http-equiv="refresh"' not in confirm.text  # a confirmation stays as it is
    script = await client.get("/static/live.js")
    assert script.status_code == 200 and "visibilitychange" in script.text


async def test_a_facade_job_is_shown_in_bullmq_words(jobs: JobQueue) -> None:
    queue = bullmq_compat.Queue("shop", {"connection": jobs})
    job = await queue.add("order", {"n": 1}, {"jobId": "order-7", "priority": 3, "delay": 60_000})
    plain = await queue.add("note", {"n": 2})
    async with client_for(jobs) as client:
        page = (await client.get(f"/jobs/{job.engine_id}")).text
        bullmq_row = re.search(r'<tr id="bullmq">.*?</tr>', page, re.S)
        assert bullmq_row is not None
        assert "job id <strong>order-7</strong>" in bullmq_row.group(0)
        assert "state delayed" in bullmq_row.group(0) and "priority 3" in bullmq_row.group(0)
        assert "&#34;jobId&#34;: &#34;order-7&#34;" in page  # its opts, escaped
        waiting = await client.get("/queues/bull:shop?sub_state=waiting")
        assert waiting.status_code == 200 and f'data-job="{plain.engine_id}"' in waiting.text
        native = await client.get("/queues/mail?sub_state=waiting-children")
        assert native.status_code == 200
        listed = (await client.get("/queues/bull:shop")).text
        assert 'id="bullmq-view"' in listed and "<th>job id</th>" in listed
        rows = dict(re.findall(r'<tr data-job="(\d+)">(.*?)</tr>', listed, re.S))
        custom, automatic = rows[str(job.engine_id)], rows[str(plain.engine_id)]
        assert f'title="pgjobs id {job.engine_id}">order-7</a>' in custom
        assert 'delayed">delayed</span></td><td class="num">3</td>' in custom  # BullMQ's 3
        assert f">{plain.id}</a>" in automatic
        assert 'ready">waiting</span></td><td class="num">0</td>' in automatic
        tabs = re.findall(r'data-tab="([^"]+)"', listed)
        assert tabs == ["latest", "active", "waiting", "prioritized", "delayed",
                        "waiting-children", "completed", "failed"]  # fmt: skip
        engine_words = (await client.get("/queues/mail")).text
        assert 'id="bullmq-view"' not in engine_words
    await queue.close()


async def test_a_flow_held_by_a_failed_job_reads_blocked_with_its_way_out(
    client: httpx.AsyncClient, jobs: JobQueue, seeded: dict[str, int]
) -> None:
    """The seeded flow: b failed, so c waits for ever, and nothing else can move."""
    listing = (await client.get("/flows")).text
    assert 'class="badge outcome-blocked"' in listing
    page = (await client.get(f"/flows/{seeded['flow']}")).text
    assert 'id="blocked"' in page and ">blocked</span>" in page
    assert "Requeue failed and cancelled nodes" in page
    assert re.search(r'class="sub">mail · waiting children</text>', page)
    token = csrf_of(await client.get(f"/flows/{seeded['flow']}"))
    await client.post(f"/flows/{seeded['flow']}/requeue", data={"csrf": token})
    after = (await client.get(f"/flows/{seeded['flow']}")).text
    assert 'id="blocked"' not in after and ">running</span>" in after  # b waits to run again


async def test_a_payload_filter_reads_a_bounded_window_of_history_and_says_so(
    client: httpx.AsyncClient, jobs: JobQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every job in flight, and the newest PAYLOAD_SCAN finished jobs of each state."""
    monkeypatch.setattr(app_module, "PAYLOAD_SCAN", 3)
    schema = jobs.db.schema
    start = datetime(2026, 1, 1, tzinfo=UTC)
    for n in range(8):  # n = 0 finished first
        await insert_job(jobs.pool, schema, queue="hist", status="completed",
                         finished_at=start + timedelta(minutes=n), payload=f'{{"n": {n}}}')  # fmt: skip
    waiting = await insert_job(jobs.pool, schema, queue="hist", payload='{"n": 0}')
    old = await client.get("/queues/hist?payload=n+%3D+0")
    assert 'id="history-window"' in old.text and "2026-01-01 00:05:00 UTC" in old.text
    assert re.findall(r'<tr data-job="(\d+)">', old.text) == [str(waiting)]  # not the old one
    recent = await client.get("/queues/hist?payload=n+%3D+6&state=completed")
    assert len(re.findall(r"<tr data-job=", recent.text)) == 1
    unbounded = await client.get("/queues/hist?state=completed")
    assert 'id="history-window"' not in unbounded.text
    assert len(re.findall(r"<tr data-job=", unbounded.text)) == 8


async def test_a_queue_page_shows_its_throughput_of_the_last_hour(
    jobs: JobQueue, registry: Any
) -> None:
    @registry.kind("tick", input=dict, queue="tp", max_attempts=1)
    async def tick(ctx: Any, data: dict[str, Any]) -> None:
        if data.get("fail"):
            raise RuntimeError("no")

    for n in range(3):
        await jobs.enqueue("tick", {"n": n})
    await jobs.enqueue("tick", {"fail": True})
    await jobs.worker(queues=["tp"]).run(until_drained=True)
    async with client_for(jobs) as client:
        page = (await client.get("/queues/tp")).text
    panel = re.search(r'<details class="throughput" id="throughput" open>(.*?)</details>', page,
                      re.S)  # fmt: skip
    assert panel is not None
    text = re.sub(r"<[^>]+>", "", panel.group(1))
    assert "3 completed, 1 failed in the last hour" in text
    buckets = await jobs.queue_metrics("tp", "minute", datetime.now(UTC) - timedelta(hours=1))
    assert f"{max(b.completed for b in buckets)} peak / min" in text and "59 min ago" in text
    assert panel.group(1).count("<polyline") == 2


async def test_an_engine_schedule_is_re_timed_from_the_schedules_page(
    jobs: JobQueue, registry: Any
) -> None:
    registry.declare("report", input=dict)
    await jobs.upsert_schedule("nightly", "report", {}, cron="0 3 * * *")
    queue = bullmq_compat.Queue("mail", {"connection": jobs})
    await queue.upsertJobScheduler("digest", {"every": 60_000}, {"name": "d"})
    async with client_for(jobs) as client:
        page = await client.get("/schedules")
        rows = re.findall(r'<tr class="schedule">.*?</tr>', page.text, re.S)
        nightly = next(r for r in rows if "nightly" in r)
        digest = next(r for r in rows if "digest" in r)
        assert 'action="/schedules/nightly/edit"' in nightly and 'value="0 3 * * *"' in nightly
        assert '/edit"' in digest and "> ms" in digest
        done = await client.post(
            "/schedules/nightly/edit",
            data={
                "csrf": csrf_of(page),
                "every": "",
                "cron": "30 4 * * *",
                "timezone": "Asia/Tokyo",
            },
        )
        assert done.status_code == 303 and "re-timed" in done.headers["location"]
        edited = await jobs.get_schedule("nightly")
        assert edited is not None and (edited.cron, edited.timezone) == ("30 4 * * *", "Asia/Tokyo")
        bad = await client.post(
            "/schedules/nightly/edit",
            data={"csrf": csrf_of(page), "every": "10", "cron": "30 4 * * *"},
        )
        assert bad.status_code == 400 and "exactly one of cron and every" in bad.text
        worse = await client.post(
            "/schedules/nightly/edit", data={"csrf": csrf_of(page), "every": "often"}
        )
        assert worse.status_code == 400 and "every: seconds" in worse.text
    await queue.close()
