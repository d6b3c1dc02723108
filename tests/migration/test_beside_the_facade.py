"""The migration while the facade is already in use: producers pointed at PostgreSQL before
the move, facade workers acting on moved jobs between runs, ids both stores handed out, and
reruns after a finished move. Redis data is written by the real BullMQ client; every getJob
of a moved id is also asked of real BullMQ, which still holds the queue."""

from __future__ import annotations

import asyncio
from typing import Any

import bullmq
import redis.asyncio as aioredis

import bullmq_compat
from migration_tools import ExitCode, migrate
from pgjobs import JobQueue
from tests.migration.test_migration import HOUR_MS, options


def facade(jobs: JobQueue, prefix: str) -> dict[str, Any]:
    return {"connection": jobs, "prefix": prefix}


async def bullmq_jobs(redis_url: str, prefix: str, count: int, **opts: Any) -> list[str]:
    """``count`` waiting jobs added by real BullMQ to ``main``; their (automatic) ids."""
    queue = bullmq.Queue("main", {"connection": redis_url, "prefix": prefix})
    ids = [(await queue.add("from-redis", {"n": n}, opts)).id for n in range(count)]
    await queue.close()
    return ids


async def same_job_in_both(
    redis_url: str, jobs: JobQueue, prefix: str, job_ids: list[str]
) -> list[Any]:
    """For each id: the data real BullMQ's getJob returns, asserted equal to the facade's."""
    real = bullmq.Queue("main", {"connection": redis_url, "prefix": prefix})
    ours = bullmq_compat.Queue("main", facade(jobs, prefix))
    found = []
    for job_id in job_ids:
        theirs = await real.getJob(job_id)
        mine = await ours.getJob(job_id)
        assert theirs is not None and mine is not None, job_id
        assert (mine.id, mine.name, mine.data) == (theirs.id, theirs.name, theirs.data), job_id
        found.append(mine.data)
    await real.close()
    await ours.close()
    return found


async def test_ids_a_facade_producer_used_first_stay_with_the_moved_jobs(
    redis_url: str, pg_dsn: str, jobs: JobQueue, prefix: str
) -> None:
    """Facade producers added jobs 1-3 before the move; Redis has its own 1-3. After the move
    getJob(1-3) finds the moved jobs (as real BullMQ does), the facade's jobs have new ids
    the report names, and a later add gets an id past Redis's counter."""
    queue = bullmq_compat.Queue("main", facade(jobs, prefix))
    early = [await queue.add("from-postgres", {"early": n}) for n in range(3)]
    redis_ids = await bullmq_jobs(redis_url, prefix, 3)
    assert sorted(j.id for j in early) == sorted(redis_ids)  # both stores handed out 1, 2, 3

    report = await migrate(options(redis_url, pg_dsn, jobs, prefix, allow_connected=True))
    assert report.exit_code is ExitCode.OK, report.render()
    assert report.written == 3 and len(report.rekeyed) == 3, report.render()
    data = await same_job_in_both(redis_url, jobs, prefix, redis_ids)
    assert data == [{"n": 0}, {"n": 1}, {"n": 2}]

    # The facade's own jobs: reachable by the ids the report gives them, data intact.
    for early_job, line in zip(early, report.rekeyed, strict=True):
        assert line.startswith(f"{prefix}:main {early_job.id} is now "), line
        new_id = line.split(" is now ")[1].split()[0]
        found = await queue.getJob(new_id)
        assert found is not None and found.data == early_job.data
        assert found.id == new_id and int(new_id) > 3
    later = await queue.add("after", {})
    assert int(later.id) > 3 and (await queue.getJob(later.id)).data == {}  # type: ignore[union-attr]
    assert await queue.getWaitingCount() == 7
    await queue.close()


