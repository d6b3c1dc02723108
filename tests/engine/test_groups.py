"""Groups: a grouped queue is served group by group in turn, each group paused, capped and
rate-limited on its own (pgjobs.groups, sql/schema/groups.sql)."""

from __future__ import annotations

import asyncio
import random
from collections import Counter, defaultdict
from datetime import UTC, datetime
from typing import Any

import pytest

from pgjobs import InvalidOption, JobQueue, JobSpec, Registry
from tests.interleave import overlap


@pytest.fixture
def kinds(registry: Registry) -> None:
    registry.declare("g", input=dict, queue="gq")


def spec(group: str | None, n: int = 0, **options: Any) -> JobSpec:
    return JobSpec("g", {"n": n, "group": group}, group_key=group, **options)


async def claim_groups(jobs: JobQueue, limit: int, **limits: Any) -> list[str | None]:
    claimed = await jobs.claim(["gq"], kinds=["g"], limit=limit, **limits)
    return [ctx.payload["group"] for ctx in claimed]


async def test_a_big_group_does_not_starve_a_small_one(jobs: JobQueue, kinds: None) -> None:
    await jobs.enqueue_many([spec("big", n) for n in range(300)])
    await jobs.enqueue_many([spec("small"), spec("tiny")])
    assert sorted(await claim_groups(jobs, 3)) == ["big", "small", "tiny"]
    # one at a time, the rotation goes on: each group once, then big alone
    await jobs.enqueue_many([spec("small", 1), spec("tiny", 1)])
    served = [g for _ in range(5) for g in await claim_groups(jobs, 1)]
    assert served == ["big", "small", "tiny", "big", "big"]


async def test_priority_orders_jobs_within_a_group_not_across_groups(
    jobs: JobQueue, kinds: None
) -> None:
    await jobs.enqueue_many([spec("a", 1, priority=0), spec("a", 2, priority=50)])
    await jobs.enqueue_many([spec("b", 3, priority=0)])
    first = await jobs.claim(["gq"], kinds=["g"], limit=2)
    assert sorted(ctx.payload["n"] for ctx in first) == [2, 3]  # a's best, then b's only


async def test_jobs_without_a_group_come_first(jobs: JobQueue, kinds: None) -> None:
    """Among the next ready jobs in claim order (twice the claim's size), those without a group
    are taken before the groups' (as BullMQ Pro gives them precedence)."""
    await jobs.enqueue_many([spec("a", n) for n in range(2)])
    await jobs.enqueue_many([spec(None, 10), spec(None, 11)])
    assert await claim_groups(jobs, 2) == [None, None]
    assert await claim_groups(jobs, 2) == ["a", "a"]


async def test_the_rotation_goes_on_from_the_last_group_a_claim_served(
    jobs: JobQueue, kinds: None
) -> None:
    await jobs.enqueue_many([spec(None, 9)])
    await jobs.enqueue_many([spec(g, n) for n in range(2) for g in ("a", "b", "c")])
    # (claim returns its jobs in claim order: compared as sets of groups)
    assert Counter(await claim_groups(jobs, 2)) == {None: 1, "a": 1}  # room for one group
    assert Counter(await claim_groups(jobs, 2)) == {"b": 1, "c": 1}
    assert Counter(await claim_groups(jobs, 2)) == {"a": 1, "b": 1}  # wrapped around
    assert Counter(await claim_groups(jobs, 2)) == {"c": 1}


async def test_a_paused_group_waits_and_resumes(jobs: JobQueue, kinds: None) -> None:
    assert await jobs.pause_group("gq", "later")  # before it has a job, as BullMQ Pro allows
    assert not await jobs.pause_group("gq", "later")
    await jobs.enqueue_many([spec("later", n) for n in range(3)] + [spec("now")])
    assert await claim_groups(jobs, 10) == ["now"]
    [later] = await jobs.list_groups("gq", "later")
    assert later.status == "paused" and later.ready == 3
    assert await jobs.resume_group("gq", "later")
    assert not await jobs.resume_group("gq", "later")
    assert not await jobs.resume_group("gq", "never seen")
    assert await claim_groups(jobs, 10) == ["later"] * 3


