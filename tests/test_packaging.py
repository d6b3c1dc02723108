"""The package as a registry and a stranger get it: ``python -m build`` makes an sdist and a
wheel from it that ``twine check --strict`` accepts, and the wheel, installed by pip into a
fresh venv (dependencies from the package index), migrates a database, serves the dashboard's
pages and runs both demos from outside the source tree: the SQL, the templates and the static
files are inside it. The engine alone installs no Redis client (the ``migration`` extra does).

It builds from a copy of the files the sdist takes, so the working tree is left untouched.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import asyncpg
import pytest

from pgjobs import sql

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "pgjobs", "bullmq_compat", "migration_tools")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

# Run by the installed venv's python, with the source tree out of its path: the package's own
# files, the dashboard's pages through the ASGI app, and no Redis client.
_CHECK = textwrap.dedent(
    """
    import asyncio, importlib.resources, importlib.util, os, sys
    import pgjobs
    from pgjobs import JobQueue
    from pgjobs.dashboard import create_app

    assert "site-packages" in pgjobs.__file__, pgjobs.__file__
    assert importlib.util.find_spec("redis") is None, "the engine pulled in a Redis client"
    files = importlib.resources.files("pgjobs")
    assert files.joinpath("sql/migrations/0001_baseline.sql").is_file()
    assert files.joinpath("sql/migrations/0003_worker_limiter.sql").is_file()
    assert files.joinpath("sql/schema/claim_jobs.sql").is_file()
    assert files.joinpath("dashboard/templates/base.html").is_file()
    assert files.joinpath("dashboard/static/live.js").is_file()

    async def get(app, path):
        sent = []

        async def receive():
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message):
            sent.append(message)

        scope = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
            "method": "GET", "scheme": "http", "path": path, "raw_path": path.encode(),
            "query_string": b"", "root_path": "", "headers": [(b"host", b"test")],
            "client": ("127.0.0.1", 1), "server": ("test", 80),
        }
        await app(scope, receive, send)
        body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
        return sent[0]["status"], body

    async def main():
        async with await JobQueue.connect(os.environ["PGJOBS_DSN"], schema=sys.argv[1]) as jobs:
            await jobs.check_schema()
            app = create_app(jobs)
            for path in ("/", "/static/live.js", "/workers", "/schedules"):
                status, body = await get(app, path)
                assert status == 200 and body, (path, status, body[:300])

    asyncio.run(main())
    print("installed package checked")
    """
)


def _run(args: list[str | Path], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, f"{args} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def test_the_built_wheel_installs_migrates_and_runs_the_demos(tmp_path: Path, pg_dsn: str) -> None:
    src = tmp_path / "src"
    for name in SOURCES:
        origin = ROOT / name
        if origin.is_dir():
            shutil.copytree(origin, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            src.mkdir(exist_ok=True)
            shutil.copy2(origin, src / name)
    dist = tmp_path / "dist"
    # The sdist first, then the wheel built from it: what a registry gets, and what it proves.
    _run([sys.executable, "-m", "build", "--outdir", dist, src], cwd=tmp_path)
    (wheel,) = dist.glob("*.whl")
    (sdist,) = dist.glob("*.tar.gz")
    _run([sys.executable, "-m", "twine", "check", "--strict", wheel, sdist], cwd=tmp_path)

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", venv], cwd=tmp_path)
    python = venv / "bin" / "python"
    _run([python, "-m", "pip", "install", "--quiet", f"{wheel}[dashboard]"], cwd=tmp_path)

    work = tmp_path / "elsewhere"  # outside the repository, so only the installed code runs
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PGJOBS_DSN"] = pg_dsn
    schema = f"t_pkg_{uuid.uuid4().hex[:10]}"
    try:
        out = _run(
            [venv / "bin" / "pgjobs", "migrate", "--dsn", pg_dsn, "--schema", schema], work, env
        )
        every = [version for version, _, _ in sql.migrations()]  # the wheel holds them all
        assert f"applied migrations {every} to {schema}" in out
        (work / "check.py").write_text(_CHECK, encoding="utf-8")
        assert "installed package checked" in _run([python, "check.py", schema], work, env)
        for example in ("quickstart.py", "tsundoku_port.py"):
            shutil.copy2(ROOT / "examples" / example, work / example)
            _run([python, example], work, env)
    finally:

        async def drop() -> None:
            conn = await asyncpg.connect(pg_dsn)
            await conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
            await conn.close()

        asyncio.run(drop())
