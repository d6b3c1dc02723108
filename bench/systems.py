"""The systems under test. Each implements the same workloads on its own fresh schema.

Add a peer (BullMQ on Redis, PgQueuer, the facade...) by adding a class with these methods.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from typing import Any, Protocol

import asyncpg
import pydantic

from pgjobs import Flow, JobContext, JobQueue, JobSpec, Registry, create_pool


class System(Protocol):
    name: str

    async def setup(self, dsn: str) -> None: ...
    async def teardown(self) -> None: ...
    async def enqueue_single(self, n: int) -> float: ...
    async def enqueue_concurrent(self, n: int, tasks: int) -> float: ...
    async def enqueue_bulk(self, n: int, batch: int) -> float: ...
    async def process(self, n: int, concurrency: int) -> float: ...
    async def latency(self, samples: int) -> tuple[float, float]: ...
    async def flow_add(self, flows: int, children: int) -> float: ...
    async def flow_process(self, flows: int, children: int) -> float: ...
    async def storage(self) -> tuple[float, float]:
        """(dead tuples, MiB) of the system's tables right after ``process``."""
        ...


async def truncate_schema(dsn: str, schema: str) -> None:
    """Empty every table of ``schema`` (if it exists yet) but its schema bookkeeping (BullMQ's
    ``migration``, pgjobs' ``migrations`` and ``schema_definitions``): each workload starts
    from empty tables, as the engine's does, so storage figures are about that workload alone."""
    conn = await asyncpg.connect(dsn)
    try:
        tables = await conn.fetch(
            "SELECT format('%I.%I', schemaname, tablename) AS t FROM pg_tables"
            " WHERE schemaname = $1"
            " AND tablename NOT IN ('migration', 'migrations', 'schema_definitions')",
            schema,
        )
        if tables:
            await conn.execute("TRUNCATE " + ", ".join(r["t"] for r in tables) + " CASCADE")
    finally:
        await conn.close()


async def pg_storage(dsn: str, schema: str, table: str | None = None) -> tuple[float, float]:
    """Dead tuples and total size (indexes and TOAST included) of the tables of ``schema`` (or
    of one table) as they are now. Dead tuples are counted exactly with the pgstattuple
    extension (created if the role may; the cumulative statistics lag by up to ten seconds),
    else read from pg_stat_user_tables."""
    conn = await asyncpg.connect(dsn)
    try:
        exact = await conn.fetchval(
            "SELECT EXISTS (SELECT FROM pg_available_extensions WHERE name = 'pgstattuple')"
        )
        if exact:
            try:
                await conn.execute("CREATE EXTENSION IF NOT EXISTS pgstattuple")
            except asyncpg.InsufficientPrivilegeError:
                exact = False
        dead = "(pgstattuple(relid)).dead_tuple_count" if exact else "n_dead_tup"
        row = await conn.fetchrow(
            f"SELECT coalesce(sum({dead}), 0) AS dead,"
            " coalesce(sum(pg_total_relation_size(relid)), 0) AS bytes"
            " FROM pg_stat_user_tables WHERE schemaname = $1 AND ($2::text IS NULL OR relname = $2)",
            schema,
            table,
        )
    finally:
        await conn.close()
    return float(row["dead"]), float(row["bytes"]) / 2**20


class Noop(pydantic.BaseModel):
    i: int