async def test_a_groups_cap_holds_its_running_jobs(jobs: JobQueue, kinds: None) -> None:
    await jobs.enqueue_many([spec(g, n) for n in range(5) for g in ("a", "b")])
    first = await claim_groups(jobs, 10, group_concurrency=2)
    assert Counter(first) == {"a": 2, "b": 2}
    assert await claim_groups(jobs, 10, group_concurrency=2) == []
    [a, _b] = sorted(await jobs.list_groups("gq"), key=lambda g: g.key)
    assert (a.status, a.running, a.ready) == ("maxed", 2, 3)
    await jobs.set_group_limits("gq", "a", concurrency=3)  # a's own cap comes first
    assert await claim_groups(jobs, 10, group_concurrency=2) == ["a"]
    await jobs.set_group_limits("gq", "a", concurrency=None)
    [a] = await jobs.list_groups("gq", "a")
    assert a.concurrency is None


async def test_a_groups_rate_limit_counts_every_start_in_its_window(
    jobs: JobQueue, kinds: None
) -> None:
    await jobs.enqueue_many([spec(g, n) for n in range(5) for g in ("a", "b")])
    limits = {"group_rate_limit": 2, "group_rate_period": 3600.0}
    assert Counter(await claim_groups(jobs, 10, **limits)) == {"a": 2, "b": 2}
    assert await claim_groups(jobs, 10, **limits) == []
    [a, _b] = sorted(await jobs.list_groups("gq"), key=lambda g: g.key)
    assert a.status == "limited" and a.window_count == 2 and a.window_ends is not None
    await jobs.set_group_limits("gq", "b", rate_limit=(3, 3600.0))  # b's own, a new window
    assert Counter(await claim_groups(jobs, 10, **limits)) == {"b": 3}
    # a claim without a group limit is held only by the groups' own limits
    assert Counter(await claim_groups(jobs, 10)) == {"a": 3}


async def test_limit_group_holds_it_for_a_while(jobs: JobQueue, kinds: None) -> None:
    await jobs.enqueue_many([spec("a"), spec("b")])
    await jobs.limit_group("gq", "a", 3600)
    assert await claim_groups(jobs, 10) == ["b"]
    [a] = await jobs.list_groups("gq", "a")
    assert a.status == "limited" and a.limited_until is not None
    assert a.limited_until > datetime.now(UTC)
    assert await jobs.reset_group("gq", "a")
    assert await claim_groups(jobs, 10) == ["a"]
    with pytest.raises(InvalidOption, match="seconds"):
        await jobs.limit_group("gq", "a", 0)
    with pytest.raises(InvalidOption, match="group"):
        await jobs.pause_group("gq", "")
    with pytest.raises(InvalidOption, match="rate_limit"):
        await jobs.set_group_limits("gq", "a", rate_limit=(0, 1.0))


async def test_a_worker_serves_every_group_within_its_caps(
    jobs: JobQueue, registry: Registry
) -> None:
    running: Counter[str] = Counter()
    peaks: Counter[str] = Counter()
    done: Counter[str] = Counter()

    @registry.kind("w", input=dict, queue="wq", group_key=lambda d: d["group"])
    async def work(ctx: Any, data: dict[str, Any]) -> None:
        group = data["group"]
        running[group] += 1
        peaks[group] = max(peaks[group], running[group])
        await asyncio.sleep(0)
        running[group] -= 1
        done[group] += 1

    sizes = {"big": 200, "mid": 20, "one": 1}
    await jobs.enqueue_many(
        [JobSpec("w", {"group": g}) for g, n in sizes.items() for _ in range(n)]
    )
    workers = [jobs.worker(concurrency=8, group_concurrency=2) for _ in range(2)]
    await asyncio.gather(*(w.run(until_drained=True) for w in workers))
    assert done == sizes and max(peaks.values()) <= 2


