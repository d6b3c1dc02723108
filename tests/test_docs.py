"""The documentation site: it builds with warnings as errors (broken links, missing API
references), and the code examples of its pages that are marked to run do run.

A page marks an example with an HTML comment on the line before its fence,
``<!-- docs-test: run -->``; the example runs as a script, in a fresh interpreter, against the
test database (``PGJOBS_DSN``), and must exit 0. An example writes into a schema of its own
name, dropped here afterwards.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import asyncpg
import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
MARK = "<!-- docs-test: run -->"
EXAMPLE = re.compile(re.escape(MARK) + r"\n```python\n(.*?)\n```", re.DOTALL)


def runnable_examples() -> list[tuple[str, str]]:
    found = []
    for page in sorted(DOCS.rglob("*.md")):
        text = page.read_text(encoding="utf-8")
        blocks = EXAMPLE.findall(text)
        assert len(blocks) == text.count(MARK), f"{page}: a {MARK} not followed by a python block"
        found += [(f"{page.relative_to(DOCS)}#{n}", code) for n, code in enumerate(blocks, 1)]
    return found


@pytest.mark.slow
def test_the_site_builds_strict(tmp_path: Path) -> None:
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent)) or shutil.which("mkdocs")
    if mkdocs is None:
        pytest.fail("mkdocs is not installed: pip install -e '.[docs]' (./run installs it)")
    done = subprocess.run(
        [mkdocs, "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-5000:]
    assert (tmp_path / "site" / "index.html").exists()


def test_getting_started_has_a_runnable_example() -> None:
    assert any(name.startswith("getting-started.md") for name, _ in runnable_examples())


@pytest.mark.slow
@pytest.mark.parametrize(("name", "code"), runnable_examples(), ids=lambda v: v.split("\n")[0])
async def test_example_runs(name: str, code: str, pg_dsn: str, tmp_path: Path) -> None:
    schemas = set(re.findall(r'schema="([a-z_][a-z0-9_]*)"', code))
    script = tmp_path / "example.py"
    script.write_text(code, encoding="utf-8")
    try:
        done = subprocess.run(
            [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True,
            timeout=90, env={**os.environ, "PGJOBS_DSN": pg_dsn},
        )  # fmt: skip
        assert done.returncode == 0, f"{name}\n{done.stdout}\n{done.stderr[-5000:]}"
    finally:
        conn = await asyncpg.connect(pg_dsn)
        try:
            for schema in schemas:
                await conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        finally:
            await conn.close()
