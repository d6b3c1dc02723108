"""A real pgbouncer in transaction pooling mode in front of the suite's PostgreSQL, for the
tests of what most managed setups put between workers and the database. Debian's package
(``./run test`` installs it as root); fails with what to install when it is missing."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import parse_qs, urlsplit, urlunsplit

import pytest

CONFIG = """\
[databases]
* = host={host} port={port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {listen_port}
unix_socket_dir =
auth_type = trust
auth_file = {auth_file}
pool_mode = transaction
max_client_conn = 200
default_pool_size = 20
ignore_startup_parameters = extra_float_digits
"""


def _binary() -> str:
    found = shutil.which("pgbouncer") or next(
        (p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if os.access(p, os.X_OK)), None
    )
    if found is None:
        pytest.fail(
            "pgbouncer is not installed: these tests run the worker through a real one "
            "(Debian: apt-get install pgbouncer; ./run test installs it when run as root)",
            pytrace=False,
        )
    return found


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


@contextmanager
def pgbouncer(pg_dsn: str) -> Iterator[str]:
    """Run a pgbouncer (transaction mode) in front of ``pg_dsn``'s server; yields the DSN that
    reaches the same database and user through it."""
    parts = urlsplit(pg_dsn)
    # a socket directory (?host=/run/postgresql) serves as pgbouncer's host too
    socket_dir = parse_qs(parts.query).get("host", [None])[0]
    host, port = parts.hostname or socket_dir or "127.0.0.1", parts.port or 5432
    user = parts.username or "postgres"
    listen_port = _free_port()
    workdir = Path(tempfile.mkdtemp(prefix="pgjobs-pgbouncer-"))
    workdir.chmod(0o755)  # pgbouncer refuses to run as root: as root it runs as nobody
    auth_file = workdir / "userlist.txt"
    auth_file.write_text(f'"{user}" ""\n')
    config = workdir / "pgbouncer.ini"
    config.write_text(
        CONFIG.format(host=host, port=port, listen_port=listen_port, auth_file=auth_file)
    )
    for path in (auth_file, config):
        path.chmod(0o644)
    command = [_binary(), str(config)]
    if os.geteuid() == 0:
        command[1:1] = ["-u", "nobody"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 10
        while not _answers(listen_port):
            if process.poll() is not None or time.monotonic() > deadline:
                output = process.stdout.read().decode() if process.stdout else ""
                pytest.fail(f"pgbouncer did not start: {output.strip()}", pytrace=False)
            time.sleep(0.05)
        netloc = f"{user}@127.0.0.1:{listen_port}"
        yield urlunsplit((parts.scheme, netloc, parts.path, "", parts.fragment))
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
        shutil.rmtree(workdir, ignore_errors=True)
