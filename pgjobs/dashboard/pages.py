"""The dashboard's page templates (``templates/*.html``), autoescaped: job names, payloads,
errors and logs are user data, never markup."""

from __future__ import annotations

from urllib.parse import quote, unquote

import jinja2


def queue_path(name: str) -> str:
    """A queue name as one URL path segment, whatever it holds ('/' and '%' included): quoted
    twice, because the server decodes the path once before routing. ``queue_of`` undoes it."""
    return quote(quote(name, safe=""), safe="")


def queue_of(segment: str) -> str:
    """The queue name a ``queue_path`` segment stands for (after the server's own decoding)."""
    return unquote(segment)


ENVIRONMENT = jinja2.Environment(
    loader=jinja2.PackageLoader("pgjobs.dashboard", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
)
ENVIRONMENT.filters["queue_path"] = queue_path
