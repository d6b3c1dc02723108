"""A BullMQ queue in the dashboard, decided by the queue (the facade describes it), not by the
jobs on a page: its BullMQ name in titles and URLs, BullMQ's states with their counts on the
overview and as the queue page's tabs, numbered pages with the total, actions that come back
to the queue with the view kept."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

import bullmq_compat
from bullmq_compat.mapping import NO_PRIORITY
from pgjobs import InvalidOption, JobFilter, JobQueue, SubState
from pgjobs.dashboard import views
from tests.dashboard.clients import client_for, csrf_of
from tests.factories import insert_job


@pytest.fixture
async def shop(jobs: JobQueue) -> AsyncIterator[dict[str, Any]]:
    """BullMQ queue ``shop``: 3 waiting, 2 prioritized, 1 delayed; nothing else."""
    queue = bullmq_compat.Queue("shop", {"connection": jobs})
    added: dict[str, Any] = {"queue": queue}
    added["waiting"] = [await queue.add("order", {"n": n}) for n in range(3)]
    added["prioritized"] = [await queue.add("vip", {"n": n}, {"priority": 2}) for n in range(2)]
    added["delayed"] = [await queue.add("later", {"n": 9}, {"delay": 600_000})]
    yield added
    await queue.close()


@pytest.fixture
async def client(jobs: JobQueue) -> AsyncIterator[httpx.AsyncClient]:
    async with client_for(jobs) as c:
        yield c


def row_of(page: str, queue: str) -> str:
    found = re.search(rf'<tr data-queue="{re.escape(queue)}"[^>]*>(.*?)</tr>', page, re.S)
    assert found, f"no row for {queue}"
    return found.group(1)


def tab_counts(page: str) -> dict[str, str]:
    """The tabs of a queue page with the count each shows ('' for none)."""
    tabs = re.findall(r'data-tab="([^"]+)".*?</span>([^<]*)(?:<span class="count">([^<]+))?', page)
    return {key: count for key, _, count in tabs}


def test_the_dashboard_reads_bullmq_priorities_as_the_facade_writes_them() -> None:
    assert views.BULLMQ_NO_PRIORITY == NO_PRIORITY
    for sub_state in SubState:
        for priority in (NO_PRIORITY, NO_PRIORITY - 1, NO_PRIORITY - 7, -5):
            assert views.bullmq_state(sub_state, priority) == bullmq_compat.bullmq_state(
                sub_state, priority
            )


async def test_the_facade_describes_its_queue_once(jobs: JobQueue) -> None:
    queue = bullmq_compat.Queue("described", {"connection": jobs, "prefix": "acme"})
    await queue.add("x", {})
    [description] = [d for d in await jobs.queue_descriptions() if d.queue == "acme:described"]
    assert (description.label, description.dialect) == ("described", "bullmq")
    settings = f"{jobs.db.schema}.queue_settings"
    before = await jobs.pool.fetchval(f"SELECT xmin::text FROM {settings} WHERE queue = $1",
                                      "acme:described")  # fmt: skip
    again = bullmq_compat.Queue("described", {"connection": jobs, "prefix": "acme"})
    await again.add("y", {})
    after = await jobs.pool.fetchval(f"SELECT xmin::text FROM {settings} WHERE queue = $1",
                                     "acme:described")  # fmt: skip
    assert before == after  # described already: nothing written
    await queue.close()
    await again.close()


async def test_describe_queue_refuses_an_unknown_dialect(jobs: JobQueue) -> None:
    with pytest.raises(InvalidOption, match="dialect"):
        await jobs.describe_queue("q", label="q", dialect="celery")
    assert await jobs.queue_descriptions() == []


async def test_the_overview_shows_a_bullmq_queue_by_its_name_in_bullmq_states(
    client: httpx.AsyncClient, shop: dict[str, Any], seeded: dict[str, int]
) -> None:
    page = (await client.get("/")).text
    bullmq = page.split('id="bullmq-queues"')[1].split("</section>")[0]
    native = page.split('id="native-queues"')[1].split("</section>")[0]
    headers = re.findall(r'<th class="num"><span class="dot [^"]+"></span>([^<]+)</th>', bullmq)
    assert headers == ["active", "waiting", "prioritized", "delayed", "waiting children",
                       "completed", "failed"]  # fmt: skip
    row = row_of(bullmq, "bull:shop")
    assert '<a href="/queues/shop">shop</a>' in row and "bull:shop" not in row.split("</td>")[0]
    cells = re.findall(r'<td class="num">(.*?)</td>', row)
    shown = [re.sub(r"<[^>]+>", "", c) for c in cells]
    assert shown == ["0", "3", "2", "1", "0", "0", "0"]
    assert '<span class="zero">0</span>' in cells[0]  # a zero is not a link
    assert 'href="/queues/shop?state=prioritized">2</a>' in cells[2]
    assert "mail" in native and "bull:shop" not in native  # the native queue keeps its words
    assert "ready" in native


async def test_a_bullmq_queue_page_has_bullmq_state_tabs_with_counts(
    client: httpx.AsyncClient, shop: dict[str, Any]
) -> None:
    page = (await client.get("/queues/shop")).text  # its BullMQ name is its URL
    assert "<h1>shop</h1>" in page and 'id="bullmq-view"' in page
    assert tab_counts(page) == {
        "latest": "6", "active": "", "waiting": "3", "prioritized": "2", "delayed": "1",
        "waiting-children": "", "completed": "", "failed": "",
    }  # fmt: skip
    assert 'data-tab="latest" aria-current="page"' in page
    prioritized = (await client.get("/queues/shop?state=prioritized")).text
    listed = set(re.findall(r'<tr data-job="(\d+)">', prioritized))
    assert listed == {str(j.engine_id) for j in shop["prioritized"]}
    assert prioritized.count('">prioritized</span>') == 2
    # The engine's name leads to the same page.
    assert (await client.get("/queues/bull:shop?state=prioritized")).text.count(
        '">prioritized</span>'
    ) == 2
    bad = await client.get("/queues/shop?state=ready")
    assert bad.status_code == 400 and "latest, active, waiting, prioritized" in bad.text


async def test_a_filter_that_matches_nothing_keeps_bullmq_words(
    client: httpx.AsyncClient, shop: dict[str, Any]
) -> None:
    page = (await client.get("/queues/shop?state=waiting&name_prefix=nothing-like-it")).text
    assert 'id="bullmq-view"' in page and "No jobs match this filter." in page
    assert "<th>job id</th>" in page and ">attempts made</th>" in page
    assert 'data-tab="waiting"' in page and 'data-tab="ready"' not in page


async def test_pages_are_numbered_with_the_total(jobs: JobQueue, client: httpx.AsyncClient) -> None:
    queue = bullmq_compat.Queue("big", {"connection": jobs})
    await queue.addBulk([{"name": "n", "data": {"i": i}} for i in range(1_234)])
    page = (await client.get("/queues/big?state=waiting")).text
    assert "1,234 job(s), 1\N{EN DASH}50 shown" in page
    pages = re.findall(r'<nav class="pages".*?</nav>', page, re.S)[0]
    assert re.findall(r">(\d+)</(?:a|strong)>", pages) == ["1", "2", "3", "25"]
    assert '<span class="gap">…</span>' in pages
    last = (await client.get("/queues/big?state=waiting&page=24")).text
    assert (
        "1,234 job(s), 1201\N{EN DASH}1234 shown" in last
        and len(re.findall("<tr data-job=", last)) == 34
    )
    # Waiting jobs are listed in the order workers take them, the next first; ?oldest=1 flips it.
    first = re.findall(r'<tr data-job="(\d+)">', page)[0]
    flipped = re.findall(
        r'<tr data-job="(\d+)">', (await client.get("/queues/big?state=waiting&oldest=1")).text
    )[0]
    rows = await jobs.list_jobs(JobFilter(queue="bull:big"), limit=1_000, oldest_first=True)
    assert int(first) == rows[0].id and int(flipped) != rows[0].id
    overview = (await client.get("/")).text
    assert ">1,234</a>" in row_of(overview, "bull:big")
    await queue.close()


async def test_same_names_under_two_prefixes_are_told_apart(
    jobs: JobQueue, client: httpx.AsyncClient
) -> None:
    one = bullmq_compat.Queue("twin", {"connection": jobs})
    two = bullmq_compat.Queue("twin", {"connection": jobs, "prefix": "other"})
    await one.add("a", {})
    await two.add("b", {})
    await two.add("c", {})
    page = (await client.get("/")).text
    assert '<a href="/queues/bull%253Atwin">twin</a>' in row_of(page, "bull:twin")
    assert '<a href="/queues/other%253Atwin">twin</a>' in row_of(page, "other:twin")
    twin = await client.get("/queues/other%3Atwin")
    assert twin.status_code == 200 and len(re.findall("<tr data-job=", twin.text)) == 2
    await one.close()
    await two.close()


async def test_pause_and_bulk_actions_come_back_to_the_queue_with_the_view_kept(
    jobs: JobQueue, client: httpx.AsyncClient, shop: dict[str, Any]
) -> None:
    page = await client.get("/queues/shop?state=prioritized")
    token = csrf_of(page)
    paused = await client.post("/queues/shop/pause", data={"csrf": token, "from": "queue"})
    assert paused.status_code == 303 and paused.headers["location"].startswith("/queues/shop?")
    assert (await jobs.queue_settings("bull:shop")).paused
    after = (await client.get(paused.headers["location"])).text
    assert "queue shop: paused" in after and "data-paused" in after and ">Resume</button>" in after
    form = {"csrf": token, "matching": "1", "state": "prioritized", "do": "remove"}
    confirm = await client.post("/queues/shop/bulk", data=form)
    assert "<strong>2</strong> job(s)" in confirm.text  # only the tab's jobs
    done = await client.post("/queues/shop/bulk", data={**form, "confirmed": "1"})
    assert done.status_code == 303
    assert done.headers["location"].startswith("/queues/shop?state=prioritized&message=")
    left = await jobs.substate_counts(JobFilter(queue="bull:shop"))
    assert left[SubState.READY] == 3 and left[SubState.DELAYED] == 1


async def test_a_queue_no_worker_serves_says_so(
    jobs: JobQueue, client: httpx.AsyncClient, shop: dict[str, Any]
) -> None:
    page = (await client.get("/queues/shop")).text
    assert 'id="no-worker"' in page and "6 job(s) wait for one" in page
    await jobs.purge(JobFilter(queue="bull:shop"))
    assert 'id="no-worker"' not in (await client.get("/queues/shop")).text  # nothing waits


async def test_the_flows_filter_takes_a_bullmq_queue_by_its_name(
    jobs: JobQueue, client: httpx.AsyncClient
) -> None:
    flows = bullmq_compat.FlowProducer({"connection": jobs})
    await flows.add({"name": "ship", "queueName": "orders", "data": {},
                     "children": [{"name": "pack", "queueName": "orders", "data": {}}]})  # fmt: skip
    await flows.close()
    by_name = (await client.get("/flows?queue=orders")).text
    by_engine_name = (await client.get("/flows?queue=bull%3Aorders")).text
    assert by_name.count('<a href="/flows/') == by_engine_name.count('<a href="/flows/') == 1
    overview = (await client.get("/")).text  # the FlowProducer described its queue
    assert '<a href="/queues/orders">orders</a>' in row_of(overview, "bull:orders")


async def test_a_bullmq_flow_reads_in_bullmq_words_with_a_panel_for_the_chosen_job(
    jobs: JobQueue, client: httpx.AsyncClient
) -> None:
    flows = bullmq_compat.FlowProducer({"connection": jobs})
    tree = await flows.add({
        "name": "fulfil", "queueName": "orders", "data": {"order": 5003},
        "children": [{"name": "charge", "queueName": "payments", "data": {"card": "x"}},
                     {"name": "receipt", "queueName": "emails", "data": {"to": "a@b"}}],
    })  # fmt: skip
    await flows.close()
    for ctx in await jobs.claim(["bull:payments", "bull:emails"], kinds=["bullmq"], limit=2):
        if ctx.name == "charge":
            await ctx.fail(RuntimeError("card declined"))
        else:
            await ctx.complete({"sent": True})
    parent = tree["job"]
    flow_id = (await jobs.get(int(parent.id))).flow_id  # type: ignore[union-attr]
    page = (await client.get(f"/flows/{flow_id}")).text
    counts = re.search(r'<p id="flow-counts">(.*?)</p>', page, re.S)
    assert counts is not None
    assert "waiting-children 1" in counts.group(1) and "failed 1" in counts.group(1)
    assert "completed 1" in counts.group(1) and "waiting_children" not in counts.group(1)
    assert 'id="panel"' not in page and ">waiting-children</span>" in page  # the legend
    chosen = (await client.get(f"/flows/{flow_id}?node={parent.id}")).text
    panel = re.search(r'<aside class="node-panel" id="panel">(.*?)</aside>', chosen, re.S)
    assert panel is not None
    assert "fulfil" in panel.group(1) and "waiting-children</span>" in panel.group(1)
    assert "1 done · 1 unfinished" in panel.group(1) and "&#34;order&#34;: 5003" in panel.group(1)
    assert f'href="/jobs/{parent.id}">Open this job' in panel.group(1)
    [charge] = [c["job"] for c in tree["children"] if c["job"].name == "charge"]
    failed = (await client.get(f"/flows/{flow_id}?node={charge.id}")).text
    assert "card declined" in failed and "failed</span>" in failed
    assert (await client.get(f"/flows/{flow_id}?node=999999")).status_code == 404
    assert (await client.get(f"/flows/{flow_id}?node=x")).status_code == 404


async def test_the_queues_page_filters_queues_by_a_part_of_their_name(
    jobs: JobQueue, client: httpx.AsyncClient
) -> None:
    for name in ("emails", "email-bounces", "orders"):
        queue = bullmq_compat.Queue(name, {"connection": jobs})
        await queue.add("x", {})
        await queue.close()
    await jobs.pause("native-mail")
    page = (await client.get("/?q=MAIL")).text
    shown = re.findall(r'<tr data-queue="([^"]+)"', page)
    assert sorted(shown) == ["bull:email-bounces", "bull:emails", "native-mail"]
    assert "3 of 4 queues match" in page and 'value="MAIL"' in page
    none = (await client.get("/?q=%3Cnothing%3E")).text
    assert "No queue's name holds “&lt;nothing&gt;”" in none and "<nothing>" not in none
    assert len(re.findall(r'<tr data-queue="', (await client.get("/")).text)) == 4


async def test_every_page_has_a_sidebar_of_queues_by_their_names(
    jobs: JobQueue, client: httpx.AsyncClient
) -> None:
    queue = bullmq_compat.Queue("orders", {"connection": jobs})
    await queue.add("x", {})
    await queue.close()
    await insert_job(jobs.pool, jobs.db.schema, queue="reports", status="completed")  # history
    await jobs.pause("quiet")  # settings only
    page = (await client.get("/queues/orders")).text
    sidebar = re.search(r'<nav class="sidebar" id="sidebar"[^>]*>(.*?)</nav>', page, re.S)
    assert sidebar is not None
    listed = re.findall(
        r'<li data-name="[^"]*"><a href="([^"]+)"([^>]*)>([^<]+)</a>', sidebar.group(1)
    )
    assert [name for _, _, name in listed] == ["orders", "quiet", "reports"]
    assert [attrs for _, attrs, name in listed if name == "orders"] == [' aria-current="page"']
    assert '<a href="/queues/orders"' in sidebar.group(1)
    for path in ("/", "/flows", "/schedules", "/workers"):
        assert 'id="sidebar"' in (await client.get(path)).text, path
