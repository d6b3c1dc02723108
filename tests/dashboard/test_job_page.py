"""The job page (issue 46): the user's frames before the engine's (folded, counted), a
timeline with durations and one time format, the newest logs first and paged, progress as a
bar, a facade job in BullMQ's words, and no horizontal overflow on a 375 px phone."""

from __future__ import annotations

import dataclasses
import re
from datetime import UTC, datetime, timedelta
from typing import Any

from playwright.async_api import Browser

import bullmq_compat
from pgjobs import Backoff, JobQueue, Registry, Status
from pgjobs.dashboard import formatting, job_page
from tests.dashboard.clients import client_for
from tests.helpers import eventually

STAMP = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"


def charge_card(order: dict[str, Any]) -> None:
    raise ValueError(f"card declined for order <{order['n']}>")


def section(page: str, element_id: str) -> str:
    found = re.search(rf'<(\w+)[^>]* id="{element_id}"[^>]*>(.*?)</\1>', page, re.S)
    assert found is not None, f"no #{element_id} on the page"
    return found.group(2)


def visible(page: str) -> str:
    """The page's text with its tags (and their attributes) dropped."""
    return re.sub(r"<[^>]+>", "", page)


async def test_a_failed_job_shows_the_users_frames_first_and_folds_the_engines(
    jobs: JobQueue, registry: Registry
) -> None:
    @registry.kind("charge", input=dict, queue="pay", max_attempts=2, backoff=Backoff.fixed(0))
    async def charge(ctx: Any, data: dict[str, Any]) -> None:
        charge_card(data)

    job = await jobs.enqueue("charge", {"n": 7})
    await jobs.worker(queues=["pay"], name="night <shift>").run(until_drained=True)
    async with client_for(jobs) as client:
        page = (await client.get(f"/jobs/{job.id}")).text
    error = section(page, "last-error")
    assert "on worker night &lt;shift&gt;" in section(page, "failed-on")  # who ran it
    assert page.count("on worker night &lt;shift&gt;") == 3  # and each attempt
    started = re.search(r'<li class="moment" data-step="started attempt 2">(.*?)</li>', page)
    assert started is not None and "by worker night &lt;shift&gt;" in started.group(1)
    row = await jobs.get(job.id)
    assert row is not None and row.worker == "night <shift>"
    assert "<strong>ValueError</strong>: card declined for order &lt;7&gt;" in error
    assert page.index('id="last-error"') < page.index('id="timeline"')  # the error on top
    user = error.index("test_job_page.py&#34;, line")
    fold = re.search(
        r'<details class="engine-frames"><summary>(\d+) engine frames? \(([^)]*)\)'
        r".*?</summary><pre>(.*?)</pre></details>",
        error,
        re.S,
    )
    assert fold is not None and user < fold.start()
    assert int(fold.group(1)) >= 1 and "pgjobs" in fold.group(2)
    assert "pgjobs/runner.py" in fold.group(3)  # folded, not hidden
    assert "test_job_page.py" not in fold.group(3)
    outside = error[: fold.start()] + error[fold.end() :]
    assert "pgjobs/runner.py" not in outside
    assert "in charge_card" in outside and "Traceback (most recent call last):" in outside
    # each attempt's error as before, newest first, with the same fold
    assert re.findall(r'<tr data-attempt="(\d+)">', page) == ["2", "1"]
    attempts = page[page.index('<table class="attempts">') :]
    assert attempts.count('<details class="engine-frames">') == 2
    assert re.search(rf'<tr data-attempt="2"><td>2</td><td><time datetime="[^"]+">{STAMP}', page)


