"""The differential harness: every case here runs twice, on the real ``bullmq`` package (3.4.4,
on Redis: the oracle) and on ``bullmq_compat`` (on PostgreSQL), through one fixture, ``bq``.

A case is written once against BullMQ's Python API, with the names ``bq.Queue``, ``bq.Worker``,
... (the real module's or the facade's), ``bq.opts`` as the options of every object it builds
(a connection and a prefix of the case's own) and ``bq.name()`` for queue names. It counts only
if it passes on the real package; it must then pass on the facade. Where a result depends on
timing, a case waits on events (``bq.wait_for``), never on a guessed sleep.

A module's ``FACADE_PENDING`` (``{test name: reason}``) lists its cases that real BullMQ passes
and the facade does not yet: each runs as a strict xfail on the facade (it must fail there until
fixed, then leave the list). Divergences kept on purpose are not here: they are facade-only
tests, with a row in PORTING.md.
"""

from __future__ import annotations

import asyncio
import time
import types
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import asyncpg
import pytest

from pgjobs import JobQueue, create_pool

T = TypeVar("T")

BACKENDS = ("bullmq", "facade")


@dataclass
class Bull:
    """One backend of a differential case: BullMQ's names, the options to build objects with,
    fresh queue names, and the objects to close after the case."""

    backend: str
    module: types.ModuleType
    opts: dict[str, Any]
    _closing: list[Any] = field(default_factory=list)

    @property
    def real(self) -> bool:
        """True on the real package (for the rare case that must read Redis itself)."""
        return self.backend == "bullmq"

    def __getattr__(self, name: str) -> Any:
        return getattr(self.module, name)

    def name(self, base: str = "q") -> str:
        return f"{base}-{uuid.uuid4().hex[:8]}"

    def options(self, **extra: Any) -> dict[str, Any]:
        """The case's connection and prefix, plus ``extra`` (BullMQ options)."""
        return {**self.opts, **extra}

    def queue(self, name: str | None = None, **extra: Any) -> Any:
        queue = self.module.Queue(self.name() if name is None else name, self.options(**extra))
        self._closing.append(queue)
        return queue

    def worker(self, name: str, processor: Any, **extra: Any) -> Any:
        """A Worker with a ``drainDelay`` of 1 s unless given (BullMQ's default is 5 s): on the
        real package, with redis-py's 5 s socket timeout, ``close()`` can miss the cancel of a
        blocking wait for jobs that has just begun, and a wait as long as the socket timeout is
        retried again and again, so the close never ends."""
        worker = self.module.Worker(name, processor, self.options(**{"drainDelay": 1, **extra}))
        self._closing.append(worker)
        return worker

    def flow_producer(self, **extra: Any) -> Any:
        producer = self.module.FlowProducer(self.options(**extra))
        self._closing.append(producer)
        return producer

    def queue_events(self, name: str, **extra: Any) -> Any:
        events = self.module.QueueEvents(name, self.options(**extra))
        self._closing.append(events)
        return events

    def closing(self, obj: T) -> T:
        """Close ``obj`` (anything with ``close()``) after the case."""
        self._closing.append(obj)
        return obj

    async def close_all(self) -> None:
        """Close what the case built, newest first; a Worker whose ``close()`` has not ended
        within 5 s is closed with ``force`` (the real package shields its close from
        cancellation, so a timeout alone cannot end it)."""
        for obj in reversed(self._closing):
            try:
                await close_bounded(obj)
            except Exception:  # a case may have closed it, or left it broken
                pass
        self._closing.clear()


async def close_bounded(obj: Any, grace: float = 5.0) -> None:
    """``await obj.close()``; for a Worker still closing after ``grace`` seconds,
    ``close(force=True)`` as well."""
    closing = asyncio.ensure_future(obj.close())
    done, _ = await asyncio.wait({closing}, timeout=grace)
    if not done and hasattr(obj, "cancelAllJobs"):
        await asyncio.wait_for(obj.close(force=True), 30)
    await asyncio.wait_for(closing, 30)


def future_of(emitter: Any, event: str, count: int = 1) -> asyncio.Future[list[tuple[Any, ...]]]:
    """A future that resolves with the arguments of the first ``count`` ``event``s of
    ``emitter`` (a Worker or QueueEvents of either backend)."""
    future: asyncio.Future[list[tuple[Any, ...]]] = asyncio.get_running_loop().create_future()
    seen: list[tuple[Any, ...]] = []

    def listener(*args: Any) -> None:
        seen.append(args)
        if len(seen) >= count and not future.done():
            future.set_result(list(seen))

    emitter.on(event, listener)
    return future


async def wait_for(awaitable: Awaitable[T], timeout: float = 20.0) -> T:
    """``awaitable``, failing the case (not hanging it) if it does not come within ``timeout``."""
    return await asyncio.wait_for(awaitable, timeout)


async def eventually(
    probe: Callable[[], Awaitable[T]], *, timeout: float = 20.0, interval: float = 0.02
) -> T:
    """Call ``probe`` until it returns a truthy value; fail with the last value at the deadline
    (for state that no event announces)."""
    deadline = time.monotonic() + timeout
    while True:
        value = await probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s (last value: {value!r})")
        await asyncio.sleep(interval)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/conformance/" not in item.nodeid:
            continue
        item.add_marker(pytest.mark.conformance)
        callspec = getattr(item, "callspec", None)
        if callspec is None or callspec.params.get("bq") != "facade":
            continue
        pending: dict[str, str] = getattr(getattr(item, "module", None), "FACADE_PENDING", {})
        reason = pending.get(item.name.split("[", 1)[0])
        if reason is not None:
            item.add_marker(pytest.mark.xfail(reason=f"facade pending: {reason}", strict=True))


@pytest.fixture(params=BACKENDS)
async def bq(request: pytest.FixtureRequest, redis_url: str, pg_dsn: str) -> AsyncIterator[Bull]:
    prefix = f"c{uuid.uuid4().hex[:10]}"
    if request.param == "bullmq":
        import bullmq

        bull = Bull("bullmq", bullmq, {"connection": redis_url, "prefix": prefix})
        try:
            yield bull
        finally:
            await bull.close_all()
            await _delete_redis_keys(redis_url, prefix)
        return
    import bullmq_compat

    schema = f"c_{uuid.uuid4().hex[:16]}"
    pool = await create_pool(pg_dsn, min_size=1, max_size=12)
    jobs = await JobQueue.connect(pool=pool, schema=schema)
    await jobs.migrate()
    bull = Bull("facade", bullmq_compat, {"connection": jobs, "prefix": prefix})
    try:
        yield bull
    finally:
        await bull.close_all()
        # Close the case's pool before dropping its schema, so that nothing the case left
        # running can write into the schema while it is dropped.
        try:
            await asyncio.wait_for(pool.close(), 10)
        except TimeoutError:
            pool.terminate()
        dropper = await asyncpg.connect(pg_dsn)
        try:
            await asyncio.wait_for(dropper.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE"), 30)
        finally:
            await dropper.close()


async def _delete_redis_keys(redis_url: str, prefix: str) -> None:
    import redis.asyncio as aioredis

    client = aioredis.from_url(redis_url)
    try:
        async for key in client.scan_iter(match=f"{prefix}:*", count=1000):
            await client.delete(key)
    finally:
        await client.aclose()
