"""Reading BullMQ queues out of Redis a page at a time: discovery (SCAN), live clients,
fingerprints, each queue's small state whole (meta, schedulers, dedup keys), and its containers
in pages of job hashes with their sub-keys. Reads only; bytes in, decoded strictly, failures
reported by the transform.

Nothing of a queue is held beyond the page being migrated (and the flow trees it reaches), so
memory is bounded by the batch size, not the queue size. The pages are read one after another,
not in one MULTI: the run is consistent because it refuses while BullMQ clients are connected
and compares fingerprints taken before and after."""

from __future__ import annotations

import base64
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from migration_tools.layout import RawJob, base, check_modern, delayed_run_at_ms

LISTS = ("active", "wait", "paused")  # the next job at the right end
ZSETS = ("completed", "failed", "delayed", "prioritized", "waiting-children")
UNFINISHED = ("active", "wait", "paused", "prioritized", "delayed", "waiting-children")
FINISHED = ("failed", "completed")
"""Containers in BullMQ's processing order: what a worker takes first comes first."""


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
class QueueContext:
    """What a queue holds besides its jobs, read whole (it is small)."""

    ref: QueueRef
    meta: dict[str, str]
    id_counter: int
    sizes: dict[str, int]  # container -> length
    schedulers: dict[str, tuple[float, dict[str, str]]]  # id -> (next ms, hash)
    dedup: dict[str, tuple[str, int]]  # dedup id -> (job id, pttl ms at taken_at_ms; -1 none)
    proto_jobs: dict[str, dict[str, str]]  # keepLastIfActive dn:<id> hashes
    taken_at_ms: int

    @property
    def job_count(self) -> int:
        return sum(self.sizes.values())


@dataclass
class FetchedJob:
    """A job hash with its sub-keys, where it was found, its delayed run time and lock TTL."""

    job: RawJob
    containers: frozenset[str]
    run_at_ms: int | None
    lock_ttl: int  # PTTL of its lock (-2: none)


# One read-only script per page: for each id, its hash and five sub-keys, its score in each
# sorted-set container, its lock's TTL, (for jobs reached through a flow, whose list is not
# known) whether the active list holds it, and the record of a live move that took it out of
# its container (live.py). 1,000 jobs in one round trip.
_READ_JOBS = """
local b = KEYS[1]
local probe = ARGV[1] == '1'
local zsets = {'completed', 'failed', 'delayed', 'prioritized', 'waiting-children'}
local out = {}
for i = 2, #ARGV do
  local id = ARGV[i]
  local k = b .. id
  local h = redis.call('HGETALL', k)
  if #h == 0 then
    out[i - 1] = {}
  else
    local scores = {}
    for z = 1, #zsets do
      scores[z] = redis.call('ZSCORE', b .. zsets[z], id) or ''
    end
    local active = 0
    if probe and redis.call('LPOS', b .. 'active', id) then active = 1 end
    out[i - 1] = {h, redis.call('LRANGE', k .. ':logs', 0, -1),
                  redis.call('SMEMBERS', k .. ':dependencies'),
                  redis.call('HGETALL', k .. ':processed'), redis.call('HGETALL', k .. ':failed'),
                  redis.call('ZRANGE', k .. ':unsuccessful', 0, -1), scores,
                  redis.call('PTTL', k .. ':lock'), active,
                  redis.call('HGET', b .. 'pgjobs:moving', id) or ''}
  end
end
return out
"""

# v4 wrote markers ('0' or '0:<ts>') into the wait list: looked for in Redis, a page at a time.
_HAS_MARKER = """
local n = redis.call('LLEN', KEYS[1])
for start = 0, n - 1, 10000 do
  for _, id in ipairs(redis.call('LRANGE', KEYS[1], start, start + 9999)) do
    if id == '0' or string.sub(id, 1, 2) == '0:' then return 1 end
  end
end
return 0
"""


def _pairs(flat: list[Any]) -> dict[Any, Any]:
    """HGETALL as a Lua script returns it (a flat list) -> a dict."""
    items = iter(flat)
    return dict(zip(items, items, strict=True))


def _s(value: bytes | str | None) -> str | None:
    if value is None:
        return None
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else value


def _hash(raw: dict[bytes, bytes]) -> dict[str, str]:
    return {k.decode("utf-8", "surrogateescape"): v.decode("utf-8", "surrogateescape")
            for k, v in raw.items()}  # fmt: skip


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