def test_a_trace_keeps_every_line_and_folds_only_engine_frames() -> None:
    text = (
        "Traceback (most recent call last):\n"
        '  File "/srv/app/.venv/lib/python3.11/site-packages/pgjobs/runner.py", line 28, in run\n'
        "    result = await kind.handler(ctx, typed)\n"
        "             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
        '  File "/srv/app/bullmq_compat/worker.py", line 219, in _handle\n'
        "    result = await self.processor(job, job.token)\n"
        '  File "/srv/app/hooks.py", line 31, in call_webhook\n'
        "    post()\n"
        '  File "/usr/lib/python3.11/asyncio/tasks.py", line 12, in wait_for\n'
        "    return await fut\n"
        "UpstreamError: 503\n"
        "\n"
        "The above exception was the direct cause of the following exception:\n"
        "\n"
        "Traceback (most recent call last):\n"
        '  File "/srv/app/pgjobs_helpers/x.py", line 3, in go\n'
        "    raise Fatal('503') from exc\n"
        "Fatal: 503\n"
    )
    parts = job_page.trace_parts(text)
    first, second = parts[1], parts[3]
    assert isinstance(first, job_page.Stack) and isinstance(second, job_page.Stack)
    assert [f.path for f in first.user] == ["/srv/app/hooks.py"]
    assert [f.engine for f in first.engine] == ["pgjobs", "bullmq_compat", "asyncio"]
    assert first.origins == ["pgjobs", "bullmq_compat", "asyncio"]
    assert second.engine == () and second.user[0].path == "/srv/app/pgjobs_helpers/x.py"
    rebuilt: list[str] = []
    for part in parts:
        if isinstance(part, job_page.Stack):
            rebuilt += sorted((f.text for f in (*part.user, *part.engine)), key=text.index)
        else:
            rebuilt.append(part.text)
    assert "\n".join(rebuilt) == text.rstrip("\n")  # no line lost
    assert job_page.trace_parts("") == [job_page.Text("")]


async def test_the_timeline_has_durations_and_one_time_format(
    jobs: JobQueue, registry: Registry
) -> None:
    @registry.kind("quick", input=dict, queue="quick")
    async def quick(ctx: Any, data: dict[str, Any]) -> dict[str, int]:
        return {"rows": 12_345}

    done = await jobs.enqueue("quick", {})
    await jobs.worker(queues=["quick"]).run(until_drained=True)
    later = await jobs.enqueue("quick", {}, delay=3600)
    async with client_for(jobs) as client:
        page = (await client.get(f"/jobs/{done.id}")).text
        delayed = (await client.get(f"/jobs/{later.id}")).text
    timeline = section(page, "timeline")
    steps = re.findall(r'data-step="([^"]+)"', timeline)
    assert steps == ["added", "waited", "started", "ran", "completed"]
    for step in ("waited", "ran"):
        item = re.search(rf'data-step="{step}">{step} <strong class="duration">([^<]+)<', timeline)
        assert item is not None and re.fullmatch(r"[\d.,]+ (ms|s|min)", item.group(1)), step
    moments = re.findall(rf"<time [^>]+>({STAMP})</time> <span class=\"ago\">\(([^)]+)\)", timeline)
    assert len(moments) == 3 and all(re.fullmatch(r"just now|\d+ s ago", a) for _, a in moments)
    row = await jobs.get(done.id)
    assert row is not None and row.started_at is not None
    text = visible(page)
    assert str(row.created_at) not in text and "+00:00" not in text  # no raw timestamps
    assert not re.search(r"\d\d:\d\d:\d\d\.\d", text)  # no microseconds anywhere shown
    pending = section(delayed, "timeline")
    assert re.findall(r'data-step="([^"]+)"', pending) == ["added", "due in", "due"]
    assert re.search(r"due in <strong class=\"duration\">(59 min 5\d s|1 h)</strong>", pending)
    assert re.search(r"\(in (59 min|1 h)\)", pending)


async def test_the_timeline_of_a_running_and_a_retrying_job(
    jobs: JobQueue, registry: Registry
) -> None:
    @registry.kind("plain", input=dict, queue="plain")
    async def plain(ctx: Any, data: dict[str, Any]) -> None:
        return None

    added = await jobs.enqueue("plain", {})
    row = await jobs.get(added.id)
    assert row is not None
    now = row.created_at + timedelta(minutes=10)
    running = dataclasses.replace(
        row, status=Status.RUNNING, attempts=1, started_at=row.created_at + timedelta(seconds=2),
        heartbeat_at=now - timedelta(seconds=3),
    )  # fmt: skip
    steps = job_page.timeline(running, now)
    assert [s.label for s in steps] == ["added", "waited", "started", "running for"]
    assert formatting.duration(steps[1].seconds or 0) == "2.0 s"
    assert formatting.duration(steps[3].seconds or 0) == "9 min 58 s"
    assert steps[3].ongoing and steps[3].note == "last heartbeat 3 s ago"
    failed_at = row.created_at + timedelta(seconds=5)
    retrying = dataclasses.replace(
        row, attempts=2, started_at=row.created_at + timedelta(seconds=4),
        run_at=now + timedelta(minutes=5),
        last_error={"type": "E", "message": "m", "attempt": 2, "at": failed_at.isoformat()},
    )  # fmt: skip
    labels = [s.label for s in job_page.timeline(retrying, now)]
    assert labels == ["added", "waited", "started attempt 2", "ran", "attempt 2 failed",
                      "due in", "due"]  # fmt: skip
    assert job_page.timeline(retrying, now)[1].note == "including 1 earlier attempt(s)"


