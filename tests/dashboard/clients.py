"""An HTTP client on the dashboard app, and the CSRF token of a page's action forms."""

from __future__ import annotations

import re
from typing import Any

import httpx

from pgjobs import JobQueue
from pgjobs.dashboard import create_app


def client_for(jobs: JobQueue, **options: Any) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=create_app(jobs, **options))
    return httpx.AsyncClient(transport=transport, base_url="http://dash")


def csrf_of(page: httpx.Response) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found, "no action form on the page"
    return found.group(1)