async def read_context(redis: Any, ref: QueueRef) -> QueueContext:
    """The queue's meta, id counter, container sizes, schedulers and dedup keys; refuses a
    v1-v4 layout (LegacyLayout) before anything is written."""
    b = ref.base
    pipe = redis.pipeline(transaction=True)
    for name in LISTS:
        pipe.llen(b + name)
    for name in ZSETS:
        pipe.zcard(b + name)
    pipe.get(b + "id")
    pipe.hgetall(b + "meta")
    pipe.zrange(b + "repeat", 0, -1, withscores=True)
    pipe.hgetall(b + "pgjobs:moving-schedulers")  # taken by a live move, not yet released
    pipe.exists(b + "priority")
    pipe.time()
    *sizes, id_counter, meta, repeat, taken, legacy_priority, now = await pipe.execute()
    repeat = [*repeat, *((member, float(score)) for member, score in taken.items())]
    meta_s = _hash(meta)
    markers = any([await redis.eval(_HAS_MARKER, 1, b + name) for name in ("wait", "paused")])
    check_modern(ref.prefix, ref.name, markers, bool(legacy_priority), meta_s.get("version"))
    taken_at_ms = int(now[0]) * 1000 + int(now[1]) // 1000
    dedup, protos = await _read_dedup(redis, ref, taken_at_ms)
    return QueueContext(
        ref=ref,
        meta=meta_s,
        id_counter=int(id_counter or 0),
        sizes=dict(zip(LISTS + ZSETS, (int(n) for n in sizes), strict=True)),
        schedulers=await _read_schedulers(redis, ref, repeat),
        dedup=dedup,
        proto_jobs=protos,
        taken_at_ms=taken_at_ms,
    )


async def pages(redis: Any, ref: QueueRef, container: str, size: int) -> AsyncIterator[list[str]]:
    """The ids of one container, ``size`` at a time, in BullMQ's processing order: lists from
    the right end (the next job first), sorted sets by score."""
    key = ref.base + container
    if container == "pgjobs:moving":  # a hash: jobs a live move took out of their containers
        moving = [_s(x) or "" for x in await redis.hkeys(key)]
        for start in range(0, len(moving), size):
            yield moving[start : start + size]
    elif container in LISTS:
        length = int(await redis.llen(key))
        for stop in range(length, 0, -size):
            ids = await redis.lrange(key, max(0, stop - size), stop - 1)
            yield [_s(x) or "" for x in reversed(ids)]
    else:
        count = int(await redis.zcard(key))
        for start in range(0, count, size):
            yield [_s(x) or "" for x in await redis.zrange(key, start, start + size - 1)]


async def fetch_jobs(
    redis: Any, ref: QueueRef, ids: list[str], found_in: str | None
) -> dict[str, FetchedJob | None]:
    """The jobs ``ids`` of ``ref`` (None: no hash), read in pages of 1,000. ``found_in``: the
    list container they were paged from; None for jobs reached through a flow, whose sorted-set
    scores and the active list tell where they are (else they are in wait or paused)."""
    out: dict[str, FetchedJob | None] = {}
    b = ref.base
    for start in range(0, len(ids), 1000):
        chunk = ids[start : start + 1000]
        values = await redis.eval(_READ_JOBS, 1, b, "0" if found_in else "1", *chunk)
        for job_id, value in zip(chunk, values, strict=True):
            out[job_id] = _fetched(ref, job_id, value, found_in) if value else None
    return out


def _fetched(ref: QueueRef, job_id: str, value: list[Any], found_in: str | None) -> FetchedJob:
    raw, logs, deps, processed, failed, unsuccessful, scores, ttl, active, moving = value
    fields = _pairs(raw)
    data = fields.pop(b"data", None)
    containers = {name for name, score in zip(ZSETS, scores, strict=True) if score != b""}
    if moving:  # taken out of its container by a live move: where it was, and its score
        container, _, score = (_s(moving) or "").partition(" ")
        containers = {container}
        scores = [score.encode() if name == container else b"" for name in ZSETS]
    elif found_in in LISTS:
        containers.add(found_in)
    elif found_in is None:
        if active:
            containers.add("active")
        elif not containers:
            containers.add("wait")  # a flow member in no sorted set is in wait (or paused)
    delayed = scores[ZSETS.index("delayed")]
    job = RawJob(
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
    return FetchedJob(
        job,
        frozenset(containers),
        delayed_run_at_ms(float(delayed)) if delayed != b"" else None,
        int(ttl),
    )


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
    the server's clock in one transaction and shifted back to ``taken_at_ms``, so the
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