def test_times_and_numbers_read_at_a_glance() -> None:
    now = datetime(2026, 12, 6, 15, 30, 26, 123456, tzinfo=UTC)
    assert formatting.stamp(now) == "2026-12-06 15:30:26 UTC"
    assert formatting.relative(now - timedelta(minutes=4, seconds=10), now) == "4 min ago"
    assert formatting.relative(now + timedelta(hours=3), now) == "in 3 h"
    assert formatting.relative(now, now) == "just now"
    assert [formatting.duration(s) for s in (0.34, 2.5, 42, 252, 11_100, 190_000)] == [
        "340 ms", "2.5 s", "42 s", "4 min 12 s", "3 h 5 min", "2 d 4 h"
    ]  # fmt: skip
    assert formatting.number(1234567) == "1,234,567"
    assert formatting.parse_moment("2026-12-06T15:30:26.5+00:00") == datetime(
        2026, 12, 6, 15, 30, 26, 500000, tzinfo=UTC
    )
    assert formatting.parse_moment("yesterday") is None


async def test_logs_newest_first_fifty_a_page_with_totals(
    jobs: JobQueue, registry: Registry
) -> None:
    @registry.kind("chatty", input=dict, queue="chatty")
    async def chatty(ctx: Any, data: dict[str, Any]) -> None:
        return None

    job = await jobs.enqueue("chatty", {}, delay=3600)
    quiet = await jobs.enqueue("chatty", {}, delay=3600)
    for i in range(1, 1_121):
        await jobs.append_log(job.id, f"step {i} <b>")
    async with client_for(jobs) as client:
        first = (await client.get(f"/jobs/{job.id}")).text
        third = (await client.get(f"/jobs/{job.id}?logs_page=23&refresh=30")).text
        beyond = await client.get(f"/jobs/{job.id}?logs_page=40")
        bad = await client.get(f"/jobs/{job.id}?logs_page=0")
        empty = (await client.get(f"/jobs/{quiet.id}")).text
    assert "<h2>Logs (1,120)</h2>" in first
    lines = re.findall(r'<span class="line">step (\d+) &lt;b&gt;</span>', first)
    assert lines == [str(n) for n in range(1120, 1070, -1)]  # the latest 50, newest on top
    assert "lines 1,120\u20131,071 of 1,120 · page 1 of 23" in first
    assert re.search(rf'<span class="n">1,120</span><time datetime="[^"]+">{STAMP}</time>', first)
    assert 'href="?logs_page=2#logs">older' in first and "newer</a>" not in first
    last = re.findall(r'<span class="line">step (\d+) ', third)
    assert last == [str(n) for n in range(20, 0, -1)]
    assert "lines 20\u20131 of 1,120 · page 23 of 23" in third
    assert 'href="?refresh=30&amp;logs_page=22#logs">← newer' in third and "older →" not in third
    assert beyond.status_code == 200
    assert "No lines on page 40: the log has 1,120 lines on 23 pages." in beyond.text
    assert 'href="?logs_page=23#logs">← newer' in beyond.text
    assert bad.status_code == 400 and "logs_page" in bad.text
    assert '<p class="empty" id="no-logs">No logs</p>' in empty and "<h2>Logs (0)</h2>" in empty
    assert 'class="logs"' not in empty and "<pre></pre>" not in empty


async def test_progress_is_a_bar_when_it_is_a_percentage(
    jobs: JobQueue, registry: Registry
) -> None:
    @registry.kind("slow", input=dict, queue="slow")
    async def slow(ctx: Any, data: dict[str, Any]) -> None:
        return None

    shown: dict[str, str] = {}
    for label, value in (("number", 42.5), ("object", {"percentage": 30, "step": "resize"}),
                         ("text", "half way"), ("big", 1500)):  # fmt: skip
        job = await jobs.enqueue("slow", {}, delay=3600)
        assert await jobs.update_progress(job.id, value)
        async with client_for(jobs) as client:
            shown[label] = (await client.get(f"/jobs/{job.id}")).text
    assert '<progress max="100" value="42.5">' in shown["number"]
    assert (
        "<strong>42.5 %</strong>" in shown["number"] and 'id="progress-json"' not in shown["number"]
    )
    assert '<progress max="100" value="30.0">' in shown["object"]
    assert "&#34;step&#34;: &#34;resize&#34;" in section(shown["object"], "progress-json")
    for label in ("text", "big"):
        assert "<progress" not in shown[label] and 'id="progress-json"' in shown[label]


