"""A real pgbouncer in transaction pooling mode in front of the suite's PostgreSQL, for the
tests of what most managed setups put between workers and the database. Debian's package
(``./run test`` installs it as root); fails with what to install when it is missing."""

from __future__ import annotations

import contextlib
import os
import pwd
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


def _user_for(socket_dir: str | None) -> str:
    """Whom pgbouncer runs as when started by root (it refuses to run as root): the owner of
    the server's socket directory, when the server listens on a socket in a directory only
    its own user may enter (the embedded server as root: its data directory, mode 0700, owned
    by the user it runs as); nobody otherwise."""
    if socket_dir is not None:
        with contextlib.suppress(OSError, KeyError):
            owner = os.stat(socket_dir).st_uid
            if owner != 0:
                return pwd.getpwuid(owner).pw_name
    return "nobody"


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
    workdir.chmod(0o755)  # as root, pgbouncer runs as another user (_user_for), who reads it
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
        command[1:1] = ["-u", _user_for(socket_dir)]
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
