"""The facade's tests run on the test's own migrated schema, through its JobQueue (a pool the
facade never closes); tests of the facade's own pools pass a DSN instead."""

from __future__ import annotations

from typing import Any

import pytest

from pgjobs import JobQueue


@pytest.fixture
def opts(jobs: JobQueue) -> dict[str, Any]:
    return {"connection": jobs}


@pytest.fixture
def dsn_opts(jobs: JobQueue, pg_dsn: str, schema_name: str) -> dict[str, Any]:
    """Options that make the facade open (and close) pools of its own on the test schema."""
    return {"connection": pg_dsn, "schema": schema_name}