class Engine:
    """pgjobs natively: typed kind, JobQueue.enqueue / enqueue_many, Worker."""

    name = "pgjobs engine"
    durability = "durable"

    async def setup(self, dsn: str) -> None:
        self.registry = Registry()
        self.started: dict[int, float] = {}
        self.start_event = asyncio.Event()

        @self.registry.kind("noop", input=Noop, queue="bench")
        async def noop(ctx: JobContext, data: Noop) -> None:
            if data.i < 0:
                self.started[-data.i] = time.perf_counter()
                self.start_event.set()

        self.dsn = dsn
        self.pool = await create_pool(dsn, min_size=4, max_size=20)
        self.schema = f"bench_{uuid.uuid4().hex[:8]}"
        self.jobs = await JobQueue.connect(
            pool=self.pool, schema=self.schema, registry=self.registry, durability=self.durability
        )
        await self.jobs.migrate()

    async def storage(self) -> tuple[float, float]:
        return await pg_storage(self.dsn, self.schema)

    async def teardown(self) -> None:
        await self.pool.execute(f"DROP SCHEMA {self.schema} CASCADE")
        await self.pool.close()

    async def _reset(self) -> None:
        await self.pool.execute(f"TRUNCATE {self.schema}.jobs CASCADE")

    async def enqueue_single(self, n: int) -> float:
        await self._reset()
        start = time.perf_counter()
        for i in range(n):
            await self.jobs.enqueue("noop", {"i": i})
        return n / (time.perf_counter() - start)

    async def enqueue_concurrent(self, n: int, tasks: int) -> float:
        await self._reset()

        async def producer(count: int) -> None:
            for i in range(count):
                await self.jobs.enqueue("noop", {"i": i})

        start = time.perf_counter()
        await asyncio.gather(*(producer(n // tasks) for _ in range(tasks)))
        return n / (time.perf_counter() - start)

    async def enqueue_bulk(self, n: int, batch: int) -> float:
        """With ``enqueue_batch``, the engine's API for many jobs of one kind and options
        (``enqueue_many`` of option-less JobSpecs takes the same statement, after building a
        spec per job)."""
        await self._reset()
        start = time.perf_counter()
        for offset in range(0, n, batch):
            await self.jobs.enqueue_batch("noop", ({"i": i} for i in range(offset, offset + batch)))
        return n / (time.perf_counter() - start)

    async def process(self, n: int, concurrency: int) -> float:
        await self._reset()
        for offset in range(0, n, 1000):
            await self.jobs.enqueue_many(
                JobSpec("noop", {"i": i}) for i in range(offset, offset + 1000)
            )
        await self.pool.execute(f"VACUUM ANALYZE {self.schema}.jobs")
        worker = self.jobs.worker(concurrency=concurrency)
        start = time.perf_counter()
        await worker.run(until_drained=True)
        elapsed = time.perf_counter() - start
        assert worker.stats.completed == n, worker.stats
        return n / elapsed

    async def latency(self, samples: int) -> tuple[float, float]:
        await self._reset()
        worker = self.jobs.worker(concurrency=1)
        worker.start()
        await asyncio.sleep(0.2)  # let it reach its idle wait: we measure an *idle* worker
        delays = []
        for k in range(1, samples + 1):
            self.start_event.clear()
            sent = time.perf_counter()
            await self.jobs.enqueue("noop", {"i": -k})
            await asyncio.wait_for(self.start_event.wait(), 10)
            delays.append(self.started[k] - sent)
            await asyncio.sleep(0.005)  # the worker goes idle again between samples
        await worker.stop()
        return _median_p95(delays)

    async def _add_flows(self, flows: int, children: int) -> None:
        for f in range(flows):
            flow = Flow()
            flow.add("parent", "noop", {"i": f})
            for c in range(children):
                flow.add(f"c{c}", "noop", {"i": c})
                flow.edge(f"c{c}", "parent")
            await self.jobs.submit_flow(flow)

    async def flow_add(self, flows: int, children: int) -> float:
        await self._reset()
        start = time.perf_counter()
        await self._add_flows(flows, children)
        return flows / (time.perf_counter() - start)

    async def flow_process(self, flows: int, children: int) -> float:
        await self._reset()
        await self._add_flows(flows, children)
        worker = self.jobs.worker(concurrency=10)
        start = time.perf_counter()
        await worker.run(until_drained=True)
        elapsed = time.perf_counter() - start
        assert worker.stats.completed == flows * (children + 1), worker.stats
        return flows * (children + 1) / elapsed


class EngineAsync(Engine):
    """The engine with ``durability="async"``: enqueues, flows and outcomes commit without
    waiting for the WAL flush (Redis' ``appendfsync everysec`` class of guarantee)."""

    name = "pgjobs engine, async"
    durability = "async"


def _median_p95(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return statistics.median(ordered) * 1000, ordered[int(len(ordered) * 0.95) - 1] * 1000


FLOOR_DDL = """
CREATE TABLE {t} (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, queue text NOT NULL,
                  payload jsonb NOT NULL, status text NOT NULL DEFAULT 'pending',
                  priority int NOT NULL DEFAULT 0, run_at timestamptz NOT NULL DEFAULT now());
CREATE INDEX ON {t} (queue, priority DESC, run_at, id) WHERE status = 'pending';
"""


class RawFloor:
    """The best a PostgreSQL queue can do here: plain INSERTs, one loop of batched claim
    (100 per statement, SKIP LOCKED) + batched ack, and a bare INSERT + NOTIFY hand-off for
    the latency. No framework at all."""

    name = "raw asyncpg floor"

    async def setup(self, dsn: str) -> None:
        self.dsn = dsn
        self.pool = await asyncpg.create_pool(dsn, min_size=4, max_size=20)
        self.table = f"floor_{uuid.uuid4().hex[:8]}"
        await self.pool.execute(FLOOR_DDL.format(t=self.table))
        self.insert = (
            f"INSERT INTO {self.table} (queue, payload) VALUES ($1, $2::text::jsonb) RETURNING id"
        )

    async def teardown(self) -> None:
        await self.pool.execute(f"DROP TABLE {self.table}")
        await self.pool.close()

    async def storage(self) -> tuple[float, float]:
        return await pg_storage(self.dsn, "public", self.table)

    async def _reset(self) -> None:
        await self.pool.execute(f"TRUNCATE {self.table}")

    async def enqueue_single(self, n: int) -> float:
        await self._reset()
        start = time.perf_counter()
        await self._producer(n)
        return n / (time.perf_counter() - start)

    async def _producer(self, count: int) -> None:
        """``count`` one-row INSERTs on one connection: asyncpg's pool would add a reset
        query (a second round trip) to each, which a floor must not pay."""
        async with self.pool.acquire() as conn:
            for i in range(count):
                await conn.fetchval(self.insert, "bench", f'{{"i": {i}}}')

    async def enqueue_concurrent(self, n: int, tasks: int) -> float:
        await self._reset()
        start = time.perf_counter()
        await asyncio.gather(*(self._producer(n // tasks) for _ in range(tasks)))
        return n / (time.perf_counter() - start)

    async def _bulk(self, start_i: int, batch: int) -> None:
        await self.pool.execute(
            f"INSERT INTO {self.table} (queue, payload) SELECT 'bench', p::jsonb FROM unnest($1::text[]) p",
            [f'{{"i": {i}}}' for i in range(start_i, start_i + batch)],
        )

    async def enqueue_bulk(self, n: int, batch: int) -> float:
        await self._reset()
        start = time.perf_counter()
        for offset in range(0, n, batch):
            await self._bulk(offset, batch)
        return n / (time.perf_counter() - start)

    async def process(self, n: int, concurrency: int) -> float:
        await self._reset()
        for offset in range(0, n, 1000):
            await self._bulk(offset, 1000)
        await self.pool.execute(f"VACUUM ANALYZE {self.table}")
        claim = f"""
            WITH picked AS (SELECT id FROM {self.table} WHERE status = 'pending' AND queue = 'bench'
                            AND run_at <= now() ORDER BY priority DESC, run_at, id LIMIT 100
                            FOR UPDATE SKIP LOCKED)
            UPDATE {self.table} t SET status = 'running' FROM picked WHERE t.id = picked.id
            RETURNING t.id, t.payload"""
        ack = f"UPDATE {self.table} SET status = 'done' WHERE id = ANY($1::bigint[])"
        done = 0
        start = time.perf_counter()
        async with self.pool.acquire() as conn:
            while True:
                rows = await conn.fetch(claim)
                if not rows:
                    break
                await conn.execute(ack, [r["id"] for r in rows])
                done += len(rows)
        assert done == n
        return n / (time.perf_counter() - start)

    async def latency(self, samples: int) -> tuple[float, float]:
        """A hand-off with nothing around it, the bound of every PostgreSQL queue's
        enqueue-to-start: one statement writes the job already taken (status 'running') and
        notifies a channel with its id; a session of its own LISTENs there, and the sample
        ends when its callback runs (no claim, no handler, no bookkeeping). Idle between
        samples as the other systems' workers are."""
        await self._reset()
        channel = self.table
        arrived = asyncio.Event()
        stamps: dict[int, float] = {}

        def on_notify(_conn: Any, _pid: int, _channel: str, payload: str) -> None:
            stamps[int(payload)] = time.perf_counter()
            arrived.set()

        hand_off = (
            f"WITH job AS (INSERT INTO {self.table} (queue, payload, status)"
            " VALUES ($1, $2::text::jsonb, 'running') RETURNING id)"
            " SELECT job.id FROM job, pg_notify($3, job.id::text)"
        )
        listener = await asyncpg.connect(self.dsn)
        try:
            await listener.add_listener(channel, on_notify)
            delays = []
            async with self.pool.acquire() as conn:
                await asyncio.sleep(0.2)
                for k in range(samples):
                    arrived.clear()
                    sent = time.perf_counter()
                    job_id = await conn.fetchval(hand_off, "bench", f'{{"i": {-k}}}', channel)
                    await asyncio.wait_for(arrived.wait(), 10)
                    delays.append(stamps[job_id] - sent)
                    await asyncio.sleep(0.005)
        finally:
            await listener.close()
        return _median_p95(delays)

    async def flow_add(self, flows: int, children: int) -> float:
        return float("nan")  # a floor has no dependencies

    async def flow_process(self, flows: int, children: int) -> float:
        return float("nan")


class RawFloorAsync(RawFloor):
    """The raw floor's enqueues on sessions that commit without waiting for the WAL flush
    (synchronous_commit off, the async systems' durability): what a one-row INSERT costs a
    PostgreSQL queue at that level, and its hand-off's latency. The enqueue workloads and
    the latency."""

    name = "raw floor, async"

    async def setup(self, dsn: str) -> None:
        await super().setup(dsn)
        await self.pool.close()
        self.pool = await asyncpg.create_pool(
            dsn, min_size=4, max_size=20, server_settings={"synchronous_commit": "off"}
        )

    async def process(self, n: int, concurrency: int) -> float:
        return float("nan")

    async def storage(self) -> tuple[float, float]:
        return (float("nan"), float("nan"))


class RawCopyFloor(RawFloor):
    """The raw floor's bulk written with COPY (asyncpg's binary copy_records_to_table) instead
    of INSERT ... SELECT: the floor the bulk workload is measured against. Only bulk."""

    name = "raw COPY floor"

    async def _bulk(self, start_i: int, batch: int) -> None:
        await self.pool.copy_records_to_table(
            self.table,
            records=[("bench", f'{{"i": {i}}}') for i in range(start_i, start_i + batch)],
            columns=["queue", "payload"],
        )

    async def enqueue_single(self, n: int) -> float:
        return float("nan")

    async def enqueue_concurrent(self, n: int, tasks: int) -> float:
        return float("nan")

    async def process(self, n: int, concurrency: int) -> float:
        return float("nan")

    async def latency(self, samples: int) -> tuple[float, float]:
        return (float("nan"), float("nan"))

    async def storage(self) -> tuple[float, float]:
        return (float("nan"), float("nan"))


REDIS_URL = "redis://127.0.0.1:6379/14"


class BullMQRedis:
    """BullMQ's Python package on the local Redis: the reference everyone knows. Finished jobs
    are removed (removeOnComplete), as in BullMQ's own benchmark. Needs Redis on 127.0.0.1:6379
    (database 14; only this run's keys are touched) and `./run bench` to install bullmq."""

    name = "bullmq on Redis"

    async def setup(self, dsn: str) -> None:
        import bullmq
        import redis.asyncio as aioredis

        self.bullmq = bullmq
        self.redis = aioredis.from_url(REDIS_URL)
        await self.redis.ping()
        self.prefix = f"bench{uuid.uuid4().hex[:8]}"
        self.round = 0

    def _opts(self, **extra: Any) -> dict[str, Any]:
        return {"connection": REDIS_URL, "prefix": self.prefix, **extra}

    async def storage(self) -> tuple[float, float]:
        """Redis has no dead tuples; the memory its keys of the last queue hold."""
        used = 0
        async for key in self.redis.scan_iter(match=f"{self.prefix}:{self.queue_name}:*"):
            used += await self.redis.memory_usage(key) or 0
        return 0.0, used / 2**20

    async def _queue(self) -> Any:
        self.round += 1
        self.queue_name = f"q{self.round}"
        return self.bullmq.Queue(self.queue_name, self._opts())

    async def teardown(self) -> None:
        async for key in self.redis.scan_iter(match=f"{self.prefix}:*", count=1000):
            await self.redis.delete(key)
        await self.redis.aclose()

    async def enqueue_single(self, n: int) -> float:
        queue = await self._queue()
        start = time.perf_counter()
        for i in range(n):
            await queue.add("noop", {"i": i})
        rate = n / (time.perf_counter() - start)
        await queue.close()
        return rate

    async def enqueue_concurrent(self, n: int, tasks: int) -> float:
        queue = await self._queue()

        async def producer(count: int) -> None:
            for i in range(count):
                await queue.add("noop", {"i": i})

        start = time.perf_counter()
        await asyncio.gather(*(producer(n // tasks) for _ in range(tasks)))
        rate = n / (time.perf_counter() - start)
        await queue.close()
        return rate

    async def enqueue_bulk(self, n: int, batch: int) -> float:
        queue = await self._queue()
        start = time.perf_counter()
        for offset in range(0, n, batch):
            await queue.addBulk(
                [{"name": "noop", "data": {"i": i}} for i in range(offset, offset + batch)]
            )
        rate = n / (time.perf_counter() - start)
        await queue.close()
        return rate

    async def process(self, n: int, concurrency: int) -> float:
        queue = await self._queue()
        for offset in range(0, n, 1000):
            await queue.addBulk(
                [
                    {"name": "noop", "data": {"i": i}, "opts": {"removeOnComplete": True}}
                    for i in range(offset, offset + 1000)
                ]
            )
        await queue.close()
        return await self._drain(n, concurrency)

    async def _drain(self, total: int, concurrency: int) -> float:
        """Jobs per second of one BullMQ Worker taking ``total`` no-op jobs."""
        done = asyncio.Event()
        count = 0

        async def processor(job: Any, token: Any) -> None:
            nonlocal count
            count += 1
            if count == total:
                done.set()

        start = time.perf_counter()
        worker = self.bullmq.Worker(self.queue_name, processor, self._opts(concurrency=concurrency))
        await asyncio.wait_for(done.wait(), 600)
        elapsed = time.perf_counter() - start
        await worker.close()
        return total / elapsed

    async def latency(self, samples: int) -> tuple[float, float]:
        queue = await self._queue()
        started = asyncio.Event()
        stamp: list[float] = []

        async def processor(job: Any, token: Any) -> None:
            stamp.append(time.perf_counter())
            started.set()

        worker = self.bullmq.Worker(self.queue_name, processor, self._opts(concurrency=1))
        await asyncio.sleep(0.2)
        delays = []
        for _ in range(samples):
            started.clear()
            sent = time.perf_counter()
            await queue.add("noop", {"i": 0}, {"removeOnComplete": True})
            await asyncio.wait_for(started.wait(), 10)
            delays.append(stamp[-1] - sent)
            await asyncio.sleep(0.005)
        await worker.close()
        await queue.close()
        return _median_p95(delays)

    def _tree(self, f: int, children: int) -> dict[str, Any]:
        return {
            "name": "parent",
            "queueName": self.queue_name,
            "data": {"i": f},
            "children": [
                {"name": "child", "queueName": self.queue_name, "data": {"i": c}}
                for c in range(children)
            ],
        }

    async def _add_flows(self, flows: int, children: int) -> None:
        producer = self.bullmq.FlowProducer(self._opts())
        for f in range(flows):
            await producer.add(self._tree(f, children))
        await producer.close()

    async def flow_add(self, flows: int, children: int) -> float:
        await (await self._queue()).close()
        start = time.perf_counter()
        await self._add_flows(flows, children)
        return flows / (time.perf_counter() - start)

    async def flow_process(self, flows: int, children: int) -> float:
        await (await self._queue()).close()
        await self._add_flows(flows, children)
        return await self._drain(flows * (children + 1), 10)


class BullMQCodeOnPostgres(BullMQRedis):
    """The BullMQ peer's code on a PostgreSQL schema of its own (``self.dsn``, ``self.schema``):
    each workload starts on empty tables, and storage is that schema's."""

    dsn: str
    schema: str

    async def _queue(self) -> Any:
        await truncate_schema(self.dsn, self.schema)
        return await super()._queue()

    async def storage(self) -> tuple[float, float]:
        return await pg_storage(self.dsn, self.schema)


class Facade(BullMQCodeOnPostgres):
    """bullmq_compat: the same BullMQ code as the Redis peer, on pgjobs (one shared pool)."""

    name = "bullmq_compat facade"
    durability = "durable"

    async def setup(self, dsn: str) -> None:
        import bullmq_compat

        self.bullmq = bullmq_compat  # type: ignore[assignment]
        self.dsn = dsn
        self.pool = await create_pool(dsn, min_size=4, max_size=20)
        self.schema = f"bench_{uuid.uuid4().hex[:8]}"
        self.jobs = await JobQueue.connect(pool=self.pool, schema=self.schema)
        await self.jobs.migrate()
        self.prefix = "bull"
        self.round = 0

    def _opts(self, **extra: Any) -> dict[str, Any]:
        return {"connection": self.jobs, "durability": self.durability, **extra}

    async def teardown(self) -> None:
        await self.pool.execute(f"DROP SCHEMA {self.schema} CASCADE")
        await self.pool.close()


class FacadeAsync(Facade):
    """The facade with ``durability: "async"`` on every Queue, Worker and FlowProducer."""

    name = "bullmq_compat facade, async"
    durability = "async"


class BullMQPostgres(BullMQCodeOnPostgres):
    """BullMQ's Python package on its own PostgreSQL backend (`backend: "postgres"`, psycopg):
    the same BullMQ code as the Redis peer, in a schema of its own that it migrates itself."""

    name = "bullmq on PostgreSQL"

    async def setup(self, dsn: str) -> None:
        import bullmq

        self.bullmq = bullmq
        self.dsn = dsn
        self.schema = f"bullmqpg_{uuid.uuid4().hex[:8]}"
        self.round = 0

    def _opts(self, **extra: Any) -> dict[str, Any]:
        return {"backend": "postgres", "connection": self.dsn, "schema": self.schema, **extra}

    async def teardown(self) -> None:
        conn = await asyncpg.connect(self.dsn)
        try:
            await conn.execute(f"DROP SCHEMA IF EXISTS {self.schema} CASCADE")
        finally:
            await conn.close()


class PgQueuer:
    """PgQueuer 1.6 (asyncpg driver) in a schema of its own: enqueue one by one and in lists,
    one QueueManager draining with entrypoint(concurrency_limit=c), batch_size=min(c, 10), its
    log aggregation off, as in the peer baselines. It has no flows."""

    name = "pgqueuer"

    async def setup(self, dsn: str) -> None:
        from pgqueuer.db import AsyncpgDriver
        from pgqueuer.queries import Queries

        self.dsn = dsn
        self.schema = f"pgq_{uuid.uuid4().hex[:8]}"
        admin = await asyncpg.connect(dsn)
        await admin.execute(f"CREATE SCHEMA {self.schema}")
        await admin.close()
        self.conn = await self._connect()
        self.driver = AsyncpgDriver(self.conn)
        self.queries = Queries(self.driver)
        await self.queries.install()

    async def _connect(self) -> Any:
        return await asyncpg.connect(self.dsn, server_settings={"search_path": self.schema})

    async def storage(self) -> tuple[float, float]:
        return await pg_storage(self.dsn, self.schema)

    async def teardown(self) -> None:
        await self.conn.execute(f"DROP SCHEMA {self.schema} CASCADE")
        await self.conn.close()

    async def _reset(self) -> None:
        await self.conn.execute("TRUNCATE pgqueuer, pgqueuer_log")

    async def enqueue_single(self, n: int) -> float:
        await self._reset()
        start = time.perf_counter()
        for i in range(n):
            await self.queries.enqueue("noop", f'{{"i": {i}}}'.encode())
        return n / (time.perf_counter() - start)

    async def enqueue_concurrent(self, n: int, tasks: int) -> float:
        from pgqueuer.db import AsyncpgDriver
        from pgqueuer.queries import Queries

        await self._reset()
        conns = [await self._connect() for _ in range(tasks)]

        async def producer(conn: Any, count: int) -> None:
            queries = Queries(AsyncpgDriver(conn))
            for i in range(count):
                await queries.enqueue("noop", f'{{"i": {i}}}'.encode())

        start = time.perf_counter()
        await asyncio.gather(*(producer(c, n // tasks) for c in conns))
        rate = n / (time.perf_counter() - start)
        for conn in conns:
            await conn.close()
        return rate

    async def _bulk(self, start_i: int, batch: int) -> None:
        await self.queries.enqueue(
            ["noop"] * batch,
            [f'{{"i": {i}}}'.encode() for i in range(start_i, start_i + batch)],
            [0] * batch,
        )

    async def enqueue_bulk(self, n: int, batch: int) -> float:
        await self._reset()
        start = time.perf_counter()
        for offset in range(0, n, batch):
            await self._bulk(offset, batch)
        return n / (time.perf_counter() - start)

    async def _manager(self, concurrency: int, on_job: Any) -> tuple[Any, Any]:
        from pgqueuer.db import AsyncpgDriver
        from pgqueuer.qm import QueueManager
        from pgqueuer.queries import Queries

        conn = await self._connect()
        manager = QueueManager(Queries(AsyncpgDriver(conn)))

        @manager.entrypoint("noop", concurrency_limit=concurrency)
        async def noop(job: Any) -> None:
            on_job(job)

        return manager, conn

    async def process(self, n: int, concurrency: int) -> float:
        from datetime import timedelta

        from pgqueuer.types import QueueExecutionMode

        await self._reset()
        for offset in range(0, n, 1000):
            await self._bulk(offset, 1000)
        await self.conn.execute("VACUUM ANALYZE pgqueuer")
        done = 0

        def count(job: Any) -> None:
            nonlocal done
            done += 1

        manager, conn = await self._manager(concurrency, count)
        batch = min(concurrency, 10)
        start = time.perf_counter()
        await manager.run(
            batch_size=batch,
            max_concurrent_tasks=max(concurrency, 2 * batch),
            mode=QueueExecutionMode.drain,
            dequeue_timeout=timedelta(seconds=0.5),
            log_aggregation_interval=timedelta(0),
        )
        elapsed = time.perf_counter() - start
        await conn.close()
        assert done == n, (done, n)
        return n / elapsed

    async def latency(self, samples: int) -> tuple[float, float]:
        from datetime import timedelta

        await self._reset()
        started = asyncio.Event()
        stamp: list[float] = []

        def mark(job: Any) -> None:
            stamp.append(time.perf_counter())
            started.set()

        manager, conn = await self._manager(1, mark)
        runner = asyncio.create_task(
            manager.run(batch_size=1, max_concurrent_tasks=2, log_aggregation_interval=timedelta(0))
        )
        await asyncio.sleep(0.2)
        delays = []
        for k in range(samples):
            started.clear()
            sent = time.perf_counter()
            await self.queries.enqueue("noop", f'{{"i": {k}}}'.encode())
            await asyncio.wait_for(started.wait(), 10)
            delays.append(stamp[-1] - sent)
            await asyncio.sleep(0.005)
        manager.shutdown.set()
        await runner
        await conn.close()
        return _median_p95(delays)

    async def flow_add(self, flows: int, children: int) -> float:
        return float("nan")  # no flows

    async def flow_process(self, flows: int, children: int) -> float:
        return float("nan")


SYSTEMS: dict[str, type[Any]] = {
    "engine": Engine,
    "engine-async": EngineAsync,
    "facade": Facade,
    "facade-async": FacadeAsync,
    "bullmq": BullMQRedis,
    "bullmq-pg": BullMQPostgres,
    "pgqueuer": PgQueuer,
    "floor": RawFloor,
    "floor-async": RawFloorAsync,
    "floor-copy": RawCopyFloor,
}
