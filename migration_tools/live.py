"""The Redis side of the live move: taking jobs and schedulers out of BullMQ's reach one unit at
a time, while BullMQ producers and workers keep running on the same Redis.

The order, for a unit (a job, or every job of a flow tree):

1. **Quarantine** (one Lua script, so atomic in Redis): only if every job of the unit is still
   in the container it was read from (wait, paused, prioritized, delayed, waiting-children, or
   a finished set), its hash exists and no lock is held on it, the ids leave their containers
   and are recorded in the queue's ``pgjobs:moving`` hash (container and score). Otherwise
   nothing changes and the unit waits for the next pass. A BullMQ worker takes jobs only from
   those containers, and removes or moves a job only through them, so from here on no BullMQ
   worker can act on the job; its hash stays, so nothing is lost.
2. **Write** to PostgreSQL with the import ledger, in one transaction (idempotent: a job the
   ledger holds is not written again).
3. **Release** (one Lua script): the job's hash and sub-keys go, with its dedup key when the
   key still names it, and its ``pgjobs:moving`` record.

A crash between 1 and 2 leaves the job quarantined: the next run pages ``pgjobs:moving`` first
and writes it. A crash between 2 and 3 leaves it written and quarantined: the next run finds it
in the ledger and releases it. So at every moment a job is runnable in at most one store, and
never lost: in Redis (before 1), quarantined (between 1 and 3, runnable in neither until the
write commits, which makes it runnable in PostgreSQL), or in PostgreSQL.

Schedulers move the same way, first: the scheduler's entry leaves the ``repeat`` sorted set (so
BullMQ produces no further iteration from it) into ``pgjobs:moving-schedulers``, the schedule is
upserted in PostgreSQL with the same next time, then the scheduler's hash goes.
"""

from __future__ import annotations

from typing import Any

MOVING = "pgjobs:moving"
"""Per queue: a hash of job id -> "<container> <score>" for jobs taken out of BullMQ's reach and
not yet released (written to PostgreSQL or about to be)."""
MOVING_SCHEDULERS = "pgjobs:moving-schedulers"
"""Per queue: a hash of scheduler id -> next time (ms) for schedulers taken out of ``repeat``."""

LIST_CONTAINERS = ("wait", "paused")
MOVABLE = ("wait", "paused", "prioritized", "delayed", "waiting-children", "completed", "failed")
"""Containers no BullMQ worker acts on a job in (the active list is never movable)."""

# ARGV: the moving hash's suffix, then for each job: its queue's base key, its id, the
# container it was read from. All or nothing: a refusal names the first job that moved on.
_QUARANTINE = """
local moving = ARGV[1]
local lists = {wait = true, paused = true}
local n = (#ARGV - 1) / 3
for i = 0, n - 1 do
  local b, id, c = ARGV[2 + 3 * i], ARGV[3 + 3 * i], ARGV[4 + 3 * i]
  if redis.call('HEXISTS', b .. moving, id) == 0 then
    local k = b .. id
    if redis.call('EXISTS', k) == 0 then return {0, b .. id, 'gone'} end
    if redis.call('EXISTS', k .. ':lock') == 1 then return {0, b .. id, 'locked'} end
    local member
    if lists[c] then member = redis.call('LPOS', b .. c, id)
    else member = redis.call('ZSCORE', b .. c, id) end
    if not member then return {0, b .. id, 'no longer ' .. c} end
  end
end
for i = 0, n - 1 do
  local b, id, c = ARGV[2 + 3 * i], ARGV[3 + 3 * i], ARGV[4 + 3 * i]
  if redis.call('HEXISTS', b .. moving, id) == 0 then
    local score = ''
    if lists[c] then
      redis.call('LREM', b .. c, 0, id)
    else
      score = redis.call('ZSCORE', b .. c, id)
      redis.call('ZREM', b .. c, id)
    end
    redis.call('HSET', b .. moving, id, c .. ' ' .. score)
  end
end
return {1}
"""

# ARGV: the moving hash's suffix, then pairs of (base, id): each job's keys go, its dedup key
# when it still names the job, and its moving record. Returns how many were released.
_RELEASE = """
local moving = ARGV[1]
local released = 0
for i = 2, #ARGV, 2 do
  local b, id = ARGV[i], ARGV[i + 1]
  if redis.call('HDEL', b .. moving, id) == 1 then
    local k = b .. id
    local deid = redis.call('HGET', k, 'deid')
    -- as BullMQ at completion: a dedup key without a TTL that still names the job goes (the
    -- hold moves to PostgreSQL); one with a TTL runs out in Redis as it would have
    if deid and redis.call('GET', b .. 'de:' .. deid) == id
       and redis.call('PTTL', b .. 'de:' .. deid) == -1 then
      redis.call('DEL', b .. 'de:' .. deid)
    end
    redis.call('DEL', k, k .. ':logs', k .. ':dependencies', k .. ':processed',
               k .. ':failed', k .. ':unsuccessful')
    released = released + 1
  end
end
return released
"""

# ARGV: the moving hash's suffix, then pairs of (base, id): each job goes back where BullMQ
# looks for it, its record dropped: a list job at the end BullMQ takes next, into paused if
# the queue is paused now (a resume renames paused over wait), with the marker that wakes
# BullMQ's workers; a sorted-set job at its score.
_RESTORE = """
local moving = ARGV[1]
for i = 2, #ARGV, 2 do
  local b, id = ARGV[i], ARGV[i + 1]
  local record = redis.call('HGET', b .. moving, id)
  if record then
    local c, score = string.match(record, '^(%S+) ?(.*)$')
    if c == 'wait' or c == 'paused' then
      if redis.call('HEXISTS', b .. 'meta', 'paused') == 1 then c = 'paused' else c = 'wait' end
      redis.call('RPUSH', b .. c, id)
      if c == 'wait' then redis.call('ZADD', b .. 'marker', 0, '0') end
    else
      redis.call('ZADD', b .. c, score, id)
      if c == 'prioritized' then redis.call('ZADD', b .. 'marker', 0, '0') end
      if c == 'delayed' then
        redis.call('ZADD', b .. 'marker', math.floor(tonumber(score) / 0x1000), '1')
      end
    end
    redis.call('HDEL', b .. moving, id)
  end
end
return 1
"""

