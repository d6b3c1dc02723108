"""The dashboard's layout in Chromium: no page overflows sideways from a phone's width to a
desktop's, and in dark mode the state colours stay apart."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.async_api import Browser

import bullmq_compat
from pgjobs import JobQueue

WIDTHS = (375, 800, 1100, 1400)
LONG = "reports-" + "quarterly-" * 6


@pytest.fixture
async def pages(jobs: JobQueue, seeded: dict[str, int]) -> list[str]:
    """A page of each kind, on the seeded data plus a BullMQ queue with a long name and a
    long job name, failed and waiting jobs."""
    queue = bullmq_compat.Queue(LONG, {"connection": jobs})
    job = await queue.add("summarise-" * 8, {"text": "x" * 300}, {"priority": 3})
    await queue.add("waiting", {"n": 1})
    await queue.close()
    return [
        "/", f"/queues/{LONG}", f"/queues/{LONG}?state=prioritized", "/queues/mail",
        "/queues/mail?state=failed", f"/jobs/{seeded['failed']}", f"/jobs/{job.engine_id}",
        "/flows", f"/flows/{seeded['flow']}", "/schedules", "/workers", "/queues/mail/metrics",
    ]  # fmt: skip


async def test_no_page_overflows_sideways_at_common_widths(
    browser: Browser, dashboard_url: str, pages: list[str]
) -> None:
    overflowing: list[tuple[int, str, Any]] = []
    for width in WIDTHS:
        page = await browser.new_page(viewport={"width": width, "height": 900})
        for path in pages:
            joiner = "&" if "?" in path else "?"
            response = await page.goto(f"{dashboard_url}{path}{joiner}refresh=0")
            assert response is not None and response.status == 200, path
            sizes = await page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
            if sizes[0] > sizes[1]:
                overflowing.append((width, path, sizes))
        await page.close()
    assert overflowing == [], overflowing


async def test_state_colours_differ_in_dark_mode(
    browser: Browser, dashboard_url: str, pages: list[str]
) -> None:
    for scheme in ("light", "dark"):
        page = await browser.new_page(color_scheme=scheme)
        await page.goto(f"{dashboard_url}/queues/mail?refresh=0")
        colours = await page.evaluate(
            """["ready", "delayed", "active", "completed", "failed", "cancelled",
                "waiting_children", "retry"].map(function (state) {
                var badge = document.createElement("span");
                badge.className = "badge " + state;
                document.body.appendChild(badge);
                return getComputedStyle(badge).backgroundColor;
            })"""
        )
        assert len(set(colours)) == len(colours), (scheme, colours)
        background = await page.evaluate("getComputedStyle(document.body).backgroundColor")
        assert (background == "rgb(255, 255, 255)") == (scheme == "light")
        await page.close()
