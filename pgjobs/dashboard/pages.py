"""The dashboard's page templates (``templates/*.html``), autoescaped: job names, payloads,
errors and logs are user data, never markup."""

from __future__ import annotations

import jinja2

ENVIRONMENT = jinja2.Environment(
    loader=jinja2.PackageLoader("pgjobs.dashboard", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
)
