"""Enqueue from SQL (``{schema}.enqueue``, sql/schema/sql_enqueue.sql): from a plain asyncpg
connection with no pgjobs code, and from a trigger, a job is written as JobQueue.enqueue
writes it (every column compared), with the kind's recorded defaults, its 'added' event and
the wake-up of an idle worker; bad options are refused naming the option."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pydantic
import pytest

from pgjobs import Backoff, JobContext, JobFilter, JobQueue, Keep, Registry, Status
from tests.helpers import eventually, shared_columns, stored_row


class Mail(pydantic.BaseModel):
    to: str
    n: int


@pytest.fixture
def sent(registry: Registry) -> list[Mail]:
    seen: list[Mail] = []

    @registry.kind("send", input=Mail, queue="mail", priority=5, max_attempts=4,
                   backoff=Backoff.fixed(2), keep_completed=Keep(count=10))  # fmt: skip
    async def send(ctx: JobContext, mail: Mail) -> None:
        seen.append(mail)

    @registry.kind("labelled", input=Mail, job_name=lambda m: f"to {m.to}")
    async def labelled(ctx: JobContext, mail: Mail) -> None:
        return None

    return seen


def same_but_per_job(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert shared_columns(a) == shared_columns(b)


async def test_a_job_from_sql_is_the_job_python_writes(
    jobs: JobQueue, sent: list[Mail], plain_conn: Any
) -> None:
    await jobs.record_kinds()
    mail = {"to": "a@example.com", "n": 1}
    by_python = await jobs.enqueue("send", mail)
    text = json.dumps(mail)
    by_sql = await plain_conn.fetchval(f"SELECT {jobs.schema}.enqueue('send', $1::jsonb)", text)
    same_but_per_job(await stored_row(jobs, by_python.id), await stored_row(jobs, by_sql))
    # every option by name, the same on both paths
    later = datetime.now(UTC) + timedelta(hours=1)
    options = {"queue": "urgent", "priority": -3, "run_at": later, "max_attempts": 2,
               "dedup_key": "d", "group_key": "g", "name": "hello", "tenant": "t1",
               "metadata": {"from": "sql"}, "events": True}  # fmt: skip
    py = await jobs.enqueue("send", mail, job_key="k-py", **options)
    sql_options = {**options, "metadata": '{"from": "sql"}', "dedup_key": "d2"}
    named = ", ".join(f"{k} => ${i}" for i, k in enumerate(sql_options, start=3))
    by_sql = await plain_conn.fetchval(
        f"SELECT {jobs.schema}.enqueue('send', $1::jsonb, job_key => $2, {named})",
        text, "k-sql", *sql_options.values(),
    )  # fmt: skip
    a, b = await stored_row(jobs, py.id), await stored_row(jobs, by_sql)
    assert (a["job_key"], a["dedup_key"], b["job_key"], b["dedup_key"]) == (
        "k-py",
        "d",
        "k-sql",
        "d2",
    )
    assert a["run_at"] == b["run_at"] == later
    same_but_per_job({**a, "job_key": 0, "dedup_key": 0}, {**b, "job_key": 0, "dedup_key": 0})
    events = await jobs.pool.fetch(
        f"SELECT event FROM {jobs.schema}.job_events WHERE queue = 'urgent' ORDER BY id"
    )
    assert [e["event"] for e in events] == ["added", "added"]
    # a key held (in its queue, for its tenant): the holder's id, and nothing written
    again = await plain_conn.fetchval(
        f"SELECT {jobs.schema}.enqueue('send', $1::jsonb, job_key => 'k-sql',"
        " queue => 'urgent', tenant => 't1')",
        text,
    )
    assert again == by_sql
    assert len(await jobs.list_jobs(JobFilter(kind="send"), limit=10)) == 4
    # a delay as an interval
    delayed = await plain_conn.fetchval(
        f"SELECT {jobs.schema}.enqueue('send', $1::jsonb, delay => interval '90 seconds')", text
    )
    due = (await stored_row(jobs, delayed))["run_at"]
    assert timedelta(seconds=85) < due - datetime.now(UTC) <= timedelta(seconds=90)


async def test_a_job_added_by_a_trigger_commits_with_the_row_and_wakes_a_worker(
    jobs: JobQueue, sent: list[Mail], plain_conn: Any
) -> None:
    schema = jobs.schema
    await plain_conn.execute(f"CREATE TABLE {schema}.signups (id int PRIMARY KEY, email text)")
    await plain_conn.execute(
        f"""CREATE FUNCTION {schema}.welcome() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM {schema}.enqueue('send', jsonb_build_object('to', NEW.email, 'n', NEW.id));
            RETURN NEW;
        END $$"""
    )
    await plain_conn.execute(
        f"CREATE TRIGGER welcome AFTER INSERT ON {schema}.signups FOR EACH ROW"
        f" EXECUTE FUNCTION {schema}.welcome()"
    )
    # records its kinds as it starts; polls once a minute: only a notification wakes it soon
    worker = jobs.worker(queues=["mail"], poll_interval=60)
    running = asyncio.create_task(worker.run())
    try:
        await eventually(lambda: _recorded(jobs, "send"))
        with pytest.raises(asyncpg.DivisionByZeroError):
            async with plain_conn.transaction():  # rolled back: neither the row nor its job
                await plain_conn.execute(
                    f"INSERT INTO {schema}.signups VALUES (1, 'no@example.com')"
                )
                await plain_conn.execute("SELECT 1/0")
        assert await jobs.list_jobs(JobFilter(queue="mail")) == []
        assert await plain_conn.fetchval(f"SELECT count(*) FROM {schema}.signups") == 0
        await plain_conn.execute(f"INSERT INTO {schema}.signups VALUES (2, 'new@example.com')")

        async def completed() -> bool:
            [job] = await jobs.list_jobs(JobFilter(queue="mail"))
            return job.status is Status.COMPLETED

        await eventually(completed, timeout=30)  # well before the worker's next poll
        assert [m.to for m in sent] == ["new@example.com"]
        [job] = await jobs.list_jobs(JobFilter(queue="mail"))
        assert job.payload == {"to": "new@example.com", "n": 2} and job.worker == worker.name
    finally:
        await worker.stop()
        await running


async def _recorded(jobs: JobQueue, kind: str) -> bool:
    return bool(
        await jobs.pool.fetchval(f"SELECT count(*) FROM {jobs.schema}.kinds WHERE name = $1", kind)
    )


@pytest.mark.parametrize(
    ("call", "named"),
    [
        ("'nope', '{}'", "kind 'nope' is not recorded"),
        ("'send', '{}', priority => 5000000000::bigint::int", None),  # an int overflow in SQL
        ("'send', '{}', priority => 2000000000", "priority must be between"),
        ("'send', '{}', max_attempts => 0", "max_attempts must be between 1"),
        ("'send', '{}', run_at => now(), delay => interval '1 s'", "delay: give either"),
        ("'send', '{}', delay => interval '-1 s'", "delay must be between 0"),
        ("'send', '{}', queue => ''", "queue must be a non-empty name"),
        ("'send', '{}', job_key => ''", "job_key: must be a non-empty string"),
        ("'labelled', '{}'", "name: kind 'labelled' names its jobs"),
        ("'send', NULL", "kind and payload are required"),
    ],
)
async def test_bad_options_are_refused_naming_the_option_and_nothing_is_written(
    jobs: JobQueue, sent: list[Mail], plain_conn: Any, call: str, named: str | None
) -> None:
    await jobs.record_kinds()
    with pytest.raises(asyncpg.PostgresError) as refused:
        await plain_conn.execute(f"SELECT {jobs.schema}.enqueue({call})")
    if named is not None:
        assert named in str(refused.value), str(refused.value)
    assert await jobs.list_jobs() == []


async def test_a_named_kind_takes_the_name_given_and_runs(
    jobs: JobQueue, sent: list[Mail], plain_conn: Any
) -> None:
    await jobs.record_kinds()
    job_id = await plain_conn.fetchval(
        f"SELECT {jobs.schema}.enqueue('labelled', $1::jsonb, name => 'to b')",
        json.dumps({"to": "b", "n": 2}),
    )
    python = await jobs.enqueue("labelled", {"to": "b", "n": 2})
    same_but_per_job(await stored_row(jobs, python.id), await stored_row(jobs, job_id))
