"""A dashboard for pgjobs queues, flows and jobs (needs the ``dashboard`` extra):
``create_app(jobs, read_only=..., tenant_resolver=...)`` is an ASGI app."""

from pgjobs.dashboard.app import create_app

__all__ = ["create_app"]
