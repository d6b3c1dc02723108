"""A TCP forwarder on loopback that breaks the network between a client and PostgreSQL the ways
a real network breaks, for the reliability tests:

- ``blackhole()``: connections stop forwarding in both directions and are never closed (no
  FIN, no RST): a partition, a vanished host, a dropped NAT mapping. Both ends keep their TCP
  connection (the proxy's kernel still acknowledges), so only a client-side deadline notices.
- ``add_latency(low, high)``: every chunk waits a random time in that range before it is sent
  on (per direction, in order).
- ``drop_new``: connections accepted from now on are blackholed from the start.
- ``cut()``: every connection closed abruptly at both ends (a reset).

``connections`` lists the live ones, each with ``upstream_port`` (the port PostgreSQL sees as
the client's, ``pg_stat_activity.client_port``), to pick one to blackhole.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

CHUNK = 65536


@dataclass(eq=False)
class ProxiedConnection:
    client: tuple[asyncio.StreamReader, asyncio.StreamWriter]
    upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter]
    upstream_port: int
    silent: asyncio.Event = field(default_factory=asyncio.Event)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        for _, writer in (self.client, self.upstream):
            writer.transport.abort()


class FaultProxy:
    """``async with FaultProxy(dsn) as proxy``: ``proxy.dsn`` reaches ``dsn``'s server through
    the proxy (same user, database and parameters)."""

    def __init__(self, dsn: str) -> None:
        parts = urlsplit(dsn)
        assert parts.hostname and parts.port, f"a host:port DSN is needed, not {dsn!r}"
        self._parts = parts
        self._target = (parts.hostname, parts.port)
        self._server: asyncio.Server | None = None
        self.port = 0
        self.connections: list[ProxiedConnection] = []
        self.drop_new = False
        self._latency: tuple[float, float] | None = None

    async def __aenter__(self) -> FaultProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for connection in self.connections:
            connection.close()
        self.connections.clear()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._server.wait_closed(), 5)

    @property
    def dsn(self) -> str:
        user = f"{self._parts.username}@" if self._parts.username else ""
        netloc = f"{user}127.0.0.1:{self.port}"
        return urlunsplit(self._parts._replace(netloc=netloc))

    def blackhole(self, connections: list[ProxiedConnection] | None = None) -> int:
        """Silence ``connections`` (default: every live one) for good; how many."""
        chosen = list(self.connections if connections is None else connections)
        for connection in chosen:
            connection.silent.set()
        return len(chosen)

    def cut(self) -> None:
        """Close every connection abruptly at both ends (a reset): PostgreSQL ends their
        sessions, rolling back what they left open."""
        for connection in list(self.connections):
            connection.close()
        self.connections.clear()

    def by_upstream_port(self, ports: set[int]) -> list[ProxiedConnection]:
        return [c for c in self.connections if c.upstream_port in ports]

    def add_latency(self, low: float, high: float) -> None:
        self._latency = (low, high)

    def no_latency(self) -> None:
        self._latency = None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.transport.abort()
            return
        port = up_writer.get_extra_info("sockname")[1]
        connection = ProxiedConnection((reader, writer), (up_reader, up_writer), port)
        if self.drop_new:
            connection.silent.set()
        self.connections.append(connection)
        connection.tasks = [
            asyncio.create_task(self._pump(connection, reader, up_writer)),
            asyncio.create_task(self._pump(connection, up_reader, writer)),
        ]

    async def _pump(
        self,
        connection: ProxiedConnection,
        source: asyncio.StreamReader,
        sink: asyncio.StreamWriter,
    ) -> None:
        try:
            while True:
                if connection.silent.is_set():
                    await asyncio.Event().wait()  # never forward again, never close
                data = await source.read(CHUNK)
                if not data:
                    break
                if self._latency is not None:
                    await asyncio.sleep(random.uniform(*self._latency))
                if connection.silent.is_set():
                    await asyncio.Event().wait()
                sink.write(data)
                await sink.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            if not connection.silent.is_set():
                sink.transport.abort()
                with contextlib.suppress(ValueError):
                    self.connections.remove(connection)