async def test_two_claims_racing_for_a_groups_last_slot_admit_one(
    jobs: JobQueue, kinds: None
) -> None:
    await jobs.enqueue_many([spec("a", n) for n in range(3)])
    await jobs.set_group_limits("gq", "a", concurrency=1)
    sql = f"SELECT id, group_key FROM {jobs.schema}.claim_jobs($1, $2, 5, 30, 0)"

    async def take(conn: Any) -> list[Any]:
        return list(await conn.fetch(sql, ["gq"], ["g"]))

    first, second, waited = await overlap(jobs.pool, take, take)
    assert waited and len(first) == 1 and second == []


async def test_a_pause_racing_a_claim_is_seen_whole(jobs: JobQueue, kinds: None) -> None:
    await jobs.enqueue_many([spec("a", n) for n in range(3)])
    sql = f"SELECT id FROM {jobs.schema}.claim_jobs($1, $2, 5, 30, 0)"

    async def take(conn: Any) -> list[Any]:
        return list(await conn.fetch(sql, ["gq"], ["g"]))

    async def pause(conn: Any) -> None:  # pause_group's statements, in the test's transaction
        await jobs.db.fetchrow("lock_grouped_queue", "gq", conn=conn)
        await jobs.db.fetchrow("pause_group", "gq", "a", conn=conn)

    # the claim first: the pause waits for it, and it took what it saw unpaused
    taken, _, waited = await overlap(jobs.pool, take, pause)
    assert waited and len(taken) == 3
    await jobs.enqueue_many([spec("a", n) for n in range(3, 6)])
    # the pause first: the claim waits for it, then sees the group paused
    _, none, waited = await overlap(jobs.pool, pause, take)
    assert waited and none == []


async def test_a_thousand_skewed_groups_all_progress_and_none_exceeds_its_limit(
    jobs: JobQueue, kinds: None
) -> None:
    rng = random.Random(7)
    sizes = {f"g{i}": (200 if i < 5 else rng.randint(1, 4)) for i in range(1000)}
    await jobs.enqueue_many([spec(g, n) for g, size in sizes.items() for n in range(size)])
    limits = {"group_rate_limit": 2, "group_rate_period": 3600.0}

    async def claimer() -> list[str | None]:
        got: list[str | None] = []
        for _ in range(40):
            got += await claim_groups(jobs, 20, **limits)
        return got

    taken = [g for got in await asyncio.gather(*(claimer() for _ in range(4))) for g in got]
    per_group = Counter(taken)
    assert max(per_group.values()) <= 2  # one window: at most the limit, fleet-wide
    assert set(per_group) == set(sizes)  # every group progressed, the big ones did not crowd
    started = defaultdict(int)
    for group in await jobs.list_groups("gq"):
        started[group.key] = group.window_count
    assert all(started[g] == per_group[g] for g in sizes)


async def test_a_grouped_pick_racing_a_cancel_leaves_the_cancelled_job_alone(
    jobs: JobQueue, kinds: None
) -> None:
    """The grouped pick locks no row; the claim's update re-checks each job: a cancel that
    commits while the claim waits for its row wins, and the claim takes the others."""
    [first, *rest] = [r.id for r in await jobs.enqueue_many([spec("a", n) for n in range(3)])]
    sql = f"SELECT id FROM {jobs.schema}.claim_jobs($1, $2, 5, 30, 0)"

    async def cancel(conn: Any) -> Any:
        return await jobs.cancel(first, connection=conn)

    async def take(conn: Any) -> list[int]:
        return sorted(r["id"] for r in await conn.fetch(sql, ["gq"], ["g"]))

    _, taken, waited = await overlap(jobs.pool, cancel, take)
    assert waited and taken == sorted(rest)
    [row] = await jobs.db.pool.fetch(f"SELECT status FROM {jobs.schema}.jobs WHERE id = $1", first)
    assert row["status"] == "cancelled"
