"""How pgjobs notices that a connection to PostgreSQL has gone silent.

Two layers, because each one sees what the other cannot:

- **TCP keepalives and ``TCP_USER_TIMEOUT``** on every connection pgjobs opens. The kernel
  probes an idle connection and gives up on data left unacknowledged, so a dead peer (a host
  gone, a partition, a dropped NAT mapping) fails the connection within about
  ``tcp_user_timeout`` seconds, whatever statement waits on it, long ones included. The
  server's own ``tcp_keepalives_*`` settings protect only the server's side.
- **Client-side deadlines** on statements (executor.py): a middlebox that keeps the TCP
  connection alive while forwarding nothing (a proxy, a pooler, a load balancer) is invisible
  to the kernel. A statement that misses its deadline has its connection closed, and the
  caller gets ``DatabaseTimeout``; the engine's loops retry on a new connection.

``Timeouts`` holds both; a DSN may also carry libpq's names for the TCP settings
(``connect_timeout``, ``keepalives``, ``keepalives_idle``, ``keepalives_interval``,
``keepalives_count``, ``tcp_user_timeout`` in milliseconds), which asyncpg does not know:
``split_dsn`` takes them out before asyncpg reads the DSN.
"""

from __future__ import annotations

import dataclasses
import math
import socket
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import asyncpg

from pgjobs.errors import InvalidOption

LIBPQ_TCP_PARAMETERS = {
    "connect_timeout": "connect",
    "keepalives": "keepalives",
    "keepalives_idle": "keepalive_idle",
    "keepalives_interval": "keepalive_interval",
    "keepalives_count": "keepalive_count",
    "tcp_user_timeout": "tcp_user_timeout",
}
"""libpq's connection parameters for TCP, and the ``Timeouts`` field each one sets."""


@dataclass(frozen=True, slots=True)
class Timeouts:
    """How long pgjobs waits on the network before it judges a connection dead. The defaults
    suit a LAN and a cloud region alike: a healthy statement answers in milliseconds, and a
    silent connection is given up within seconds rather than the kernel's 15 minutes.

    ``JobQueue.connect(timeouts=...)``; a DSN's libpq parameters override the TCP fields.
    """

    statement: float | None = 30.0
    """Seconds one statement of the API (an enqueue, a read, an operation on a job) may go
    unanswered before its connection is closed and ``DatabaseTimeout`` raised. Statements whose
    work grows with their input or with history (bulk enqueues, imports, purges, GC, the
    counts and lists of the tracking API) have none: keepalives bound them. None: no deadline."""
    loop: float = 10.0
    """The same for each statement of the background loops: a worker's claims, heartbeats,
    outcome writes and presence reports, LISTEN probes, schedulers and event streams. A worker
    never waits longer than its lease, nor on a heartbeat longer than its heartbeat interval, so
    that a second try on a new connection still lands inside the lease."""
    connect: float = 10.0
    """Seconds to open a connection (TCP, TLS, authentication)."""
    keepalives: bool = True
    """Whether connections carry TCP keepalives and ``TCP_USER_TIMEOUT`` (TCP connections only;
    a Unix socket has no network to lose)."""
    keepalive_idle: float = 10.0
    """Seconds of silence before the kernel first probes a connection."""
    keepalive_interval: float = 5.0
    """Seconds between two unanswered probes."""
    keepalive_count: int = 3
    """Unanswered probes after which the connection is dead."""
    tcp_user_timeout: float | None = None
    """Seconds that sent data (or probes) may stay unacknowledged before the kernel closes the
    connection. None: ``keepalive_idle + keepalive_interval * keepalive_count`` (25 s)."""

    def __post_init__(self) -> None:
        for name in ("statement", "loop", "connect", "keepalive_idle", "keepalive_interval",
                     "tcp_user_timeout"):  # fmt: skip
            value = getattr(self, name)
            if value is None and name in ("statement", "tcp_user_timeout"):
                continue
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or value <= 0
            ):
                raise InvalidOption(f"timeouts.{name}", f"must be seconds > 0, got {value!r}")
        count = self.keepalive_count
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise InvalidOption(
                "timeouts.keepalive_count", f"must be an integer >= 1, got {count!r}"
            )
        if not isinstance(self.keepalives, bool):
            raise InvalidOption(
                "timeouts.keepalives", f"must be True or False, got {self.keepalives!r}"
            )

    @property
    def user_timeout(self) -> float:
        """``tcp_user_timeout``, or what the keepalive settings add up to."""
        if self.tcp_user_timeout is not None:
            return self.tcp_user_timeout
        return self.keepalive_idle + self.keepalive_interval * self.keepalive_count

    @classmethod
    def of(cls, value: Timeouts | dict[str, Any] | None) -> Timeouts:
        """``value`` as Timeouts: itself, the defaults for None, or built from a dict of its
        fields (a field it does not know is an error that names it)."""
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if isinstance(value, dict):
            known = {f.name for f in dataclasses.fields(cls)}
            unknown = sorted(set(value) - known)
            if unknown:
                raise InvalidOption(
                    "timeouts", f"unknown field(s) {unknown}; known: {sorted(known)}"
                )
            return cls(**value)
        raise InvalidOption(
            "timeouts", f"must be a pgjobs.Timeouts or a dict, got {type(value).__name__}"
        )