async def test_a_rerun_accepts_what_a_facade_worker_did_to_a_moved_job(
    redis_url: str, pg_dsn: str, jobs: JobQueue, prefix: str
) -> None:
    """Run 1 moves a job; a facade worker fails its first attempt (it waits for its retry,
    'delayed'); run 2 with --delete-from-redis reports that progress and deletes."""
    (job_id,) = await bullmq_jobs(
        redis_url, prefix, 1, attempts=2, backoff={"type": "fixed", "delay": HOUR_MS}
    )
    first = await migrate(options(redis_url, pg_dsn, jobs, prefix))
    assert first.exit_code is ExitCode.OK, first.render()

    failed = asyncio.Event()

    async def fail(job: Any, token: str) -> None:
        raise Exception("first attempt fails")

    worker = bullmq_compat.Worker("main", fail, facade(jobs, prefix))
    worker.on("failed", lambda *_: failed.set())
    await asyncio.wait_for(failed.wait(), 30)
    await worker.close()
    queue = bullmq_compat.Queue("main", facade(jobs, prefix))
    assert await queue.getJobState(job_id) == "delayed"

    second = await migrate(options(redis_url, pg_dsn, jobs, prefix, delete_from_redis=True))
    assert second.exit_code is ExitCode.OK, second.render()
    assert second.verified is True and second.problems == []
    assert second.already_done == 1 and second.progressed == {"delayed": 1}
    assert second.deleted == [f"{prefix}:main"]
    assert "moved earlier and progressed since: delayed 1" in second.render()
    moved = await queue.getJob(job_id)
    assert moved is not None and moved.attemptsMade == 1 and moved.data == {"n": 0}
    await queue.close()


async def test_a_jobid_and_a_deduplication_id_used_on_both_sides_keep_postgresql_s_job(
    redis_url: str, pg_dsn: str, jobs: JobQueue, prefix: str
) -> None:
    """BullMQ's rule for an add under an existing jobId or a held deduplication id: the job
    already there stays. The Redis copies are not written, each is listed with both states,
    the run exits 0 and --delete-from-redis removes them from Redis."""
    ours = bullmq_compat.Queue("main", facade(jobs, prefix))
    kept = await ours.add("pg", {"side": "postgres"}, {"jobId": "order-7"})
    held = await ours.add("pg", {"side": "postgres"}, {"deduplication": {"id": "dd"}})
    real = bullmq.Queue("main", {"connection": redis_url, "prefix": prefix})
    await real.add("redis", {"side": "redis"}, {"jobId": "order-7"})
    dropped = await real.add("redis", {"side": "redis"}, {"deduplication": {"id": "dd"}})
    plain = await real.add("redis", {"side": "redis"})
    await real.close()

    report = await migrate(options(redis_url, pg_dsn, jobs, prefix, delete_from_redis=True))
    assert report.exit_code is ExitCode.OK, report.render()
    named = sorted(c.split(": ")[0] for c in report.collisions)
    assert named == sorted([f"{prefix}:main order-7", f"{prefix}:main {dropped.id}"]), named
    assert all("state there: waiting; in Redis: waiting" in c for c in report.collisions)
    assert report.deleted == [f"{prefix}:main"]
    assert (await ours.getJob("order-7")).data == {"side": "postgres"}  # type: ignore[union-attr]
    assert (await ours.getJob(held.id)).data == {"side": "postgres"}  # type: ignore[union-attr]
    assert (await ours.getJob(plain.id)).data == {"side": "redis"}  # type: ignore[union-attr]
    assert await ours.getWaitingCount() == 3 and kept.id == "order-7"
    client = aioredis.from_url(redis_url)
    assert not await client.exists(f"{prefix}:main:order-7")
    await client.aclose()
    await ours.close()


async def test_a_rerun_after_a_finished_move_says_nothing_is_left(
    redis_url: str, pg_dsn: str, jobs: JobQueue, prefix: str
) -> None:
    """The tool killed after --delete-from-redis finished, and run again: nothing to move,
    what earlier runs moved is summarised, exit 0."""
    await bullmq_jobs(redis_url, prefix, 2)
    done = await migrate(options(redis_url, pg_dsn, jobs, prefix, delete_from_redis=True))
    assert done.exit_code is ExitCode.OK and done.deleted, done.render()
    again = await migrate(options(redis_url, pg_dsn, jobs, prefix, delete_from_redis=True))
    assert again.exit_code is ExitCode.OK, again.render()
    assert again.earlier == {f"{prefix}:main": 2} and again.written == 0
    assert again.render().startswith("nothing left to move")
    other = await migrate(options(redis_url, pg_dsn, jobs, prefix + "-never-used"))
    assert other.exit_code is ExitCode.REFUSED  # a prefix nothing was ever moved from