# KEYS[1]: the queue's base key; ARGV: the scheduler's id, the next time read (its score),
# the id of its pending iteration, and the two moving hashes' suffixes. Only if the scheduler
# is still there with that next time and its pending iteration waits in a container no
# worker acts on (not active, not locked: a BullMQ worker creates the next iteration right
# after it takes one, in a second round trip, and creates none once the scheduler is gone).
# The scheduler and its iteration are taken together.
_TAKE_SCHEDULER = """
local b, id, score, iteration = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
local schedulers, moving = ARGV[4], ARGV[5]
if redis.call('HEXISTS', b .. schedulers, id) == 1 then return 1 end
local now = redis.call('ZSCORE', b .. 'repeat', id)
if not now or tonumber(now) ~= tonumber(score) then return 0 end
local k = b .. iteration
if redis.call('HEXISTS', b .. moving, iteration) == 0 then
  if redis.call('EXISTS', k) == 0 or redis.call('EXISTS', k .. ':lock') == 1 then return 0 end
  local taken = nil
  for _, c in ipairs({'delayed', 'prioritized'}) do
    local at = redis.call('ZSCORE', b .. c, iteration)
    if at then
      redis.call('ZREM', b .. c, iteration)
      taken = c .. ' ' .. at
    end
  end
  for _, c in ipairs({'wait', 'paused'}) do
    if not taken and redis.call('LREM', b .. c, 0, iteration) > 0 then taken = c .. ' ' end
  end
  if not taken then return 0 end
  redis.call('HSET', b .. moving, iteration, taken)
end
redis.call('ZREM', b .. 'repeat', id)
redis.call('HSET', b .. schedulers, id, score)
return 1
"""

_RELEASE_SCHEDULER = """
local b, id = KEYS[1], ARGV[1]
redis.call('DEL', b .. 'repeat:' .. id)
return redis.call('HDEL', b .. ARGV[2], id)
"""


async def quarantine(redis: Any, jobs: list[tuple[str, str, str]]) -> str | None:
    """Take ``jobs`` ((queue base, id, container read)) out of BullMQ's reach, all or none;
    None when done, else why not (the first job that moved on, was locked or is gone)."""
    if not jobs:
        return None
    flat = [part for job in jobs for part in job]
    result = await redis.eval(_QUARANTINE, 0, MOVING, *flat)
    if int(result[0]) == 1:
        return None
    return f"{_text(result[1])} {_text(result[2])}"


async def release(redis: Any, jobs: list[tuple[str, str]]) -> int:
    """Remove quarantined ``jobs`` ((queue base, id)), now written to PostgreSQL, from Redis."""
    if not jobs:
        return 0
    return int(await redis.eval(_RELEASE, 0, MOVING, *[p for job in jobs for p in job]))


async def forget(redis: Any, base: str, job_id: str) -> None:
    """Drop the moving record of a quarantined job whose hash is gone (the application removed
    the job meanwhile, as BullMQ lets it): there is nothing left to move."""
    await redis.hdel(base + MOVING, job_id)


async def restore(redis: Any, jobs: list[tuple[str, str]]) -> None:
    """Give quarantined ``jobs`` back to BullMQ, each into the container it came from."""
    if jobs:
        await redis.eval(_RESTORE, 0, MOVING, *[p for job in jobs for p in job])


async def take_scheduler(
    redis: Any, base: str, scheduler_id: str, next_ms: float, iteration: str
) -> bool:
    """Take a scheduler out of BullMQ's ``repeat`` set, with its pending ``iteration`` job, if
    it still has the next time read and the iteration waits unclaimed; True when both are
    (now or already) taken. The iteration is then written as a quarantined job."""
    taken = await redis.eval(
        _TAKE_SCHEDULER, 1, base, scheduler_id, repr(next_ms), iteration, MOVING_SCHEDULERS,
        MOVING,
    )  # fmt: skip
    return bool(int(taken))


async def release_scheduler(redis: Any, base: str, scheduler_id: str) -> None:
    """Remove a taken scheduler, now upserted in PostgreSQL, from Redis."""
    await redis.eval(_RELEASE_SCHEDULER, 1, base, scheduler_id, MOVING_SCHEDULERS)


async def taken_schedulers(redis: Any, base: str) -> dict[str, float]:
    """Schedulers taken by an earlier run and not yet released: id -> next time (ms)."""
    raw = await redis.hgetall(base + MOVING_SCHEDULERS)
    return {_text(k): float(_text(v)) for k, v in raw.items()}


async def still_in_redis(redis: Any, base: str) -> dict[str, int]:
    """How many jobs a queue still holds, by container (quarantined ones under ``moving``)."""
    counts: dict[str, int] = {}
    for container in ("active", *MOVABLE):
        key = base + container
        size = await (redis.llen(key) if container in ("active", *LIST_CONTAINERS)
                      else redis.zcard(key))  # fmt: skip
        if size:
            counts[container] = int(size)
    moving = int(await redis.hlen(base + MOVING))
    if moving:
        counts["moving"] = moving
    return counts


def _text(value: Any) -> str:
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else str(value)