def split_dsn(dsn: str | None, timeouts: Timeouts) -> tuple[str | None, Timeouts]:
    """``dsn`` without libpq's TCP parameters, and ``timeouts`` with their values (libpq's
    units: seconds, and milliseconds for ``tcp_user_timeout``). A value that is not a number
    is an error naming the parameter."""
    if not dsn or "?" not in dsn:
        return dsn, timeouts
    parts = urlsplit(dsn)
    kept: list[tuple[str, str]] = []
    found: dict[str, Any] = {}
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        field = LIBPQ_TCP_PARAMETERS.get(key)
        if field is None:
            kept.append((key, value))
            continue
        try:
            number = float(value)
        except ValueError:
            raise InvalidOption(f"dsn {key}", f"must be a number, got {value!r}") from None
        if field == "keepalives":
            found[field] = number != 0
        elif field == "keepalive_count":
            found[field] = int(number)
        elif field == "tcp_user_timeout":
            found[field] = number / 1000 if number > 0 else None  # libpq: 0 is the OS default
        elif field == "connect" and number <= 0:
            continue  # libpq: 0 or less waits for ever; keep ours
        else:
            found[field] = number
    if not found:
        return dsn, timeouts
    stripped = urlunsplit(parts._replace(query=urlencode(kept)))
    return stripped, dataclasses.replace(timeouts, **found)


def tune_socket(connection: Any, timeouts: Timeouts) -> None:
    """Give ``connection`` (asyncpg's) TCP keepalives and ``TCP_USER_TIMEOUT`` as ``timeouts``
    says; nothing for a Unix socket, or where the platform lacks an option. It reads asyncpg's
    transport (``_transport``), as pool.py reads its internals."""
    if not timeouts.keepalives:
        return
    transport = getattr(connection, "_transport", None)
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    options = (
        ("TCP_KEEPIDLE", max(1, round(timeouts.keepalive_idle))),
        ("TCP_KEEPALIVE", max(1, round(timeouts.keepalive_idle))),  # macOS's name for it
        ("TCP_KEEPINTVL", max(1, round(timeouts.keepalive_interval))),
        ("TCP_KEEPCNT", timeouts.keepalive_count),
        ("TCP_USER_TIMEOUT", max(1, round(timeouts.user_timeout * 1000))),
    )
    for name, value in options:
        option = getattr(socket, name, None)
        if option is not None:
            sock.setsockopt(socket.IPPROTO_TCP, option, value)


def connector(timeouts: Timeouts, connect: Any = None) -> Any:
    """A ``connect`` for ``asyncpg.create_pool``: asyncpg's (or ``connect``), bounded by
    ``timeouts.connect``, then the socket tuned."""
    opener = connect or asyncpg.connect

    async def open_connection(*args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("timeout", timeouts.connect)
        connection = await opener(*args, **kwargs)
        tune_socket(connection, timeouts)
        return connection

    return open_connection


async def connect(dsn: str, timeouts: Timeouts | None = None, **kwargs: Any) -> Any:
    """A single connection (a LISTEN session of its own, the migration's), with the DSN's libpq
    parameters applied, the connect bounded and the socket tuned."""
    stripped, resolved = split_dsn(dsn, Timeouts.of(timeouts))
    return await connector(resolved)(stripped, **kwargs)
