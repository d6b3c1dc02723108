"""Reading BullMQ queues out of Redis: discovery (SCAN), live clients, fingerprints, and a
snapshot of every container, job hash and sub-key of a queue. Reads only; bytes in, decoded
strictly, failures reported by the transform."""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass, field
from typing import Any

from migration_tools.layout import RawJob, base, check_modern

BATCH = 500


@dataclass(frozen=True, order=True)
class QueueRef:
    prefix: str
    name: str

    @property
    def base(self) -> str:
        return base(self.prefix, self.name)

    def __str__(self) -> str:
        return f"{self.prefix}:{self.name}"


@dataclass
class QueueSnapshot:
    ref: QueueRef
    meta: dict[str, str]
    id_counter: int
    # container -> [(id, score)] in BullMQ's processing order (wait/paused: next job first)
    containers: dict[str, list[tuple[str, float]]]
    jobs: dict[str, RawJob]
    schedulers: dict[str, tuple[float, dict[str, str]]]  # id -> (next ms, hash)
    dedup: dict[str, tuple[str, int]]  # dedup id -> (job id, pttl ms at taken_at_ms; -1 none)
    proto_jobs: dict[str, dict[str, str]]  # keepLastIfActive dn:<id> hashes
    lock_ttls: dict[str, int]  # active id -> PTTL of its lock (-2: none)
    taken_at_ms: int
    missing_hashes: list[str] = field(default_factory=list)


_READ_JOBS = """
local out = {}
for i, id in ipairs(ARGV) do
  local k = KEYS[1] .. id
  out[i] = {redis.call('HGETALL', k), redis.call('LRANGE', k .. ':logs', 0, -1),
            redis.call('SMEMBERS', k .. ':dependencies'),
            redis.call('HGETALL', k .. ':processed'), redis.call('HGETALL', k .. ':failed'),
            redis.call('ZRANGE', k .. ':unsuccessful', 0, -1)}
end
return out
"""


def _pairs(flat: list[Any]) -> dict[Any, Any]:
    """HGETALL as a Lua script returns it (a flat list) -> a dict."""
    return dict(zip(flat[::2], flat[1::2], strict=True))


def _s(value: bytes | str | None) -> str | None:
    if value is None:
        return None
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else value


def _hash(raw: dict[Any, Any]) -> dict[str, str]:
    return {_s(k) or "": _s(v) or "" for k, v in raw.items()}


async def discover(redis: Any, prefixes: list[str] | None = None) -> list[QueueRef]:
    """Queues found by ``SCAN MATCH <prefix>:*:meta`` (every prefix when none is given; then the
    queue is the last segment before ``:meta``, as queue names hold no ``:`` since v5.12)."""
    found: set[QueueRef] = set()
    patterns = [f"{p}:*:meta" for p in prefixes] if prefixes else ["*:meta"]
    for pattern in patterns:
        async for key in redis.scan_iter(match=pattern, count=1000):
            text = _s(key) or ""
            body = text[: -len(":meta")]
            if prefixes:
                prefix = next(p for p in prefixes if body.startswith(p + ":"))
                name = body[len(prefix) + 1 :]
            else:
                prefix, _, name = body.rpartition(":")
            if prefix and name:
                found.add(QueueRef(prefix, name))
    return sorted(found)


async def connected_clients(redis: Any, refs: list[QueueRef]) -> list[str]:
    """Names of connected BullMQ clients of these queues: Node names them
    ``<prefix>:<base64(queue)>[...]``, the Python package ``<prefix>:<queue>``."""
    names = set()
    for r in refs:
        names.add(f"{r.prefix}:{base64.b64encode(r.name.encode()).decode()}")
        names.add(f"{r.prefix}:{r.name}")
    clients = await redis.client_list()
    return sorted(
        str(c["name"])
        for c in clients
        if c.get("name")
        and any(str(c["name"]) == n or str(c["name"]).startswith(n + ":") for n in names)
    )


async def fingerprint(redis: Any, ref: QueueRef) -> tuple[Any, ...]:
    """Container sizes, the id counter and the last event id: equal before and after a read
    means nothing moved in between (addLog and updateData write no event: compared apart)."""
    b = ref.base
    pipe = redis.pipeline(transaction=True)
    for name in ("wait", "paused", "active"):
        pipe.llen(b + name)
    for name in ("prioritized", "delayed", "completed", "failed", "waiting-children", "repeat"):
        pipe.zcard(b + name)
    pipe.get(b + "id")
    pipe.xrevrange(b + "events", count=1)
    values = await pipe.execute()
    last = values[-1][0][0] if values[-1] else None
    return (*values[:-2], _s(values[-2]), _s(last))


async def wait_for_active(redis: Any, refs: list[QueueRef], deadline_s: float) -> int:
    """Poll until no queue has active jobs, or the deadline passes; returns those left."""
    end = time.monotonic() + deadline_s
    while True:
        left = 0
        for ref in refs:
            left += await redis.llen(ref.base + "active")
        if left == 0 or time.monotonic() >= end:
            return int(left)
        await _sleep(min(0.5, max(0.0, end - time.monotonic())))


async def _sleep(seconds: float) -> None:
    import asyncio

    await asyncio.sleep(seconds)


