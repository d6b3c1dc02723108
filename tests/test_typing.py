"""What a type checker sees of the public API: a misspelt enqueue or worker option (an engine
keyword or a key of a facade option dict) is an error in user code under ``mypy --strict``,
and every package ships its ``py.typed`` marker."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

USER_CODE = textwrap.dedent(
    """
    import bullmq_compat
    import migration_tools
    from pgjobs import JobQueue


    async def main(jobs: JobQueue) -> None:
        await jobs.enqueue("email", {}, priority=1, delay=5.0)
        await jobs.enqueue("email", {}, priorty=1)
        jobs.worker(concurrency=2, queues=["emails"])
        jobs.worker(concurency=2)
        queue = bullmq_compat.Queue("q", {"prefix": "app", "durability": "async"})
        await queue.add("x", {}, {"attempts": 3, "backoff": {"type": "fixed", "delay": 10}})
        await queue.add("x", {}, {"attemps": 3})
        await queue.addBulk([{"name": "x", "data": {}, "opts": {"priority": 1}}])
        bullmq_compat.Worker("q", None, {"concurrency": 2, "lockDuration": 30000})
        bullmq_compat.Worker("q", None, {"concurency": 2})
        print(migration_tools.ExitCode.OK)
    """
)


def test_mypy_strict_on_user_code_catches_misspelt_options(tmp_path: Path) -> None:
    (tmp_path / "user_code.py").write_text(USER_CODE)
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent",
         "--no-incremental", "user_code.py"],
        cwd=tmp_path, env={**os.environ, "MYPYPATH": str(ROOT)}, capture_output=True,
        text=True, timeout=300,
    )  # fmt: skip
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 4, done.stdout
    assert 'Unexpected keyword argument "priorty" for "enqueue"' in errors[0]
    assert 'Unexpected keyword argument "concurency" for "worker"' in errors[1]
    assert "user_code.py:14:" in errors[2] and '"JobOptions | None"' in errors[2]  # attemps
    assert "user_code.py:17:" in errors[3] and '"WorkerOptions | None"' in errors[3]  # concurency


def test_every_package_ships_its_typed_marker() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    for package in ("pgjobs", "bullmq_compat", "migration_tools"):
        assert (ROOT / package / "py.typed").is_file(), package
        assert f'{package} = ["py.typed"' in pyproject, package
