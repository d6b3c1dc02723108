"""The dashboard in a real headless Chromium (Debian's /usr/bin/chromium driven by Playwright;
no browser is downloaded): every page loads on a seeded database, a retry and a pause are
clicked, and the pages show their effect."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser

from pgjobs import Fatal, Flow, JobFilter, JobQueue, SubState
from tests.helpers import eventually


@pytest.fixture
async def base_url(dashboard_url: str, seeded: dict[str, int]) -> str:
    return dashboard_url


async def test_pages_load_and_retry_and_pause_take_effect(
    browser: Browser, base_url: str, jobs: JobQueue, seeded: dict[str, int], tmp_path: Path
) -> None:
    page = await browser.new_page(viewport={"width": 1280, "height": 800})
    for path in ("/", "/queues/mail", f"/jobs/{seeded['done']}", "/flows",
                 f"/flows/{seeded['flow']}", "/queues/mail/metrics"):  # fmt: skip
        response = await page.goto(base_url + path)
        assert response is not None and response.status == 200, path
    # hostile names are shown as text, never run
    await page.goto(f"{base_url}/jobs/{seeded['done']}")
    assert "<script>" in (await page.locator("h1 + p").inner_text())
    # retry a failed job from its page
    await page.goto(f"{base_url}/jobs/{seeded['failed']}")
    assert await page.locator("#state").inner_text() == "failed"
    await page.get_by_role("button", name="Retry").click()
    await page.wait_for_url("**/jobs/*?message=*")
    assert await page.locator("#state").inner_text() == "ready"
    assert "retry: job" in await page.get_by_role("status").inner_text()
    # pause a queue from the overview
    await page.goto(base_url + "/")
    row = page.locator('tr[data-queue="mail"]')
    await row.get_by_role("button", name="Pause").click()
    await page.wait_for_url("**/?message=*")
    assert await page.locator('tr[data-queue="mail"] [data-paused]').count() == 1
    assert (await jobs.queue_settings("mail")).paused
    shots = tmp_path  # the docs' screenshots: ./run screenshots
    await page.screenshot(path=str(shots / "dashboard-queues.png"))
    await page.goto(f"{base_url}/flows/{seeded['flow']}")
    await page.screenshot(path=str(shots / "dashboard-flow.png"))
    assert (shots / "dashboard-flow.png").stat().st_size > 0


async def test_a_thousand_node_flow_renders_and_links_every_node(
    browser: Browser, base_url: str, jobs: JobQueue
) -> None:
    flow = Flow("wide")
    flow.add("root", "work", {"n": 0})
    for i in range(999):
        flow.add(f"leaf{i}", "work", {"n": i})
        flow.edge(f"leaf{i}", "root")
    submitted = await jobs.submit_flow(flow)
    page = await browser.new_page()
    response = await page.goto(f"{base_url}/flows/{submitted.flow_id}")
    assert response is not None and response.status == 200
    assert await page.locator("#dag g.node").count() == 1000
    assert await page.locator("#dag line").count() == 999
    # wrapped into columns: the drawing is wider than tall enough to scroll, not 40,000 px
    box = await page.locator("#dag").bounding_box()
    assert box is not None and box["height"] < 2000
    await page.locator("#dag a").first.click()  # the job beside the graph, then its page
    await page.wait_for_url("**/flows/*?node=*")
    await page.locator("#panel").get_by_text("Open this job").click()
    await page.wait_for_url("**/jobs/*")


async def until(page: Any, expression: str, timeout: float = 30) -> None:
    """Until ``expression`` is true in the page. (Playwright's wait_for_function evaluates
    strings inside the page, which the dashboard's CSP forbids; evaluate does not.)"""
    await eventually(lambda: page.evaluate(expression), timeout=timeout, interval=0.1)


async def test_a_live_page_updates_in_place_and_pauses_while_hidden(
    browser: Browser, base_url: str, jobs: JobQueue
) -> None:
    page = await browser.new_page()
    await page.goto(f"{base_url}/queues/mail?refresh=5")
    await page.evaluate("window.notReloaded = true")
    await jobs.enqueue("work", {"n": 7}, name="arrived-while-watching")
    await until(page, "document.querySelector('main').innerText.includes('arrived-while-watching')")
    assert await page.evaluate("window.notReloaded") is True  # swapped in place, no reload
    assert await page.evaluate("window.pgjobsLive.swaps") >= 1
    assert "live, every 5 s" in await page.locator("#live-state").inner_text()
    # the tab goes to the background: the pending poll is cancelled, nothing is fetched
    await page.evaluate(
        """() => {
            Object.defineProperty(document, 'hidden', {get: () => true, configurable: true});
            document.dispatchEvent(new Event('visibilitychange'));
        }"""
    )
    assert await page.evaluate("window.pgjobsLive.paused") is True
    assert await page.evaluate("window.pgjobsLive.scheduled()") is False
    assert "paused while the tab is hidden" in await page.locator("#live-state").inner_text()
    polls = await page.evaluate("window.pgjobsLive.polls")
    # shown again: it looks at once, without waiting for a period
    await page.evaluate(
        """() => {
            Object.defineProperty(document, 'hidden', {get: () => false, configurable: true});
            document.dispatchEvent(new Event('visibilitychange'));
        }"""
    )
    await until(page, f"window.pgjobsLive.polls > {polls}", timeout=5)
    # a page where jobs are being selected is not swapped under the user
    await page.locator('input[form="selection"]').first.check()
    held = await page.evaluate("window.pgjobsLive.held")
    await until(page, f"window.pgjobsLive.held > {held}")
    assert await page.locator('input[form="selection"]:checked').count() == 1


async def test_a_bulk_retry_of_a_thousand_failed_jobs_confirms_the_count(
    browser: Browser, base_url: str, jobs: JobQueue, registry: Any
) -> None:
    @registry.kind("mass", input=dict, queue="mass", max_attempts=1)
    async def mass(ctx: Any, data: dict) -> None:
        raise Fatal("down")

    await jobs.enqueue_batch("mass", [{"n": n} for n in range(1000)])
    await jobs.worker(queues=["mass"], concurrency=20).run(until_drained=True)
    page = await browser.new_page()
    await page.goto(f"{base_url}/queues/mass?sub_state=failed")
    await page.locator("#matching").get_by_role("button", name="Retry all…").click()
    await page.wait_for_url("**/queues/mass/bulk")
    assert await page.locator("#bulk-count strong").inner_text() == "1,000"
    await page.locator("#bulk-confirm").click()
    await page.wait_for_url("**/queues/mass?*message=*")  # back to the view it came from
    assert "retry: 1000 job(s)" in await page.get_by_role("status").inner_text()
    counts = await jobs.substate_counts(JobFilter(queue="mass"))
    assert counts[SubState.READY] == 1000 and counts[SubState.FAILED] == 0


async def test_search_by_id_payload_filter_and_the_fleet_pages(
    browser: Browser, base_url: str, jobs: JobQueue, seeded: dict[str, int], tmp_path: Path
) -> None:
    wanted = await jobs.enqueue("work", {"user": {"id": 42}}, job_key="order-42")
    await jobs.enqueue("work", {"user": {"id": 7}})
    await jobs.upsert_schedule("nightly", "work", {"n": 1}, cron="0 3 * * *", queue="mail")
    page = await browser.new_page(viewport={"width": 1280, "height": 800})
    await page.goto(base_url + "/")
    await page.get_by_role("searchbox", name="job id").fill("order-42")
    await page.get_by_role("searchbox", name="job id").press("Enter")
    await page.wait_for_url(f"**/jobs/{wanted.id}")
    await page.goto(f"{base_url}/queues/mail")
    await page.get_by_label("payload").fill("user.id = 42")
    await page.get_by_role("button", name="Filter").click()
    await page.wait_for_url("**/queues/mail?*payload=*")
    assert await page.locator("tr[data-job]").count() == 1
    assert await page.locator(f'tr[data-job="{wanted.id}"]').count() == 1
    await page.goto(base_url + "/schedules")
    row = page.locator("tr.schedule")
    await row.get_by_role("button", name="Pause").click()
    await page.wait_for_url("**/schedules?message=*")
    assert await page.locator("tr.schedule [data-paused]").count() == 1
    schedule = await jobs.get_schedule("nightly")
    assert schedule is not None and schedule.paused
    worker = jobs.worker(queues=["mail"], name="browser-test-worker")
    running = asyncio.create_task(worker.run())
    await eventually(lambda: jobs.list_workers("mail"))
    await page.goto(base_url + "/workers")
    assert "browser-test-worker" in await page.locator("tr.worker").inner_text()
    shots = tmp_path  # the docs' screenshots: ./run screenshots
    await page.screenshot(path=str(shots / "dashboard-workers.png"))
    await worker.stop()
    await running


async def test_a_facade_queue_in_bullmq_words_and_each_attempts_error(
    browser: Browser, base_url: str, jobs: JobQueue
) -> None:
    import bullmq_compat

    queue = bullmq_compat.Queue("shop", {"connection": jobs})
    added = await queue.add("charge", {"order": 7}, {"jobId": "charge-7", "attempts": 2})

    async def process(job: Any, token: Any) -> None:
        raise ValueError(f"card declined, try {job.attemptsMade + 1}")

    worker = bullmq_compat.Worker("shop", process, {"connection": jobs})

    async def failed() -> bool:
        return await queue.getJobState("charge-7") == "failed"

    await eventually(failed, timeout=30)
    await worker.close()
    page = await browser.new_page()
    await page.goto(f"{base_url}/queues/bull:shop")
    row = page.locator(f'tr[data-job="{added.engine_id}"]')
    assert "charge-7" in await row.inner_text() and "failed" in await row.inner_text()
    await row.get_by_role("link", name="charge-7").click()
    await page.wait_for_url(f"**/jobs/{added.engine_id}")
    attempts = page.locator("table.attempts tr[data-attempt]")
    assert await attempts.count() == 2
    assert "try 2" in await attempts.nth(0).inner_text()  # newest first
    assert "try 1" in await attempts.nth(1).inner_text()
    await queue.close()


async def test_the_sidebar_filters_its_queues_as_one_types_and_hides_on_narrow_screens(
    browser: Browser, base_url: str
) -> None:
    page = await browser.new_page(viewport={"width": 1400, "height": 800})
    await page.goto(base_url + "/?refresh=0")
    sidebar = page.locator("#sidebar")
    assert await sidebar.is_visible()
    every = await sidebar.locator("li").count()
    assert every >= 2
    await page.locator("#sidebar-filter").fill("mai")
    shown = sidebar.locator("li:not([hidden])")
    assert await shown.count() == 1 and "mail" in (await shown.inner_text())
    await page.set_viewport_size({"width": 800, "height": 800})
    assert not await sidebar.is_visible()
