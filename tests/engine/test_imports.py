"""Importing jobs with their history: states, fields, edges, logs, idempotence, id reservation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from pgjobs import (
    EdgePolicy,
    ImportedEdge,
    ImportedJob,
    ImportRecord,
    InvalidFlow,
    InvalidOption,
    JobContext,
    JobQueue,
    JobSpec,
    Registry,
    Status,
)
from tests.interleave import overlap


@pytest.fixture
def ran(registry: Registry) -> list[Any]:
    seen: list[Any] = []

    @registry.kind("any", input=Any, queue="imp")
    async def handler(ctx: JobContext, data: Any) -> Any:
        seen.append((data, await ctx.prerequisites()))
        return "ok"

    return seen


T0 = datetime(2026, 1, 1, tzinfo=UTC)


def batch() -> tuple[list[ImportedJob], list[ImportedEdge]]:
    jobs = [
        ImportedJob(JobSpec("any", {"n": 1}, job_key="1", name="done"), status="completed",
                    attempts=1, created_at=T0, started_at=T0, finished_at=T0,
                    output={"r": 1}, logs=["a", "b"], handle="child-done"),
        ImportedJob(JobSpec("any", {"n": 2}, job_key="2", max_attempts=3), status="dead",
                    attempts=3, error={"type": "Error", "message": "boom"}, handle="child-dead"),
        ImportedJob(JobSpec("any", {"n": 3}, job_key="3"), handle="parent"),
        ImportedJob(JobSpec("any", {"n": 4}, job_key="4", queue="later"),
                    run_at=T0 + timedelta(days=3650),
                    attempts=1, progress=40),
    ]  # fmt: skip
    edges = [
        ImportedEdge("child-done", "parent", EdgePolicy.BLOCK, "satisfied"),
        ImportedEdge("child-dead", "parent", EdgePolicy.IGNORE, "ignored", {"message": "boom"}),
    ]
    return jobs, edges


async def test_import_keeps_state_history_and_edges(jobs: JobQueue, ran: list[Any]) -> None:
    imported, edges = batch()
    results = await jobs.import_jobs(imported, edges)
    assert not any(r.duplicate for r in results)
    done, dead, parent, delayed = [await jobs.get(r.id) for r in results]
    assert done is not None and done.status == Status.COMPLETED and done.output == {"r": 1}
    assert done.finished_at == T0 and done.created_at == T0 and done.attempts == 1
    assert [line.line for line in (await jobs.read_logs(done.id)).lines] == ["a", "b"]
    assert dead is not None and dead.status == Status.DEAD and dead.last_error["message"] == "boom"  # type: ignore[index]
    assert delayed is not None and delayed.sub_state == "retry" and delayed.progress == 40
    assert parent is not None and parent.pending_deps == 0 and parent.flow_id == done.flow_id
    # the parent runs, reading its imported children
    await jobs.worker(queues=["imp"]).run(until_drained=True)
    data, prerequisites = ran[0]
    assert data == {"n": 3}
    assert {p["state"] for p in prerequisites} == {"satisfied", "ignored"}
    # a second import of the same batch writes nothing new
    again = await jobs.import_jobs(*batch())
    assert [r.id for r in again] == [r.id for r in results] and all(r.duplicate for r in again)
    assert len(await jobs.list_jobs(limit=100)) == 4


async def test_open_edges_hold_the_dependent(jobs: JobQueue, ran: list[Any]) -> None:
    results = await jobs.import_jobs(
        [ImportedJob(JobSpec("any", {"n": 1}), handle="c"),
         ImportedJob(JobSpec("any", {"n": 2}), handle="p")],
        [ImportedEdge("c", "p")],
    )  # fmt: skip
    parent = await jobs.get(results[1].id)
    assert (
        parent is not None and parent.pending_deps == 1 and parent.sub_state == "waiting_children"
    )
    await jobs.worker(queues=["imp"]).run(until_drained=True)
    assert [d for d, _ in ran] == [{"n": 1}, {"n": 2}]


async def test_bad_imports_write_nothing(jobs: JobQueue, ran: list[Any]) -> None:
    with pytest.raises(InvalidOption, match="status"):
        await jobs.import_jobs([ImportedJob(JobSpec("any", {}), status="running")])  # type: ignore[arg-type]
    with pytest.raises(InvalidFlow, match="handle"):
        await jobs.import_jobs([ImportedJob(JobSpec("any", {}))], [ImportedEdge("x", "y")])
    with pytest.raises(InvalidOption, match="output"):
        await jobs.import_jobs(
            [ImportedJob(JobSpec("any", {}), status="completed", output=float("nan"))]
        )
    assert await jobs.list_jobs() == []


async def test_reserve_ids_moves_new_ids_past_imported_numbers(
    jobs: JobQueue, ran: list[Any]
) -> None:
    await jobs.reserve_ids(5000)
    assert (await jobs.enqueue("any", {})).id > 5000
    await jobs.reserve_ids(10)  # never goes back
    assert (await jobs.enqueue("any", {})).id > 5000


async def test_assign_job_keys_gives_keyless_jobs_of_the_queue_fresh_ids(
    jobs: JobQueue, ran: list[Any]
) -> None:
    plain = (await jobs.enqueue("any", {"n": 1})).id
    keyed = (await jobs.enqueue("any", {"n": 2}, job_key="mine")).id
    elsewhere = (await jobs.enqueue("any", {"n": 3}, queue="other")).id
    given = await jobs.assign_job_keys("imp", [plain, keyed, elsewhere, 10**12])
    assert list(given) == [plain]  # not a keyed job, another queue's, or one that is not there
    assert int(given[plain]) > max(plain, keyed, elsewhere)
    assert (await jobs.get(plain)).job_key == given[plain]  # type: ignore[union-attr]
    assert (await jobs.enqueue("any", {})).id > int(given[plain])  # never an id of a job
    assert await jobs.assign_job_keys("imp", [plain]) == {}  # keyed now


async def test_import_sources_count_the_ledger_by_source_prefix(
    jobs: JobQueue, ran: list[Any]
) -> None:
    [written] = await jobs.import_jobs([ImportedJob(JobSpec("any", {"n": 1}, job_key="a"))])
    await jobs.record_imports([
        ImportRecord(source, job_id, written.id, "waiting", "sum")
        for source, job_id in [("bullmq:p:q", "1"), ("bullmq:p:q", "2"), ("bullmq:p:r", "1"),
                               ("bullmq:p2:q", "1"), ("b%llmq:p:q", "1")]
    ])  # fmt: skip
    assert await jobs.import_sources("bullmq:p:") == {"bullmq:p:q": 2, "bullmq:p:r": 1}
    assert await jobs.import_sources("b%") == {"b%llmq:p:q": 1}  # no pattern characters
    assert len(await jobs.import_sources()) == 4


async def test_the_import_ledger_records_only_what_its_transaction_committed(
    jobs: JobQueue, ran: list[Any]
) -> None:
    [written] = await jobs.import_jobs([ImportedJob(JobSpec("any", {"n": 1}, job_key="a"))])
    record = ImportRecord("other:q", "a", written.id, "waiting", "sum-a")
    async with jobs.transaction() as conn:
        await jobs.record_imports([record], connection=conn)
        # inside the writing transaction the record is visible to it, and only to it
        assert await jobs.imported([("other:q", "a")], connection=conn) == {
            ("other:q", "a"): record
        }
        assert await jobs.imported([("other:q", "a")]) == {}
    with pytest.raises(RuntimeError, match="rolled back"):
        async with jobs.transaction() as conn:
            await jobs.record_imports(
                [ImportRecord("other:q", "b", written.id, "waiting", "sum-b")], connection=conn
            )
            raise RuntimeError("rolled back")
    # a second record of the same pair keeps the first
    await jobs.record_imports([ImportRecord("other:q", "a", 999, "failed", "changed")])
    assert await jobs.imported([("other:q", "a"), ("other:q", "b"), ("else", "a")]) == {
        ("other:q", "a"): record
    }
    assert await jobs.imports_of("other:q") == [record]
    assert await jobs.imports_of("else") == []


async def test_two_imports_of_one_job_overlapping_write_it_and_record_it_once(
    jobs: JobQueue, ran: list[Any]
) -> None:
    """Two migration runs take the same BullMQ job at once. The second's insert waits on the
    first's job key; when it resumes, its statement's snapshot predates the first commit, yet
    it must report the job the first wrote (not a missing id), and the ledger keeps one
    record."""

    def run(tag: str) -> Any:
        async def write(conn: Any) -> int:
            [result] = await jobs.import_jobs(
                [ImportedJob(JobSpec("any", {"n": 1}, job_key="bull-7"))], connection=conn
            )
            await jobs.record_imports(
                [ImportRecord("bullmq:bull:q", "7", result.id, tag, "sum")], connection=conn
            )
            return result.id

        return write

    first_id, second_id, waited = await overlap(jobs.pool, run("first"), run("second"))
    assert waited  # the second insert waited on the first's job key
    assert second_id == first_id
    assert len(await jobs.list_jobs()) == 1
    assert [(r.job_id, r.state) for r in await jobs.imports_of("bullmq:bull:q")] == [
        (first_id, "first")
    ]


async def test_check_imports_compares_each_stored_payload_with_the_source_text(
    jobs: JobQueue, ran: list[Any]
) -> None:
    written = await jobs.import_jobs(
        [
            ImportedJob(JobSpec("any", {"a": 1, "b": [1.5, "x"]}, job_key="k1")),
            ImportedJob(JobSpec("any", {"n": 2}, job_key="k2", priority=3), status="completed"),
            ImportedJob(JobSpec("any", {"n": 3}, job_key="k3"), run_at=T0 + timedelta(days=3650)),
        ]
    )
    await jobs.record_imports(
        [ImportRecord("src", f"k{i + 1}", r.id, "waiting", "") for i, r in enumerate(written)]
    )
    await jobs.pool.execute(f"DELETE FROM {jobs.schema}.jobs WHERE id = $1", written[2].id)
    checks = await jobs.check_imports(
        [
            # other key order, spacing and escapes: equal as jsonb
            ("src", "k1", '{ "b": [1.5, "\\u0078"], "a": 1 }'),
            ("src", "k2", '{"n": 20}'),  # not what is stored
            ("src", "k3", '{"n": 3}'),  # its job is gone, its ledger record stays
            ("src", "nope", '{"n": 4}'),  # never imported
            ("src", "k1", None),  # nothing to compare
        ]
    )
    assert [c.payload_matches for c in checks] == [True, False, None, None, None]
    assert [c.job_id for c in checks] == [written[0].id, written[1].id, written[2].id, None,
                                          written[0].id]  # fmt: skip
    assert (checks[0].queue, checks[0].job_key, checks[0].sub_state) == ("imp", "k1", "ready")
    assert (checks[1].sub_state, checks[1].priority) == ("completed", 3)
    assert checks[2].sub_state is None and checks[2].queue is None
    assert await jobs.check_imports([]) == []