async def test_a_facade_job_reads_in_bullmq_words(jobs: JobQueue) -> None:
    queue = bullmq_compat.Queue("shop", {"connection": jobs})
    waiting = await queue.add(
        "order", {"n": 9}, {"jobId": "order-9", "priority": 3, "delay": 60_000}
    )
    await waiting.updateProgress(75)
    await waiting.log("reserved stock")
    done = await queue.add("receipt", {"n": 10}, {"jobId": "receipt-10"})

    async def process(job: Any, token: Any) -> dict[str, Any]:
        await job.log(f"mailing {job.data['n']}")
        return {"sent": True}

    worker = bullmq_compat.Worker("shop", process, {"connection": jobs})
    await eventually(lambda: _state_is(queue, "receipt-10", "completed"), timeout=30)
    await worker.close()
    async with client_for(jobs) as client:
        page = (await client.get(f"/jobs/{waiting.engine_id}")).text
        finished = (await client.get(f"/jobs/{done.engine_id}")).text
    assert "<h1>Job order-9 " in page and '<span class="badge delayed" id="state">delayed' in page
    summary = section(page, "bullmq")
    assert "job id <strong>order-9</strong>" in summary and "state delayed" in summary
    assert "priority 3" in summary and "attemptsMade 0" in summary
    assert f"pgjobs id {waiting.engine_id}" in page
    engine = section(page, "engine-details")
    assert "engine priority 7" in engine and "<th>engine priority</th><td>7 " in engine
    outside = page.replace(engine, "")
    assert "engine priority" not in outside and "<th>priority</th>" not in outside
    assert "priority 7" not in outside  # only BullMQ's priority outside the fold
    assert 'id="fields"' not in page
    assert "<h2>Data</h2>" in page and "&#34;n&#34;: 9" in section(page, "payload")
    assert "&#34;priority&#34;: 3" in section(page, "bullmq-opts")
    assert '<progress max="100" value="75.0">' in page
    assert "reserved stock" in section(page, "log-lines")
    assert "<h2>Return value</h2>" in finished
    assert "&#34;sent&#34;: true" in section(finished, "output")
    assert "state completed" in section(finished, "bullmq") and "attemptsMade 1" in finished
    assert re.findall(r'data-step="([^"]+)"', section(finished, "timeline")) == [
        "added", "waited", "started", "ran", "completed"
    ]  # fmt: skip
    await queue.close()


async def _state_is(queue: Any, job_id: str, state: str) -> bool:
    return bool(await queue.getJobState(job_id) == state)


# -- in Chromium -------------------------------------------------------------------------------


async def test_the_job_page_fits_a_375_px_phone(
    browser: Browser, dashboard_url: str, jobs: JobQueue, registry: Registry
) -> None:
    long = "x" * 300

    @registry.kind("wide-kind-" + "k" * 60, input=dict, queue="q" * 80, max_attempts=2,
                   backoff=Backoff.fixed(0))  # fmt: skip
    async def wide(ctx: Any, data: dict[str, Any]) -> None:
        await ctx.progress({"percentage": 60, "detail": long})
        await ctx.log(f"GET https://example.com/{long}?page=1")
        charge_card({"n": long})

    job = await jobs.enqueue("wide-kind-" + "k" * 60, {"url": long}, name="n" * 120,
                             job_key="key-" + "k" * 100)  # fmt: skip
    await jobs.worker(queues=["q" * 80]).run(until_drained=True)
    queue = bullmq_compat.Queue("shop", {"connection": jobs})
    facade = await queue.add("order", {"blob": long}, {"jobId": "order-" + "9" * 80})
    page = await browser.new_page(viewport={"width": 375, "height": 800})
    for path in (f"/jobs/{job.id}", f"/jobs/{facade.engine_id}"):
        response = await page.goto(dashboard_url + path)
        assert response is not None and response.status == 200, path
        await page.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
        widths = await page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
        assert widths[0] <= widths[1], (path, widths)
        assert await page.locator("#timeline li").count() >= 2
    await queue.close()
