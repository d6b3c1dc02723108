"""The dashboard's page templates (``templates/*.html``), autoescaped: job names, payloads,
errors and logs are user data, never markup."""

from __future__ import annotations

from datetime import UTC, datetime
from urllib.parse import quote, unquote

import jinja2

from pgjobs.dashboard.formatting import duration, number, relative, stamp
from pgjobs.dashboard.views import bullmq_priority, bullmq_state, flow_outcome


def queue_path(name: str) -> str:
    """A queue name as one URL path segment, whatever it holds ('/' and '%' included): quoted
    twice, because the server decodes the path once before routing. ``queue_of`` undoes it."""
    return quote(quote(name, safe=""), safe="")


def queue_of(segment: str) -> str:
    """The queue name a ``queue_path`` segment stands for (after the server's own decoding)."""
    return unquote(segment)


def _duration(seconds: float | None) -> str:
    return "—" if seconds is None else duration(seconds)


def _ago(moment: datetime | None, now: datetime | None = None) -> str:
    return "—" if moment is None else relative(moment, now or datetime.now(UTC))


def _stamp(moment: datetime | None) -> str:
    return "—" if moment is None else stamp(moment)


ENVIRONMENT = jinja2.Environment(
    loader=jinja2.PackageLoader("pgjobs.dashboard", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
)
ENVIRONMENT.filters["queue_path"] = queue_path
ENVIRONMENT.filters["duration"] = _duration
ENVIRONMENT.filters["ago"] = _ago
ENVIRONMENT.filters["stamp"] = _stamp
ENVIRONMENT.filters["number"] = number
ENVIRONMENT.globals["flow_outcome"] = flow_outcome
ENVIRONMENT.globals["bullmq_state"] = bullmq_state
ENVIRONMENT.globals["bullmq_priority"] = bullmq_priority
