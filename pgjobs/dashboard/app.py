"""The dashboard as an ASGI app: ``create_app(jobs)`` to mount it in your own application, or
``pgjobs dashboard --dsn ...`` to serve it alone.

Safe by default: every action is a POST carrying a CSRF token that must match its cookie
(double submit, SameSite=Strict); ``read_only`` refuses them all; every value shown is escaped
by the templates; every read goes through the tracking API with bind parameters. With a
``tenant_resolver`` (request -> tenant), every read and action is scoped to that tenant, and
queue-wide settings (pause, metrics, purge of a whole queue) are refused, since a queue is
shared by tenants.
"""

from __future__ import annotations

import dataclasses
import hmac
import json
import secrets
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from importlib import resources
from typing import Any
from urllib.parse import urlencode

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from pgjobs.client import JobQueue
from pgjobs.dashboard import charts, graph, job_page, views
from pgjobs.dashboard.pages import ENVIRONMENT, queue_of, queue_path
from pgjobs.dashboard.views import QueueName, QueueNames
from pgjobs.dialects import schedule_retimer
from pgjobs.errors import InvalidOption, PgJobsError, QueueRunning
from pgjobs.models import FlowFilter, JobFilter, SubState

TenantResolver = Callable[[Request], "str | Awaitable[str | None] | None"]
PAGE = 50
GROUPS = 50
"""Groups a grouped queue's page lists, the next served first (BullMQ Pro's groups)."""
REFRESH_CHOICES = ("0", "5", "30")
"""Live update periods (seconds) a page may be asked for with ?refresh=N (0: off)."""
DEFAULT_REFRESH = 5
"""A page updates itself every 5 s unless asked otherwise (bull-board polls every 5 s too)."""
MAX_PAGE = 100_000
"""Beyond this page a listing answers 400 (an offset PostgreSQL would scan for nothing)."""
CSRF_COOKIE = "pgjobs_csrf"
SUB_STATES = [s.value for s in SubState]
BULLMQ_STATES = {
    "waiting": "ready",
    "wait": "ready",
    "prioritized": "ready",
    "waiting-children": "waiting_children",
}
"""BullMQ's state names a facade user may filter by (?sub_state=waiting), as the engine's
sub-states; delayed, active, completed and failed are spelt the same."""
BULLMQ_FILTERS = [
    ("waiting", "ready"),
    ("delayed", "delayed"),
    ("waiting-children", "waiting_children"),
    ("active", "active"),
    ("completed", "completed"),
    ("failed", "failed"),
]
"""The state choices of a facade queue's list, in BullMQ's words, with the sub-state each is."""
OUTCOMES = ["running", "failed", "completed_with_failures", "completed"]
LIST_FILTERS = ("sub_state", "kind", "name_prefix", "dedup_key", "payload")
"""The filters of a queue's job list (query string, and the bulk actions' form)."""
FINISHED = frozenset({SubState.COMPLETED, SubState.FAILED, SubState.CANCELLED})
EMPTY = "empty"
"""The purge page's sub-state for emptying a queue: every job waiting to run."""
WAITING_TO_RUN = (SubState.READY, SubState.DELAYED, SubState.RETRY)

BULK_ACTIONS: dict[str, frozenset[SubState]] = {
    "retry": FINISHED,
    "cancel": frozenset(SubState) - FINISHED,
    "remove": frozenset(SubState) - {SubState.ACTIVE},
    "promote": frozenset({SubState.DELAYED, SubState.RETRY}),
}
"""The actions on a selection or a filter, and the sub-states each applies to: a retry
re-drives finished jobs, a cancel ends pending and running ones, a remove deletes all but the
running (left alone, as purge does), a promote makes delayed jobs (and retries waiting for
their backoff) due now."""
MAX_SELECTION = 1000
PAYLOAD_SCAN = 20_000
"""A payload filter (not indexed) reads every job in flight and, of a queue's history, the
newest this many finished jobs of each finished state at most; the page says so."""
EDGE_COLOURS = {
    "block": "#888",
    "cascade": "#d05050",
    "cascade_deferred": "#d08030",
    "ignore": "#5080d0",
    "continue": "#50a050",
}


PROMETHEUS_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LIVE_SCRIPT = (resources.files("pgjobs.dashboard") / "static" / "live.js").read_text("utf-8")