async def read_queue(redis: Any, ref: QueueRef) -> QueueSnapshot:
    """Every container in one MULTI (a consistent set of ids), then the hashes in batches."""
    b = ref.base
    pipe = redis.pipeline(transaction=True)
    pipe.lrange(b + "wait", 0, -1)
    pipe.lrange(b + "paused", 0, -1)
    pipe.lrange(b + "active", 0, -1)
    for name in ("prioritized", "delayed", "completed", "failed", "waiting-children"):
        pipe.zrange(b + name, 0, -1, withscores=True)
    pipe.get(b + "id")
    pipe.hgetall(b + "meta")
    pipe.zrange(b + "repeat", 0, -1, withscores=True)
    pipe.exists(b + "priority")
    pipe.time()
    (
        wait,
        paused,
        active,
        prioritized,
        delayed,
        completed,
        failed,
        children,
        id_counter,
        meta,
        repeat,
        legacy_priority,
        now,
    ) = await pipe.execute()
    meta_s = _hash(meta)
    wait_ids = [_s(x) or "" for x in wait]
    paused_ids = [_s(x) or "" for x in paused]
    check_modern(
        ref.prefix, ref.name, wait_ids + paused_ids, bool(legacy_priority), meta_s.get("version")
    )
    containers: dict[str, list[tuple[str, float]]] = {
        # lists: the next job is at the right end
        "wait": [(i, 0.0) for i in reversed(wait_ids)],
        "paused": [(i, 0.0) for i in reversed(paused_ids)],
        "active": [(_s(x) or "", 0.0) for x in reversed(active)],
    }
    for name, rows in (
        ("prioritized", prioritized),
        ("delayed", delayed),
        ("completed", completed),
        ("failed", failed),
        ("waiting-children", children),
    ):
        containers[name] = [(_s(member) or "", float(score)) for member, score in rows]
    taken_at_ms = int(now[0]) * 1000 + int(now[1]) // 1000
    ids = list(dict.fromkeys(i for rows in containers.values() for i, _ in rows))
    jobs, missing = await _read_jobs(redis, ref, ids)
    schedulers = await _read_schedulers(redis, ref, repeat)
    dedup, protos = await _read_dedup(redis, ref, taken_at_ms)
    locks: dict[str, int] = {}
    if containers["active"]:
        pipe = redis.pipeline(transaction=False)
        for job_id, _ in containers["active"]:
            pipe.pttl(f"{b}{job_id}:lock")
        for (job_id, _), ttl in zip(containers["active"], await pipe.execute(), strict=True):
            locks[job_id] = int(ttl)
    return QueueSnapshot(
        ref=ref,
        meta=meta_s,
        id_counter=int(id_counter or 0),
        containers=containers,
        jobs=jobs,
        schedulers=schedulers,
        dedup=dedup,
        proto_jobs=protos,
        lock_ttls=locks,
        taken_at_ms=taken_at_ms,
        missing_hashes=missing,
    )


async def _read_jobs(
    redis: Any, ref: QueueRef, ids: list[str]
) -> tuple[dict[str, RawJob], list[str]]:
    jobs: dict[str, RawJob] = {}
    missing: list[str] = []
    b = ref.base
    for start in range(0, len(ids), BATCH):
        chunk = ids[start : start + BATCH]
        # One read-only script per batch: a job hash and its five sub-keys, for 500 jobs, in one
        # round trip (a pipeline of 3,000 commands costs more to pack than to run).
        values = await redis.eval(_READ_JOBS, 1, b, *chunk)
        for job_id, (raw, logs, deps, processed, failed, unsuccessful) in zip(
            chunk, values, strict=True
        ):
            if not raw:
                missing.append(job_id)
                continue
            fields = _pairs(raw)
            data = fields.pop(b"data", None)
            jobs[job_id] = RawJob(
                prefix=ref.prefix,
                queue=ref.name,
                id=job_id,
                fields=_hash(fields),
                data_bytes=data,
                logs=[_s(x) or "" for x in logs],
                dependencies=sorted(_s(x) or "" for x in deps),
                processed=_hash(_pairs(processed)),
                failed_children=_hash(_pairs(failed)),
                unsuccessful=[_s(x) or "" for x in unsuccessful],
            )
    return jobs, missing


async def _read_schedulers(
    redis: Any, ref: QueueRef, repeat: list[tuple[bytes, float]]
) -> dict[str, tuple[float, dict[str, str]]]:
    found: dict[str, tuple[float, dict[str, str]]] = {}
    for member, score in repeat:
        scheduler_id = _s(member) or ""
        fields = _hash(await redis.hgetall(f"{ref.base}repeat:{scheduler_id}"))
        found[scheduler_id] = (float(score), fields)
    return found


async def _read_dedup(
    redis: Any, ref: QueueRef, taken_at_ms: int
) -> tuple[dict[str, tuple[str, int]], dict[str, dict[str, str]]]:
    """Dedup keys with their remaining TTL as of ``taken_at_ms``: each key's PTTL is read with
    the server's clock in one transaction and shifted back to the snapshot's instant, so the
    expiry does not move by however long the scan took to reach the key."""
    dedup: dict[str, tuple[str, int]] = {}
    protos: dict[str, dict[str, str]] = {}
    head = ref.base + "de:"
    async for key in redis.scan_iter(match=head + "*", count=1000):
        name = _s(key) or ""
        pipe = redis.pipeline(transaction=True)
        pipe.get(key)
        pipe.pttl(key)
        pipe.time()
        value, ttl, now = await pipe.execute()
        if value is not None:
            read_at_ms = int(now[0]) * 1000 + int(now[1]) // 1000
            ttl = int(ttl) + (read_at_ms - taken_at_ms) if int(ttl) >= 0 else int(ttl)
            dedup[name[len(head) :]] = (_s(value) or "", ttl)
    head = ref.base + "dn:"
    async for key in redis.scan_iter(match=head + "*", count=1000):
        name = _s(key) or ""
        protos[name[len(head) :]] = _hash(await redis.hgetall(key))
    return dedup, protos
