"""Attaching a prerequisite without waiting (``wait=False``, BullMQ's child added to a waiting
parent): the pending dependent stays claimable, its completion is refused while the
prerequisite is open, a dependent already held back keeps waiting, and once claimed a job
waits for its prerequisites again. Interleavings with the claim and the completion, and a
stress run of attaches, claims and completions together."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import asyncpg
import pydantic
import pytest

from pgjobs import Flow, InvalidFlow, JobContext, JobQueue, Registry
from pgjobs.completer import write_outcomes, write_outcomes_refusing
from pgjobs.outcomes import Outcome
from tests.interleave import overlap


class Item(pydantic.BaseModel):
    n: int = 0


@pytest.fixture
def kinds(registry: Registry) -> None:
    @registry.kind("x", input=Item, max_attempts=1)
    async def x(ctx: JobContext, item: Item) -> int:
        return item.n

    @registry.kind("c", input=Item, queue="children", max_attempts=1)
    async def c(ctx: JobContext, item: Item) -> int:
        return item.n


async def _claim(jobs: JobQueue, queue: str = "default", limit: int = 10) -> list[Any]:
    kinds = ["x"] if queue == "default" else ["c"]
    rows = await jobs.db.fetch("claim", [queue], kinds, limit, 30.0, 0)
    return sorted(rows, key=lambda r: r["id"])


async def _waits(jobs: JobQueue, job_id: int) -> bool:
    return bool(
        await jobs.pool.fetchval(f"SELECT waits FROM {jobs.db.schema}.jobs WHERE id = $1", job_id)
    )


def _complete(jobs: JobQueue, row: Any) -> Any:
    async def write(conn: Any) -> tuple[set[int], set[int]]:
        outcome = Outcome(row["id"], row["lock_token"], "completed", output_json="1")
        return await write_outcomes_refusing(jobs.db, [outcome], conn)

    return write


async def test_a_waiting_job_given_a_prerequisite_without_waiting_stays_claimable(
    jobs: JobQueue, kinds
) -> None:
    parent = await jobs.enqueue("x", {"n": 1})
    child = await jobs.add_prerequisite(parent.id, "c", {"n": 2}, wait=False)
    row = await jobs.get(parent.id)
    assert row is not None and row.pending_deps == 1 and row.sub_state == "ready"
    [claimed] = await _claim(jobs)
    assert claimed["id"] == parent.id
    assert await _waits(jobs, parent.id)  # a claim makes it wait again if it goes back
    written, refused = await _complete(jobs, claimed)(None)
    assert written == set() and refused == {parent.id}
    row = await jobs.get(parent.id)
    assert row is not None and row.status == "running"
    [kid] = await _claim(jobs, "children")
    assert kid["id"] == child.id
    await write_outcomes(
        jobs.db, [Outcome(kid["id"], kid["lock_token"], "completed", output_json="2")]
    )
    written, refused = await _complete(jobs, claimed)(None)
    assert written == {parent.id} and refused == set()


async def test_a_job_held_by_prerequisites_keeps_waiting_for_one_attached_without_waiting(
    jobs: JobQueue, kinds
) -> None:
    flow = Flow("held")
    flow.add("parent", "x", {"n": 0})
    flow.add("child", "c", {"n": 1})
    flow.edge("child", "parent")
    submitted = await jobs.submit_flow(flow)  # a flow's parent waits for its children
    parent_id = submitted.job_ids["parent"]
    await jobs.add_prerequisite(parent_id, "c", {"n": 2}, wait=False)
    row = await jobs.get(parent_id)
    assert row is not None and row.pending_deps == 2 and row.sub_state == "waiting_children"
    assert await _claim(jobs) == []


async def test_attaching_with_waiting_after_without_makes_the_job_wait(
    jobs: JobQueue, kinds
) -> None:
    parent = await jobs.enqueue("x", {"n": 1})
    first = await jobs.add_prerequisite(parent.id, "c", {"n": 2}, wait=False)
    second = await jobs.enqueue("c", {"n": 3})
    await jobs.add_dependency(second.id, parent.id)  # wait=True, the default
    row = await jobs.get(parent.id)
    assert row is not None and row.pending_deps == 2 and row.sub_state == "waiting_children"
    assert await _claim(jobs) == []
    for kid in await _claim(jobs, "children"):
        await write_outcomes(
            jobs.db, [Outcome(kid["id"], kid["lock_token"], "completed", output_json="0")]
        )
    assert {first.id, second.id} <= {p["id"] for p in await jobs.prerequisite_results(parent.id)}
    [claimed] = await _claim(jobs)
    assert claimed["id"] == parent.id


async def test_a_claimed_job_given_back_waits_for_its_prerequisites(jobs: JobQueue, kinds) -> None:
    """Once claimed, a job attached to without waiting waits for its prerequisites when it goes
    back to pending (WaitForPrerequisites, a retry): it is not claimable until they end."""
    parent = await jobs.enqueue("x", {"n": 1})
    await jobs.add_prerequisite(parent.id, "c", {"n": 2}, wait=False)
    [claimed] = await _claim(jobs)
    back = Outcome(claimed["id"], claimed["lock_token"], "pending", refund_attempt=1)
    assert await write_outcomes(jobs.db, [back]) == {parent.id}
    row = await jobs.get(parent.id)
    assert row is not None and row.sub_state == "waiting_children"
    assert await _claim(jobs) == []


async def test_the_claim_reads_its_index(jobs: JobQueue, kinds) -> None:
    """The claim's pick goes through jobs_claim_idx, whose predicate names waits: the plan of
    the statement inside claim_jobs, as auto_explain logs it."""
    await jobs.enqueue("x", {"n": 1})
    plans: list[str] = []

    def listen(_conn: Any, message: Any) -> None:
        plans.append(str(message.message))

    async with jobs.pool.acquire() as conn:
        conn.add_log_listener(listen)
        try:
            await conn.execute("LOAD 'auto_explain'")
        except asyncpg.PostgresError as exc:
            pytest.skip(f"auto_explain unavailable: {exc}")
        await conn.execute(
            "SET auto_explain.log_min_duration = 0; SET auto_explain.log_nested_statements = on;"
            " SET client_min_messages = log"
        )
        async with conn.transaction():
            await jobs.db.fetch("claim", ["default"], ["x"], 1, 30.0, 0, conn=conn)
        await conn.execute("RESET client_min_messages; RESET auto_explain.log_min_duration")
        conn.remove_log_listener(listen)
    pick = [p for p in plans if "SKIP LOCKED" in p and "pending_deps" in p]
    assert pick, plans
    assert "jobs_claim_idx" in pick[0] and "Seq Scan" not in pick[0], pick[0]


@pytest.mark.parametrize("second_commits_first", [False, True])
async def test_an_attach_without_waiting_and_a_claim_overlap(
    jobs: JobQueue, kinds, second_commits_first: bool
) -> None:
    """The attach holds the pending job locked: a claim then skips it (never waits), and takes
    it once the attach has committed, claimable still."""
    parent = await jobs.enqueue("x", {"n": 1})

    async def attach(conn: Any) -> Any:
        return await jobs.add_prerequisite(parent.id, "c", {"n": 2}, wait=False, connection=conn)

    async def claim(conn: Any) -> list[Any]:
        return list(await jobs.db.fetch("claim", ["default"], ["x"], 1, 30.0, 0, conn=conn))

    _, claimed, waited = await overlap(
        jobs.pool, attach, claim, second_commits_first=second_commits_first
    )
    assert not waited and claimed == []
    [row] = await _claim(jobs)
    assert row["id"] == parent.id
    _, refused = await _complete(jobs, row)(None)
    assert refused == {parent.id}


async def test_a_claim_and_an_attach_without_waiting_overlap(jobs: JobQueue, kinds) -> None:
    """Claim first: the attach waits for its commit, then finds the job running; it counts the
    edge, and the completion is refused."""
    parent = await jobs.enqueue("x", {"n": 1})

    async def claim(conn: Any) -> list[Any]:
        return list(await jobs.db.fetch("claim", ["default"], ["x"], 1, 30.0, 0, conn=conn))

    async def attach(conn: Any) -> Any:
        return await jobs.add_prerequisite(parent.id, "c", {"n": 2}, wait=False, connection=conn)

    [row], _, waited = await overlap(jobs.pool, claim, attach)
    assert waited
    job = await jobs.get(parent.id)
    assert job is not None and job.status == "running" and job.pending_deps == 1
    assert await _waits(jobs, parent.id)
    _, refused = await _complete(jobs, row)(None)
    assert refused == {parent.id}


@pytest.mark.parametrize("attach_first", [True, False])
async def test_an_attach_without_waiting_and_a_completion_overlap(
    jobs: JobQueue, kinds, attach_first: bool
) -> None:
    """The job was claimed before the attach: the completion is decided on its locked row.
    Attach first: the completion waits, then is refused. Completion first: the attach waits,
    then is refused (the job is completed)."""
    parent = await jobs.enqueue("x", {"n": 1})
    [row] = await _claim(jobs)

    async def attach(conn: Any) -> Any:
        return await jobs.add_prerequisite(parent.id, "c", {"n": 2}, wait=False, connection=conn)

    if attach_first:
        _, (written, refused), waited = await overlap(jobs.pool, attach, _complete(jobs, row))
        assert waited and written == set() and refused == {parent.id}
    else:
        with pytest.raises(InvalidFlow, match="completed"):
            await overlap(jobs.pool, _complete(jobs, row), attach)
        job = await jobs.get(parent.id)
        assert job is not None and job.status == "completed" and job.pending_deps == 0


async def test_stress_attaches_without_waiting_claims_and_completions(
    jobs: JobQueue, kinds
) -> None:
    """Attaches without waiting race claims and completions of their parents and children:
    no parent ever completes while a prerequisite of it is open, and every parent completes."""
    parents = [(await jobs.enqueue("x", {"n": i})).id for i in range(30)]
    rng = random.Random(7)

    async def attacher() -> None:
        for parent_id in rng.sample(parents, len(parents)):
            try:
                await jobs.add_prerequisite(parent_id, "c", {"n": parent_id}, wait=False)
            except InvalidFlow:  # the parent completed first
                pass
            await asyncio.sleep(0)

    async def runner(queue: str) -> None:
        for _ in range(400):
            rows = await _claim(jobs, queue, 3)
            for row in rows:
                written, refused = await _complete(jobs, row)(None)
                if refused:  # give it back: it then waits for its prerequisites
                    back = Outcome(row["id"], row["lock_token"], "pending", refund_attempt=1)
                    await write_outcomes(jobs.db, [back])
                elif written:
                    # Read after the completion committed: each prerequisite had completed
                    # before it. (finished_at cannot tell: it is the time the statement
                    # began, and a completion may begin, then wait for a prerequisite's.)
                    open_ = await jobs.pool.fetchval(
                        f"SELECT count(*) FROM {jobs.db.schema}.job_edges e"
                        f" JOIN {jobs.db.schema}.jobs p ON p.id = e.prerequisite_id"
                        " WHERE e.dependent_id = $1 AND p.status <> 'completed'",
                        row["id"],
                    )
                    if open_:
                        early.append(row["id"])
            left = await jobs.pool.fetchval(
                f"SELECT count(*) FROM {jobs.db.schema}.jobs WHERE status <> 'completed'"
            )
            if left == 0 and attach_done.done():
                return
            await asyncio.sleep(0.005)

    early: list[int] = []
    attach_done = asyncio.ensure_future(attacher())
    await asyncio.gather(attach_done, runner("default"), runner("children"), runner("default"))
    schema = jobs.db.schema
    assert (
        await jobs.pool.fetchval(f"SELECT count(*) FROM {schema}.jobs WHERE status <> 'completed'")
        == 0
    )
    assert early == []
    assert (
        await jobs.pool.fetchval(
            f"SELECT count(*) FROM {schema}.job_edges WHERE state <> 'satisfied'"
        )
        == 0
    )