def _labels(**labels: str) -> str:
    """Prometheus labels, values escaped as its text format requires."""
    escaped = (
        (k, v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n"))
        for k, v in labels.items()
    )
    return "{" + ",".join(f'{k}="{v}"' for k, v in escaped) + "}"


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


def _sub_states(where: JobFilter) -> list[SubState]:
    """The sub-states a filter names (its ``sub_state``, one or several)."""
    value = where.sub_state
    values = value if isinstance(value, tuple | list) else [value]
    return [SubState(v) for v in values if v is not None]


def _pages(page: int, total: int | None) -> list[int | None]:
    """The page numbers (0-based) to link for ``total`` jobs: the first, the last and those
    near ``page``, None standing for a gap; none when the total is unknown or one page."""
    if total is None or total <= PAGE:
        return []
    last = (total - 1) // PAGE
    shown = sorted({0, last, *range(max(page - 2, 0), min(page + 2, last) + 1)})
    pages: list[int | None] = []
    for number in shown:
        if pages and number - (pages[-1] or 0) > 1:
            pages.append(None)
        pages.append(number)
    return pages


def _refresh_query(request: Request, period: int) -> str:
    """This page's query with another live update period (0: off); banners dropped."""
    kept = {k: v for k, v in request.query_params.items() if k not in ("refresh", "message", "sig")}
    if period != DEFAULT_REFRESH:
        kept["refresh"] = str(period)
    return urlencode(kept)


def _line(start: graph.Placed, end: graph.Placed, edge: Any) -> dict[str, Any]:
    return {
        "x1": start.x + graph.NODE_W,
        "y1": start.y + graph.NODE_H / 2,
        "x2": end.x,
        "y2": end.y + graph.NODE_H / 2,
        "colour": EDGE_COLOURS.get(edge.policy, "#888"),
        "policy": edge.policy,
        "state": edge.state,
    }


class Dashboard:
    def __init__(
        self,
        jobs: JobQueue,
        *,
        read_only: bool = False,
        tenant_resolver: TenantResolver | None = None,
        root_path: str = "",
        reads: JobQueue | None = None,
    ) -> None:
        self.jobs = jobs
        """Where actions write, and what confirmation pages count (the primary)."""
        self.reads = reads if reads is not None else jobs
        """Where the pages read (a read replica, when given)."""
        self.read_only = read_only
        self.tenant_resolver = tenant_resolver
        self.root = root_path.rstrip("/")
        self._message_key = secrets.token_bytes(32)  # status banners are this app's own

    # -- plumbing ---------------------------------------------------------------------------

    async def tenant(self, request: Request) -> str | None:
        if self.tenant_resolver is None:
            return None
        value = self.tenant_resolver(request)
        if isinstance(value, Awaitable):
            value = await value
        if value is None:
            raise HTTPException(403, "no tenant for this request")
        return str(value)

    def scope(self, tenant: str | None) -> dict[str, Any]:
        """Keyword arguments of the engine's tenant-scoped calls."""
        return {"tenant": tenant} if tenant is not None else {"any_tenant": True}

    async def render(
        self, request: Request, name: str, status: int = 200, **context: Any
    ) -> Response:
        token = request.cookies.get(CSRF_COOKIE) or secrets.token_urlsafe(32)
        refresh = request.query_params.get("refresh")
        context.setdefault("now", datetime.now(UTC))
        period = int(refresh) if refresh in REFRESH_CHOICES else DEFAULT_REFRESH
        context.setdefault("refresh", period or None)
        if self.reads is not self.jobs:  # the pages read a replica: say how far behind it is
            context.setdefault("replica_lag", await self.reads.replica_lag())
        tenant = await self.tenant(request)
        if tenant is None and status == 200:  # every queue, by its name (a tenant sees its own)
            names = await self.names()
            queues = [names.of(queue) for queue in await self.reads.queue_names()]
            context.setdefault("sidebar", sorted(queues, key=lambda q: q.shown.casefold()))
        html = ENVIRONMENT.get_template(name + ".html").render(
            root=self.root,
            read_only=self.read_only,
            tenant=tenant,
            csrf=token,
            message=self.message_of(request),
            pretty=_pretty,
            refresh_query=lambda period: _refresh_query(request, period),
            **context,
        )
        response = HTMLResponse(html, status_code=status)
        response.set_cookie(CSRF_COOKIE, token, httponly=True, samesite="strict")
        response.headers["Content-Security-Policy"] = (
            "default-src 'self'; style-src 'unsafe-inline'"
        )
        response.headers["X-Frame-Options"] = "DENY"
        return response

    async def checked_form(self, request: Request) -> dict[str, str]:
        """The POSTed form, once the action is allowed and its CSRF token matches the cookie."""
        if self.read_only:
            raise HTTPException(403, "this dashboard is read-only")
        form = {k: str(v) for k, v in (await request.form()).items()}
        cookie = request.cookies.get(CSRF_COOKIE, "")
        if not cookie or not hmac.compare_digest(cookie, form.get("csrf", "")):
            raise HTTPException(403, "missing or wrong CSRF token: reload the page and retry")
        return form

    def _signature(self, message: str) -> str:
        return hmac.new(self._message_key, message.encode(), "sha256").hexdigest()[:32]

    def back(
        self, request: Request, path: str, message: str, keep: dict[str, Any] | None = None
    ) -> Response:
        """Redirect after an action, with a status banner only this app can have written;
        ``keep``: query parameters the page had (its filter), kept."""
        kept = {k: v for k, v in (keep or {}).items() if v not in (None, "")}
        query = urlencode({**kept, "message": message, "sig": self._signature(message)})
        return RedirectResponse(f"{self.root}{path}?{query}", 303)

    def message_of(self, request: Request) -> str | None:
        """The banner of a redirect made by ``back``; a link's own ``?message=`` is ignored."""
        message = request.query_params.get("message")
        signature = request.query_params.get("sig", "")
        if message is None or not hmac.compare_digest(signature, self._signature(message)):
            return None
        return message

    @staticmethod
    def page_of(request: Request) -> int:
        text = request.query_params.get("page") or "0"
        if not text.isdigit() or int(text) > MAX_PAGE:
            raise HTTPException(
                400, f"page must be a whole number from 0 to {MAX_PAGE}, got {text!r}"
            )
        return int(text)

    def queue_wide(self, tenant: str | None) -> None:
        if tenant is not None:
            raise HTTPException(403, "queue-wide actions are not available to a tenant")

    # -- pages ------------------------------------------------------------------------------

    async def names(self) -> QueueNames:
        """The queues' names as their applications give them (views.QueueNames)."""
        return QueueNames(await self.reads.queue_descriptions())

    async def named_queue(self, request: Request) -> QueueName:
        """The queue the request's ``{queue}`` segment names: an engine name or a label."""
        return (await self.names()).resolve(queue_of(request.path_params["queue"]))

    async def tab_counts(
        self,
        name: QueueName,
        counts: dict[SubState, int],
        tenant: str | None,
        source: JobQueue | None = None,
    ) -> dict[str, int]:
        """How many jobs each of the queue's tabs holds (views.tab_counts), from its sub-state
        ``counts`` and, for a BullMQ queue, how many ready jobs have no priority (BullMQ's
        waiting), read from ``source`` (the pages' reads by default)."""
        waiting = 0
        if name.dialect == views.BULLMQ:
            where = JobFilter(queue=name.queue, tenant=tenant, status="pending",
                              priority=views.BULLMQ_NO_PRIORITY)  # fmt: skip
            reads = source or self.reads
            waiting = (await reads.substate_counts(where))[SubState.READY]
        return views.tab_counts(name.dialect, counts, waiting)

    async def history_window(self, queue: str, counts: dict[SubState, int]) -> datetime | None:
        """Since when a payload filter reads ``queue``'s history: the finish time of the
        PAYLOAD_SCAN-th newest job of each finished state that has more, the latest of them;
        None when none has more (the whole history is read)."""
        since: list[datetime] = []
        for state in views.FINISHED_STATES:
            if counts[state] > PAYLOAD_SCAN:
                rows = await self.reads.list_jobs(
                    JobFilter(queue=queue, sub_state=state), limit=1,
                    offset=PAYLOAD_SCAN - 1, order="finished",
                )  # fmt: skip
                since += [r.finished_at for r in rows if r.finished_at is not None]
        return max(since, default=None)

    async def queues(self, request: Request) -> Response:
        tenant = await self.tenant(request)
        names = await self.names()
        bullmq_rows: list[dict[str, Any]] = []
        native_rows: list[dict[str, Any]] = []
        hour_ago = datetime.now(UTC) - timedelta(hours=1)
        wanted = (request.query_params.get("q") or "").strip().casefold()
        every = await self.reads.queue_stats()
        for stats in every:
            if wanted and wanted not in names.of(stats.queue).shown.casefold():
                continue  # the filter box: a part of the queue's name
            counts = stats.counts
            if tenant is not None:
                counts = await self.reads.substate_counts(
                    JobFilter(queue=stats.queue, tenant=tenant)
                )
                if not any(counts.values()):
                    continue  # another tenant's queue: not even its name is shown
                spark = ""
            else:
                buckets = await self.reads.queue_metrics(stats.queue, "minute", hour_ago)
                spark = charts.sparkline([b.completed + b.dead for b in buckets])
            name = names.of(stats.queue)
            bullmq = name.dialect == views.BULLMQ
            row = {
                "name": name, "tabs": await self.tab_counts(name, counts, tenant),
                "paused": stats.paused, "concurrency": stats.concurrency,
                "rate_limit": stats.rate_limit, "rate_period": stats.rate_period,
                "sparkline": spark,
            }  # fmt: skip
            (bullmq_rows if bullmq else native_rows).append(row)
        bullmq_rows.sort(key=lambda r: (r["name"].shown, r["name"].queue))
        return await self.render(
            request, "queues", bullmq_queues=bullmq_rows, native_queues=native_rows,
            bullmq_tabs=views.BULLMQ_TABS[1:], engine_tabs=views.ENGINE_TABS[1:],
            wanted=request.query_params.get("q") or "", total=len(every),
        )  # fmt: skip

    @staticmethod
    def list_filters(values: Any) -> dict[str, Any]:
        """The job list's filters from a query string or a form (BullMQ's state names taken
        as the engine's sub-states); 400 for an unknown sub-state."""
        filters: dict[str, Any] = {k: values.get(k) or None for k in LIST_FILTERS}
        filters["sub_state"] = BULLMQ_STATES.get(filters["sub_state"], filters["sub_state"])
        if filters["sub_state"] and filters["sub_state"] not in SUB_STATES:
            raise HTTPException(400, f"unknown sub_state {filters['sub_state']!r}")
        return filters

    @staticmethod
    def job_filter(
        queue: str,
        tenant: str | None,
        filters: dict[str, Any],
        ids: tuple[int, ...] | None = None,
        tab: views.Tab | None = None,
    ) -> JobFilter:
        """The JobFilter of a queue's list: its state tab's jobs, its filters (a sub_state
        filter in place of the tab's), the payload one (``path = value``, the value read as
        JSON when it is JSON, else as a string) parsed; 400 naming it."""
        fields = dict(tab.where) if tab is not None else {}
        if filters.get("sub_state"):
            fields = {k: v for k, v in fields.items() if k not in ("sub_state", "priority",
                                                                  "max_priority")}  # fmt: skip
        fields.update({k: v for k, v in filters.items() if k != "payload" and v is not None})
        payload = filters.get("payload")
        if payload:
            path, sep, text = payload.partition("=")
            if not sep or not path.strip():
                raise HTTPException(400, f"payload filter must be 'path = value', got {payload!r}")
            try:
                value = json.loads(text.strip())
            except ValueError:
                value = text.strip()
            fields["payload_equals"] = (path.strip(), value)
        return JobFilter(queue=queue, tenant=tenant, ids=ids, **fields)

    @staticmethod
    def tab_of(name: QueueName, values: Any) -> views.Tab:
        """The state tab ``?state=`` asks for (the first, every job, by default); 400 names
        the tabs of the queue's dialect."""
        tabs = views.tabs_of(name.dialect)
        key = values.get("state") or tabs[0].key
        for tab in tabs:
            if tab.key == key:
                return tab
        raise HTTPException(400, f"unknown state {key!r}: one of {', '.join(t.key for t in tabs)}")

    async def queue_jobs(self, request: Request) -> Response:
        tenant = await self.tenant(request)
        name = await self.named_queue(request)
        queue = name.queue
        page = self.page_of(request)
        tab = self.tab_of(name, request.query_params)
        filters = self.list_filters(request.query_params)
        # "recent" (the latest tab) reads newest first only, and every state
        order = "created" if tab.order == "recent" and filters["sub_state"] else tab.order
        oldest = request.query_params.get("oldest") == "1" and order != "recent"
        where = self.job_filter(queue, tenant, filters, tab=tab)
        if tenant is None:  # kept as jobs finish: no count of the history
            counts = await self.reads.queue_counts(queue)
        else:
            counts = await self.reads.substate_counts(JobFilter(queue=queue, tenant=tenant))
        since = await self.history_window(queue, counts) if filters["payload"] else None
        if since is not None:
            where = dataclasses.replace(where, history_since=since)
        rows = await self.reads.list_jobs(
            where, limit=PAGE + 1, offset=page * PAGE, order=order,
            oldest_first=tab.oldest_first != oldest,
        )  # fmt: skip
        bullmq = name.dialect == views.BULLMQ
        tab_counts = await self.tab_counts(name, counts, tenant)
        filtered = any(filters.values())
        total = None if filtered else tab_counts[tab.key]
        settings = None if tenant is not None else await self.reads.queue_settings(queue)
        serving = [w for w in await self.reads.list_workers() if queue in w.queues]
        pending = sum(n for s, n in counts.items() if s not in FINISHED and s != SubState.ACTIVE)
        throughput = None
        if tenant is None:  # the rollup is queue-wide, across tenants
            hour_ago = datetime.now(UTC) - timedelta(minutes=59)
            buckets = await self.reads.queue_metrics(queue, "minute", hour_ago)
            throughput = charts.throughput(buckets)
        groups = [] if tenant is not None else await self.reads.list_groups(queue, limit=GROUPS)
        groups = [g for g in groups if g.status or g.concurrency or g.rate_limit]  # not idle

        def query(**changes: Any) -> str:
            values = {**{k: v for k, v in filters.items() if v}, "state": tab.key,
                      "oldest": "1" if oldest else None, "page": page, **changes}  # fmt: skip
            return urlencode({k: v for k, v in values.items() if v not in (None, "", 0)})

        return await self.render(
            request, "jobs", qname=name, queue=queue, jobs=rows[:PAGE], more=len(rows) > PAGE,
            page=page, pages=_pages(page, total), total=total, filters=filters, tab=tab,
            tabs=views.tabs_of(name.dialect), tab_counts=tab_counts, oldest=oldest,
            bullmq=bullmq, settings=settings, serving=serving, pending=pending, order=order,
            history_since=since, payload_scan=PAYLOAD_SCAN, throughput=throughput,
            sub_states=SUB_STATES, query=query, groups=groups, groups_shown=GROUPS,
        )  # fmt: skip

    async def job(self, request: Request) -> Response:
        tenant = await self.tenant(request)
        job_id = self._int(request.path_params["job_id"])
        row = await self.reads.get(job_id, **self.scope(tenant))
        if row is None:
            raise HTTPException(404, f"no job {job_id}")
        page = await job_page.context(
            self.reads, row, request.query_params, self.scope(tenant),
            queue_name=(await self.names()).of(row.queue),
        )  # fmt: skip
        return await self.render(request, "job", **page)

    async def flows(self, request: Request) -> Response:
        tenant = await self.tenant(request)
        q = request.query_params
        page = self.page_of(request)
        filters: dict[str, Any] = {k: q.get(k) or None for k in ("queue", "outcome", "name_prefix")}
        if filters["outcome"] and filters["outcome"] not in OUTCOMES:
            raise HTTPException(400, f"unknown outcome {filters['outcome']!r}")
        where = dict(filters)
        if where["queue"]:  # a BullMQ queue by its name (orders) or the engine's (bull:orders)
            where["queue"] = (await self.names()).resolve(where["queue"]).queue
        rows = await self.reads.list_flows(
            FlowFilter(tenant=tenant, **where), limit=PAGE + 1, offset=page * PAGE
        )

        def query(p: int) -> str:
            return urlencode({**{k: v for k, v in filters.items() if v}, "page": p})

        return await self.render(
            request, "flows", flows=rows[:PAGE], more=len(rows) > PAGE, page=page,
            filters=filters, outcomes=OUTCOMES, query=query,
        )  # fmt: skip

    async def search(self, request: Request) -> Response:
        """A job by id: the pgjobs id, or a custom id (BullMQ's jobId, a job key) in any queue.
        One match opens the job; several are listed; none answers 404."""
        tenant = await self.tenant(request)
        wanted = (request.query_params.get("id") or "").strip()
        if not wanted:
            raise HTTPException(400, "give a job id: /search?id=...")
        found = []
        if wanted.isdigit() and len(wanted) <= 18:
            row = await self.reads.get(int(wanted), **self.scope(tenant))
            if row is not None:
                found.append(row)
        if len(wanted.encode()) <= 1024 and "\x00" not in wanted:
            keyed = await self.reads.find_by_job_key(wanted, **self.scope(tenant))
            found += [row for row in keyed if all(row.id != f.id for f in found)]
        if not found:
            raise HTTPException(404, f"no job with id {wanted!r}")
        if len(found) == 1:
            return RedirectResponse(f"{self.root}/jobs/{found[0].id}", 303)
        return await self.render(request, "search", wanted=wanted, found=found)

    async def workers(self, request: Request) -> Response:
        await self._fleet_wide(request)
        return await self.render(
            request, "workers", workers=await self.reads.list_workers(), names=await self.names()
        )

    async def schedules(self, request: Request) -> Response:
        await self._fleet_wide(request)
        schedules = await self.reads.list_schedules()
        names = await self.names()
        return await self.render(request, "schedules", schedules=schedules, names=names)

    async def schedule_action(self, request: Request) -> Response:
        """Pause, resume or remove a schedule."""
        await self.checked_form(request)
        await self._fleet_wide(request)
        name = queue_of(request.path_params["name"])
        action = request.path_params["action"]
        if await self.jobs.get_schedule(name) is None:
            raise HTTPException(404, f"no schedule {name!r}")
        if action == "remove":
            await self.jobs.remove_schedule(name)
            return self.back(request, "/schedules", f"schedule {name} removed")
        if action == "pause":
            done = await self.jobs.pause_schedule(name)
            return self.back(
                request,
                "/schedules",
                f"schedule {name} {'paused' if done else 'was paused already'}",
            )
        if action == "edit":
            return await self.retime_schedule(request, name)
        if action == "run-now":
            run = await self.jobs.run_schedule_now(name)
            if run is None:
                return self.back(
                    request, "/schedules", f"schedule {name}: paused or no run left, none made"
                )
            made = (f"job {run.job_id} added from its template" if run.job_id
                    else "its next run is due now (the scheduler adds it)")  # fmt: skip
            return self.back(request, "/schedules", f"schedule {name}: {made}")
        if action == "resume":
            tick = await self.jobs.resume_schedule(name)
            after = f", next run {tick:%Y-%m-%d %H:%M:%S}" if tick else ""
            return self.back(request, "/schedules", f"schedule {name} resumed{after}")
        raise HTTPException(404, f"no action {action!r}")

    async def retime_schedule(self, request: Request, name: str) -> Response:
        """A schedule's new timing from the schedules page's form: ``every`` (seconds; a BullMQ
        scheduler's in milliseconds), or a ``cron`` expression (a BullMQ ``pattern``) in
        ``timezone`` (``tz``). A schedule of a queue another package writes is re-timed as
        that package's API would (dialects.schedule_retimer: a BullMQ scheduler is upserted
        with its template kept); 400 naming a bad value, 404 for no such schedule."""
        form = await request.form()
        schedule = await self.jobs.get_schedule(name)
        if schedule is None:
            raise HTTPException(404, f"no schedule {name!r}")
        queue = schedule.options.get("queue")
        meta = schedule.options.get("metadata")
        dialect = (await self.names()).of(queue).dialect if isinstance(queue, str) else None
        scheduler = meta.get("scheduler") if isinstance(meta, dict) else None
        bullmq = dialect == "bullmq" and scheduler is not None
        retimer = schedule_retimer("bullmq") if bullmq else None
        if bullmq and retimer is None:
            raise HTTPException(501, "re-timing a BullMQ scheduler needs bullmq_compat installed")
        unit = 1000.0 if bullmq else 1.0
        every_text = str(form.get("every") or "").strip()
        cron = str(form.get("cron") or "").strip() or None
        timezone = str(form.get("timezone") or "").strip() or "UTC"
        every = None
        if every_text:
            try:
                every = float(every_text) / unit
            except ValueError:
                raise HTTPException(
                    400, f"every: {'milliseconds' if unit > 1 else 'seconds'}, got {every_text!r}"
                ) from None
        try:
            if retimer is None:
                tick = await self.jobs.retime_schedule(
                    name, cron=cron, every=every, timezone=timezone
                )
            else:
                tick = await retimer(self.jobs, name, cron=cron, every=every, timezone=timezone)
        except PgJobsError as exc:  # InvalidOption, ScheduleTickTaken
            raise HTTPException(400, str(exc)) from None
        after = f", next run {tick:%Y-%m-%d %H:%M:%S} UTC" if tick else ", no run left"
        shown = f"job scheduler {scheduler}" if bullmq else f"schedule {name}"
        return self.back(request, "/schedules", f"{shown} re-timed{after}")

    async def _fleet_wide(self, request: Request) -> None:
        """Workers and schedules serve every tenant: not shown under a tenant resolver."""
        if self.tenant_resolver is not None:
            raise HTTPException(403, "fleet-wide page: not served with a tenant resolver")

    async def flow(self, request: Request) -> Response:
        tenant = await self.tenant(request)
        flow_id = self._int(request.path_params["flow_id"])
        view = await self.reads.flow_view(flow_id, **self.scope(tenant))
        if view is None:
            raise HTTPException(404, f"no flow {flow_id}")
        placed, width, height = graph.layout(view.nodes, view.edges)
        at = {p.node.id: p for p in placed}
        lines = [_line(at[e.prerequisite], at[e.dependent], e) for e in view.edges
                 if e.prerequisite in at and e.dependent in at]  # fmt: skip
        bullmq = bool(view.nodes) and all(n.kind == views.BULLMQ for n in view.nodes)
        counts: dict[str, int] = {}
        for node in view.nodes:  # in the words of the flow's jobs
            state = (views.bullmq_state(node.sub_state, node.priority) if bullmq
                     else node.sub_state.value)  # fmt: skip
            counts[state] = counts.get(state, 0) + 1
        panel = await self.flow_panel(request, view, tenant)
        return await self.render(
            request, "flow", view=view, placed=placed, lines=lines, width=width, height=height,
            node_w=graph.NODE_W, node_h=graph.NODE_H, colours=graph.COLOURS,
            names=await self.names(), bullmq=bullmq, state_counts=counts, panel=panel,
            requeueable=any(n for s, n in view.summary.counts.items()
                            if s in (SubState.FAILED, SubState.CANCELLED)),
        )  # fmt: skip

    async def flow_panel(
        self, request: Request, view: Any, tenant: str | None
    ) -> dict[str, Any] | None:
        """The side panel of the flow's node chosen by ``?node=`` (None without one): the job,
        its BullMQ fields for a facade job, and its prerequisites done and unfinished."""
        chosen = request.query_params.get("node")
        if not chosen:
            return None
        node_id = self._int(chosen)
        if node_id not in {n.id for n in view.nodes}:
            raise HTTPException(404, f"no job {node_id} in flow {view.summary.id}")
        row = await self.reads.get(node_id, **self.scope(tenant))
        if row is None:
            return None
        state = {n.id: n.sub_state for n in view.nodes}
        before = [e.prerequisite for e in view.edges if e.dependent == node_id]
        done = sum(state.get(p) is SubState.COMPLETED for p in before)
        return {"job": row, "bullmq": job_page.bullmq_view(row), "done": done,
                "unfinished": len(before) - done}  # fmt: skip

    async def metrics(self, request: Request) -> Response:
        tenant = await self.tenant(request)
        self.queue_wide(tenant)
        name = await self.named_queue(request)
        queue = name.queue
        granularity = request.query_params.get("granularity", "minute")
        spans = {"minute": timedelta(hours=2), "hour": timedelta(days=2), "day": timedelta(days=60)}
        if granularity not in spans:
            raise HTTPException(400, "granularity must be minute, hour or day")
        end = datetime.now(UTC)
        buckets = await self.reads.queue_metrics(queue, granularity, end - spans[granularity], end)  # type: ignore[arg-type]
        labels = [b.start.strftime("%Y-%m-%d %H:%M") for b in buckets]
        colours = charts.METRIC_COLOURS
        figures = [
            (state, charts.bars([getattr(b, field) for b in buckets], labels, colours[state]))
            for state, field in (("completed", "completed"), ("failed", "dead"),
                                 ("cancelled", "cancelled"))
        ]  # fmt: skip
        return await self.render(
            request, "metrics", qname=name, charts=figures, colours=colours,
            granularity=granularity,
        )  # fmt: skip

    async def purge_confirm(self, request: Request) -> Response:
        tenant = await self.tenant(request)
        self.queue_wide(tenant)
        if self.read_only:
            raise HTTPException(403, "this dashboard is read-only")
        name = await self.named_queue(request)
        sub_state = request.query_params.get("sub_state") or None
        older = request.query_params.get("older_than") or "0"
        if not older.isdigit() or int(older) > 10 * 365 * 86400:
            raise HTTPException(400, f"older_than must be seconds, 0 to 10 years, got {older!r}")
        before = datetime.now(UTC) - timedelta(seconds=int(older)) if int(older) else None
        where = self._purge_filter(name.queue, sub_state, before)
        counts = await self.jobs.substate_counts(where)
        count = sum(n for s, n in counts.items() if s is not SubState.ACTIVE)
        return await self.render(
            request, "purge", refresh=None, qname=name, sub_state=sub_state, count=count,
            before=before,
        )  # fmt: skip

    # -- actions ------------------------------------------------------------------------------

    async def remove_confirm(self, request: Request) -> Response:
        if self.read_only:
            raise HTTPException(403, "this dashboard is read-only")
        tenant = await self.tenant(request)
        job_id = self._int(request.path_params["job_id"])
        row = await self.jobs.get(job_id, **self.scope(tenant))
        if row is None:
            raise HTTPException(404, f"no job {job_id}")
        return await self.render(request, "remove", refresh=None, job=row)

    async def live_script(self, request: Request) -> Response:
        """The one script of the dashboard (served from here, so the CSP stays 'self')."""
        return Response(LIVE_SCRIPT, media_type="text/javascript")

    async def health(self, request: Request) -> Response:
        """200 when the database answers and the schema is this code's; else 503. JSON, with
        the number of heartbeating workers (a load balancer's or an orchestrator's probe)."""
        try:
            await self.jobs.check_schema()
            workers = len(await self.jobs.list_workers())
        except Exception as exc:  # the database down, the schema missing or stale
            failure = {"status": "unhealthy", "error": f"{type(exc).__name__}: {exc}"}
            return Response(json.dumps(failure), 503, media_type="application/json")
        healthy = {"status": "ok", "schema": "current", "workers": workers}
        return Response(json.dumps(healthy), 200, media_type="application/json")

    async def prometheus(self, request: Request) -> Response:
        """The fleet in Prometheus' text format: jobs by queue and sub-state, whether each
        queue is paused, its lag (seconds its oldest due job has waited) and the workers
        heartbeating on it. Fleet-wide, so not served under a tenant resolver."""
        if self.tenant_resolver is not None:
            raise HTTPException(403, "metrics are fleet-wide: not served with a tenant resolver")
        stats = await self.jobs.queue_stats()
        lag = await self.jobs.queue_lag()
        workers: dict[str, int] = {}
        for worker in await self.jobs.list_workers():
            for queue in worker.queues:
                workers[queue] = workers.get(queue, 0) + 1
        lines = [
            "# HELP pgjobs_jobs Jobs by queue and sub-state.",
            "# TYPE pgjobs_jobs gauge",
        ]
        for stat in stats:
            for state in SubState:
                labels = _labels(queue=stat.queue, state=state.value)
                lines.append(f"pgjobs_jobs{labels} {stat.counts[state]}")
        lines += ["# HELP pgjobs_queue_paused 1 while the queue is paused.",
                  "# TYPE pgjobs_queue_paused gauge"]  # fmt: skip
        lines += [f"pgjobs_queue_paused{_labels(queue=q.queue)} {int(q.paused)}" for q in stats]
        lines += ["# HELP pgjobs_queue_lag_seconds How long the oldest due job has waited.",
                  "# TYPE pgjobs_queue_lag_seconds gauge"]  # fmt: skip
        lines += [
            f"pgjobs_queue_lag_seconds{_labels(queue=q.queue)} {lag.get(q.queue, 0.0):.3f}"
            for q in stats
        ]
        lines += ["# HELP pgjobs_workers Workers heartbeating on the queue.",
                  "# TYPE pgjobs_workers gauge"]  # fmt: skip
        queues = sorted({q.queue for q in stats} | set(workers))
        lines += [f"pgjobs_workers{_labels(queue=q)} {workers.get(q, 0)}" for q in queues]
        return Response("\n".join(lines) + "\n", media_type=PROMETHEUS_TYPE)

    async def job_action(self, request: Request) -> Response:
        form = await self.checked_form(request)
        tenant = await self.tenant(request)
        job_id = self._int(request.path_params["job_id"])
        action = request.path_params["action"]
        scope = self.scope(tenant)
        if action == "retry":
            row = await self.jobs.get(job_id, **scope)
            bullmq = row is not None and row.kind == views.BULLMQ
            # A BullMQ job retried as its job.retry() does: its attempts go on counting.
            done = await self.jobs.requeue(
                job_id, **scope, reset_attempts=not bullmq, clear_outcome=bullmq
            )
        elif action == "cancel":
            done = await self.jobs.cancel(job_id, **scope)
        elif action == "promote":
            done = await self.jobs.promote(job_id, **scope)
        elif action == "priority":
            done = await self.set_priority(job_id, form.get("priority", ""), scope)
        elif action == "data":
            done = await self.set_data(job_id, form.get("data", ""), scope)
        elif action == "duplicate":  # bull-board's "Duplicate": a copy, added now
            copy = await self.jobs.duplicate(job_id, **scope)
            if copy is None:
                raise HTTPException(404, f"no job {job_id}")
            return self.back(request, f"/jobs/{copy}", f"job {copy} added: a copy of job {job_id}")
        elif action == "remove":
            row = await self.jobs.get(job_id, **scope)
            if row is None:
                raise HTTPException(404, f"no job {job_id}")
            if form.get("confirmed") != "1":  # only from the confirmation page
                return RedirectResponse(f"{self.root}/jobs/{job_id}/remove", 303)
            result = await self.jobs.purge(JobFilter(ids=(job_id,), tenant=tenant))
            if result.deleted:  # back to its queue
                queue = (await self.names()).of(row.queue)
                return self.back(
                    request, f"/queues/{queue_path(queue.segment)}", f"job {job_id} removed"
                )
            done = False
        else:
            raise HTTPException(404, f"no action {action!r}")
        message = f"{action}: job {job_id}" + ("" if done else " (nothing to do in its state)")
        return self.back(request, f"/jobs/{job_id}", message)

    async def set_limits(self, name: QueueName, form: Any) -> str:
        """Set or clear the queue's limits for every worker from the form: a rate limit
        (``rate_max`` starts per ``rate_seconds``) and a concurrency cap; ``clear`` names the
        one to clear. The message to show; 400 naming a bad value."""
        clear = form.get("clear")
        try:
            if clear == "rate":
                await self.jobs.set_rate_limit(name.queue, None)
                return f"queue {name.shown}: rate limit cleared"
            if clear == "concurrency":
                await self.jobs.set_concurrency(name.queue, None)
                return f"queue {name.shown}: concurrency cap cleared"
            done = []
            if form.get("rate_max"):
                rate_max, seconds = int(form["rate_max"]), float(form.get("rate_seconds") or 1)
                await self.jobs.set_rate_limit(name.queue, rate_max, seconds)
                done.append(f"at most {rate_max} starts per {seconds:g} s")
            if form.get("concurrency"):
                await self.jobs.set_concurrency(name.queue, int(form["concurrency"]))
                done.append(f"at most {int(form['concurrency'])} running")
        except ValueError as exc:
            raise HTTPException(400, f"limits must be numbers: {exc}") from None
        except InvalidOption as exc:
            raise HTTPException(400, str(exc)) from None
        return f"queue {name.shown}: " + (", ".join(done) or "nothing to set")

    async def set_priority(self, job_id: int, text: str, scope: dict[str, Any]) -> bool:
        """A job's new priority, as the form gives it: BullMQ's (0 none, higher later) for a
        BullMQ job, the engine's (higher first) for a native one; 400 naming it when bad."""
        row = await self.jobs.get(job_id, **scope)
        if row is None:
            raise HTTPException(404, f"no job {job_id}")
        try:
            value = int(text)
        except ValueError:
            raise HTTPException(400, f"priority must be a whole number, got {text!r}") from None
        if row.kind == views.BULLMQ:
            if not 0 <= value <= 2_097_152:  # BullMQ's bounds
                raise HTTPException(400, f"priority must be 0 to 2097152, got {value}")
            value = views.engine_priority(value)
        try:
            return await self.jobs.change_priority(job_id, value, **scope)
        except InvalidOption as exc:
            raise HTTPException(400, str(exc)) from None

    async def set_data(self, job_id: int, text: str, scope: dict[str, Any]) -> bool:
        """A job's new input (its BullMQ data), as JSON; 400 naming what is wrong with it."""
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise HTTPException(400, f"data must be JSON: {exc}") from None
        try:
            return await self.jobs.update_payload(job_id, data, **scope)
        except (PgJobsError, ValueError) as exc:  # InvalidJobInput, NotJson
            raise HTTPException(400, f"data: {exc}") from None

    async def queue_action(self, request: Request) -> Response:
        await self.checked_form(request)
        self.queue_wide(await self.tenant(request))
        name = await self.named_queue(request)
        queue = name.queue
        action = request.path_params["action"]
        here = f"/queues/{queue_path(name.segment)}"
        if action == "pause":
            await self.jobs.pause(queue)
        elif action == "resume":
            await self.jobs.resume(queue)
        elif action == "limits":  # BullMQ's setGlobalRateLimit / setGlobalConcurrency
            return self.back(request, here, await self.set_limits(name, await request.form()))
        elif action == "obliterate":
            return await self.obliterate(request, name)
        elif action == "group":  # BullMQ Pro's pauseGroup / resumeGroup
            return self.back(request, here, await self.pause_group(name, await request.form()))
        elif action == "retry-failed":  # bull-board's "Retry all": every dead job, due now
            ids = await self.jobs.requeue_dead(JobFilter(queue=queue))
            return self.back(
                request, here, f"queue {name.shown}: requeued {len(ids)} failed job(s)"
            )
        else:
            raise HTTPException(404, f"no action {action!r}")
        back = here if (await request.form()).get("from") == "queue" else "/"
        return self.back(request, back, f"queue {name.shown}: {action}d")

    async def pause_group(self, name: QueueName, form: Any) -> str:
        """Pause or resume (``op``) group ``group`` of the queue; what happened, in words."""
        group, op = str(form.get("group") or ""), form.get("op")
        if op not in ("pause", "resume"):
            raise HTTPException(400, f"op: pause or resume, got {op!r}")
        try:
            if op == "pause":
                done = await self.jobs.pause_group(name.queue, group)
            else:
                done = await self.jobs.resume_group(name.queue, group)
        except InvalidOption as exc:
            raise HTTPException(400, str(exc)) from None
        if done:
            return f"group {group} {op}d"
        return (
            f"group {group} was paused already"
            if op == "pause"
            else f"group {group} was not paused"
        )

    async def obliterate_confirm(self, request: Request) -> Response:
        """What obliterating the queue removes (its jobs by state, its schedules), and a field
        to type its name in: the one action here that cannot be taken back."""
        self.queue_wide(await self.tenant(request))
        if self.read_only:
            raise HTTPException(403, "this dashboard is read-only")
        name = await self.named_queue(request)
        bullmq = name.dialect == views.BULLMQ
        # a confirmation page counts on the primary, where the action will run
        counts = await self.tab_counts(
            name, await self.jobs.queue_counts(name.queue), None, source=self.jobs
        )
        return await self.render(
            request, "obliterate", refresh=None, qname=name, tabs=views.tabs_of(name.dialect),
            tab_counts=counts, schedules=await self.jobs.schedules_for(name.queue), bullmq=bullmq,
        )  # fmt: skip

    async def obliterate(self, request: Request, name: QueueName) -> Response:
        """Obliterate the queue once its name was typed: every job (running ones too when
        asked) and its schedules, in one transaction; BullMQ's queues write no 'removed'
        events, as BullMQ's obliterate."""
        form = await request.form()
        here = f"/queues/{queue_path(name.segment)}"
        if form.get("confirm_name") != name.shown:
            return self.back(
                request, f"{here}/obliterate",
                f"nothing removed: type the queue's name, {name.shown}, to obliterate it",
            )  # fmt: skip
        try:
            result = await self.jobs.obliterate(
                name.queue, force=form.get("force") == "1",
                removed_events=name.dialect != views.BULLMQ,
            )  # fmt: skip
        except QueueRunning as exc:
            return self.back(
                request, f"{here}/obliterate",
                f"nothing removed: {exc.running} job(s) are running; tick the box to cancel "
                "them with the rest",
            )  # fmt: skip
        return self.back(request, here, f"queue {name.shown} obliterated: {result.deleted} job(s)")

    async def bulk(self, request: Request) -> Response:
        """An action on the selected jobs of a queue's list, or on every job matching its
        filter: first a page that says how many jobs it applies to, then (``confirmed``) the
        action itself, in one transaction."""
        form = await request.form()
        await self.checked_form(request)
        tenant = await self.tenant(request)
        name = await self.named_queue(request)
        queue = name.queue
        here = f"/queues/{queue_path(name.segment)}"
        tab = self.tab_of(name, form)
        do = str(form.get("do") or "")
        if do not in BULK_ACTIONS:
            raise HTTPException(400, f"unknown action {do!r}: one of {', '.join(BULK_ACTIONS)}")
        matching = form.get("matching") == "1"
        filters = self.list_filters(form) if matching else dict.fromkeys(LIST_FILTERS)
        ids: tuple[int, ...] | None = None
        if not matching:
            ids = tuple(self._int(str(v)) for v in form.getlist("id"))
            if not ids:
                return self.back(request, here, "no job selected", {"state": tab.key})
            if len(ids) > MAX_SELECTION:
                raise HTTPException(400, f"at most {MAX_SELECTION} jobs may be selected")
        where = self.job_filter(queue, tenant, filters, ids, tab if matching else None)
        applies = BULK_ACTIONS[do]
        counts = await self.jobs.substate_counts(where)
        count = sum(n for state, n in counts.items() if state in applies)
        if form.get("confirmed") != "1":
            return await self.render(
                request, "bulk", refresh=None, qname=name, do=do, count=count, matching=matching,
                ids=ids or (), filters=filters, tab=tab,
            )  # fmt: skip
        if do == "retry":
            bullmq = name.dialect == views.BULLMQ  # as each job's job.retry() does
            done = len(await self.jobs.requeue_finished(
                where, reset_attempts=not bullmq, clear_outcome=bullmq
            ))  # fmt: skip
        elif do == "cancel":
            done = len(await self.jobs.cancel_matching(where))
        elif do == "promote":
            done = await self.promote_all(where, applies, tenant)
        else:
            done = (await self.jobs.purge(where)).deleted
        return self.back(
            request, here, f"{do}: {done} job(s) (confirmed {form.get('expected', '?')})",
            {**(filters if matching else {}), "state": tab.key},
        )  # fmt: skip

    async def promote_all(
        self, where: JobFilter, states: frozenset[SubState], tenant: str | None
    ) -> int:
        """Promote every job of ``where`` in ``states`` (delayed ones), a page of ids at a time,
        each by the engine's promote (which skips a job no longer delayed); how many were."""
        chosen = states if where.sub_state is None else states & set(_sub_states(where))
        if not chosen:
            return 0
        view = dataclasses.replace(where, sub_state=tuple(sorted(chosen)))
        promoted, after = 0, 0
        while True:
            page = dataclasses.replace(view, after_id=after)
            rows = await self.jobs.list_jobs(page, limit=MAX_SELECTION, oldest_first=True)
            for row in rows:
                promoted += await self.jobs.promote(row.id, **self.scope(tenant))
            if len(rows) < MAX_SELECTION:
                return promoted
            after = rows[-1].id

    async def purge(self, request: Request) -> Response:
        form = await self.checked_form(request)
        self.queue_wide(await self.tenant(request))
        name = await self.named_queue(request)
        before = None
        if form.get("finished_before"):
            try:
                before = datetime.fromisoformat(form["finished_before"])
            except ValueError:
                raise HTTPException(400, "finished_before must be an ISO 8601 time") from None
        where = self._purge_filter(name.queue, form.get("sub_state") or None, before)
        result = await self.jobs.purge(where)
        return self.back(
            request, f"/queues/{queue_path(name.segment)}",
            f"purged {result.deleted} job(s) (confirmed {form.get('expected', '?')}); "
            f"{result.skipped_running} running left alone",
        )  # fmt: skip

    async def flow_requeue(self, request: Request) -> Response:
        await self.checked_form(request)
        tenant = await self.tenant(request)
        flow_id = self._int(request.path_params["flow_id"])
        try:
            ids = await self.jobs.requeue_flow(flow_id, **self.scope(tenant))
        except PgJobsError as exc:
            return self.back(request, f"/flows/{flow_id}", str(exc))
        return self.back(request, f"/flows/{flow_id}", f"requeued {len(ids)} job(s)")

    # -- helpers ------------------------------------------------------------------------------

    @staticmethod
    def _int(value: str) -> int:
        if not value.isdigit() or len(value) > 18:
            raise HTTPException(404, f"not an id: {value!r}")
        return int(value)

    @staticmethod
    def _purge_filter(
        queue: str, sub_state: str | None, finished_before: datetime | None = None
    ) -> JobFilter:
        """A purge of ``queue``: of one sub-state, and of finished ones, only those finished
        before a time (bull-board's clean by state and age); ``EMPTY``, every job waiting to
        run (bull-board's "Empty": waiting, prioritized and delayed, retries included); 400
        naming what is wrong."""
        if sub_state == EMPTY and finished_before is None:
            return JobFilter(queue=queue, sub_state=WAITING_TO_RUN)
        if sub_state is not None and sub_state not in SUB_STATES:
            raise HTTPException(400, f"unknown sub_state {sub_state!r}")
        if finished_before is not None and sub_state not in {s.value for s in FINISHED}:
            raise HTTPException(
                400, "an age applies to finished jobs: sub_state completed, failed or cancelled"
            )
        return JobFilter(queue=queue, sub_state=sub_state, finished_before=finished_before)


def create_app(
    jobs: JobQueue,
    *,
    read_only: bool = False,
    tenant_resolver: TenantResolver | None = None,
    root_path: str = "",
    reads: JobQueue | None = None,
) -> Starlette:
    """The dashboard on ``jobs``. Mount it (``Mount("/jobs", app=create_app(jobs,
    root_path="/jobs"))``) or serve it (``pgjobs dashboard``). With ``reads`` (a JobQueue on a
    read replica of the same schema), the pages read there and say how far behind it is;
    actions, and the confirmation pages that count what they touch, use ``jobs``."""
    d = Dashboard(jobs, read_only=read_only, tenant_resolver=tenant_resolver,
                  root_path=root_path, reads=reads)  # fmt: skip

    async def error(request: Request, exc: Exception) -> Response:
        if isinstance(exc, InvalidOption):  # a filter the engine refused: the request's fault
            status, detail = 400, str(exc)
        else:
            status = exc.status_code if isinstance(exc, HTTPException) else 500
            detail = exc.detail if isinstance(exc, HTTPException) else "internal error"
        html = ENVIRONMENT.get_template("error.html").render(
            root=d.root, read_only=d.read_only, tenant=None, csrf="", message=None,
            status=status, detail=detail, refresh=None, refresh_query=lambda period: "",
        )  # fmt: skip
        return HTMLResponse(html, status_code=status)

    routes = [
        Route("/", d.queues),
        Route("/queues/{queue:str}", d.queue_jobs),
        Route("/queues/{queue:str}/metrics", d.metrics),
        Route("/queues/{queue:str}/purge", d.purge_confirm, methods=["GET"]),
        Route("/queues/{queue:str}/purge", d.purge, methods=["POST"]),
        Route("/queues/{queue:str}/obliterate", d.obliterate_confirm, methods=["GET"]),
        Route("/queues/{queue:str}/bulk", d.bulk, methods=["POST"]),
        Route("/queues/{queue:str}/{action:str}", d.queue_action, methods=["POST"]),
        # A queue named with '/' typed as it reads (the links quote it): its page, not a 405.
        Route("/queues/{queue:path}", d.queue_jobs, methods=["GET"]),
        Route("/health", d.health),
        Route("/static/live.js", d.live_script),
        Route("/metrics", d.prometheus),
        Route("/jobs/{job_id:str}", d.job),
        Route("/jobs/{job_id:str}/remove", d.remove_confirm, methods=["GET"]),
        Route("/jobs/{job_id:str}/{action:str}", d.job_action, methods=["POST"]),
        Route("/flows", d.flows),
        Route("/workers", d.workers),
        Route("/search", d.search),
        Route("/schedules", d.schedules),
        Route("/schedules/{name:str}/{action:str}", d.schedule_action, methods=["POST"]),
        Route("/flows/{flow_id:str}", d.flow),
        Route("/flows/{flow_id:str}/requeue", d.flow_requeue, methods=["POST"]),
    ]
    return Starlette(routes=routes, exception_handlers={HTTPException: error, InvalidOption: error})
