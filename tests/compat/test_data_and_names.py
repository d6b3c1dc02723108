"""What a BullMQ queue accepts: its name, and job data exactly as BullMQ's client serialises it
(``json.dumps``): refused with the same exception, stored as ``json.loads`` gives it back."""

from __future__ import annotations

import asyncio
import datetime as dt
import decimal
import json
from typing import Any

import pytest

import pgjobs
from bullmq_compat import Queue, Worker
from bullmq_compat.mapping import KIND
from pgjobs import InvalidOption


def test_a_queue_name_cannot_contain_a_colon(opts: dict[str, Any]) -> None:
    """As BullMQ for Node refuses it: with it, Queue("b:c", prefix "p") and Queue("c", prefix
    "p:b") would be one queue."""
    with pytest.raises(InvalidOption, match="Queue name cannot contain :"):
        Queue("b:c", {**opts, "prefix": "p"})
    assert Queue("", opts).qualifiedName == "bull:"  # the Python package accepts it


async def test_queues_whose_prefixes_differ_never_share_jobs(opts: dict[str, Any]) -> None:
    first = Queue("c", {**opts, "prefix": "p:b"})
    second = Queue("c", {**opts, "prefix": "p"})
    await first.add("only-in-first", {})
    assert await second.count() == 0 and await first.count() == 1
    assert first.qualifiedName == "p:b:c" and second.qualifiedName == "p:c"


@pytest.mark.parametrize(
    "data",
    [{1, 2}, b"bytes", decimal.Decimal("1.5"), dt.datetime(2026, 1, 1), 1 + 2j, {"k": object()}],
    ids=["set", "bytes", "decimal", "datetime", "complex", "object"],
)
async def test_data_json_dumps_refuses_raises_typeerror(opts: dict[str, Any], data: Any) -> None:
    queue = Queue("data", opts)
    with pytest.raises(TypeError, match="is not JSON serializable"):
        await queue.add("x", data)
    with pytest.raises(TypeError):
        await queue.addBulk([{"name": "x", "data": data}])
    assert await queue.count() == 0


@pytest.mark.parametrize("number", [float("nan"), float("inf"), -float("inf")])
async def test_non_finite_numbers_raise_valueerror(opts: dict[str, Any], number: float) -> None:
    queue = Queue("data", opts)
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        await queue.add("x", {"n": number})
    job = await queue.add("x", {"n": 1})
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        await job.updateData({"n": number})
    assert (await queue.getJob(job.id)).data == {"n": 1}


async def test_data_is_stored_as_json_gives_it_back(opts: dict[str, Any]) -> None:
    data = {"tuple": (1, 2), 3: "int key", True: "bool key", "nested": [None, 1.5, "é"]}
    queue = Queue("data", opts)
    job = await queue.add("x", data)
    stored = (await queue.getJob(job.id)).data
    assert stored == json.loads(json.dumps(data))
    assert stored == {
        "tuple": [1, 2],
        "3": "int key",
        "true": "bool key",
        "nested": [None, 1.5, "é"],
    }


@pytest.mark.parametrize(
    "data",
    [{"s": "a\x00b"}, {"s": "\ud800"}, ["\x00", {"k\x00": 1}]],
    ids=["nul", "lone-surrogate", "nul-in-a-key"],
)
async def test_data_jsonb_cannot_hold_comes_back_exactly(opts: dict[str, Any], data: Any) -> None:
    """BullMQ stores any JSON text, so a NUL or a lone surrogate in the data is accepted and
    comes back unchanged: from add, from getJob and in the processor's job."""
    queue = Queue("exact", opts)
    added = await queue.add("x", data)
    assert added.data == data
    found = await queue.getJob(added.id)
    assert found is not None and found.data == data
    seen: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    async def process(job: Any, token: Any) -> None:
        seen.set_result(job.data)

    worker = Worker("exact", process, opts)
    assert await asyncio.wait_for(seen, 30) == data
    await worker.close()
    await queue.close()


async def test_add_bulk_without_options_keeps_each_name_data_and_order(
    opts: dict[str, Any],
) -> None:
    """addBulk of jobs without options (written as one engine batch): each job keeps its own
    name and data, ids come back in order, and data jsonb cannot hold still comes back exact."""
    queue = Queue("bulk-plain", opts)
    jobs = [{"name": f"n{i % 3}", "data": {"i": i}} for i in range(50)]
    jobs[7] = {"name": "odd", "data": {"s": "a\x00b"}}  # needs its exact copy kept
    jobs[3] = {"name": "n0", "data": {"s": "\U0001f600", "t": None}}  # a surrogate pair; a null
    for batch in (jobs[:7], jobs[8:], [jobs[7], jobs[8]]):
        added = await queue.addBulk(batch)
        assert [(j.name, j.data) for j in added] == [(b["name"], b["data"]) for b in batch]
        ids = [int(j.id) for j in added]
        assert ids == sorted(ids)
        for job, given in zip(added, batch, strict=True):
            found = await queue.getJob(job.id)
            assert found is not None and (found.name, found.data) == (given["name"], given["data"])
    assert await queue.count() == 51
    await queue.close()


async def test_add_bulk_of_jobs_sharing_options_applies_them_to_each(
    opts: dict[str, Any],
) -> None:
    """addBulk of jobs that share their options (as one engine batch): every job gets them,
    merged over the queue's defaultJobOptions, and keeps its own name and data, in order. A
    bulk whose options differ, or name one job (jobId), still gives each its own."""
    queue = Queue("bulk-shared", {**opts, "defaultJobOptions": {"removeOnFail": True}})
    shared = {"priority": 3, "attempts": 4, "removeOnComplete": True}
    batch = [{"name": f"n{i % 2}", "data": {"i": i}, "opts": dict(shared)} for i in range(30)]
    added = await queue.addBulk(batch)
    assert [(j.name, j.data) for j in added] == [(b["name"], b["data"]) for b in batch]
    for job in (added[0], added[17]):
        found = await queue.getJob(job.id)
        assert found is not None and found.opts["priority"] == 3
        assert (found.attempts, found.opts["removeOnFail"]) == (4, True)
        assert await found.getState() == "prioritized"
    assert await queue.getJobCounts("prioritized") == {"prioritized": 30}

    delayed = await queue.addBulk(
        [{"name": "later", "data": {"k": k}, "opts": {"delay": 60_000}} for k in range(3)]
    )
    assert [await job.getState() for job in delayed] == ["delayed"] * 3
    mixed = await queue.addBulk(
        [
            {"name": "a", "data": {}, "opts": {"jobId": "custom-a"}},
            {"name": "b", "data": {}, "opts": {"delay": 60_000}},
            {"name": "c", "data": {}},
        ]
    )
    assert mixed[0].id == "custom-a"
    assert [await job.getState() for job in mixed] == ["waiting", "delayed", "waiting"]
    await queue.close()


async def test_add_bulk_returns_the_jobs_add_would_each_with_its_own_options(
    opts: dict[str, Any],
) -> None:
    """The jobs a bulk of shared options returns (one engine batch; each holds its own fields
    and takes the ones shared by the bulk on first read) read as what ``add`` with those
    options returns, field for field but the id, the name, the data and the timestamp; and
    each has its own ``opts`` and ``stacktrace``: a change to one job's leaves the others'."""
    queue = Queue("bulk-built", {**opts, "defaultJobOptions": {"removeOnFail": True}})
    shared = {"priority": 3, "attempts": 4, "delay": 60_000}  # delayed whatever the load
    single = await queue.add("one", {"i": -1}, dict(shared))
    bulk = await queue.addBulk(
        [{"name": f"n{i}", "data": {"i": i}, "opts": dict(shared)} for i in range(3)]
    )
    own = ("id", "engine_id", "name", "data", "timestamp")
    for index, job in enumerate(bulk):
        assert (job.name, job.data, job.id) == (f"n{index}", {"i": index}, str(job.engine_id))
        fields = [k for k in vars(single) if k not in own]
        assert {k: getattr(job, k) for k in fields} == {k: getattr(single, k) for k in fields}
        assert await job.getState() == "delayed" and job.asJSON()["opts"] == single.asJSON()["opts"]
    bulk[2].opts["attempts"] = 9
    bulk[2].stacktrace.append("trace")
    fresh = await queue.addBulk([{"name": "n", "data": {}, "opts": dict(shared)}] * 2)
    fresh[0].opts["attempts"] = 9
    fresh[0].stacktrace.append("trace")
    assert (fresh[1].opts["attempts"], fresh[1].stacktrace) == (4, [])  # read after the change
    assert (bulk[1].opts["attempts"], bulk[1].stacktrace) == (4, [])
    with pytest.raises(AttributeError, match="no_such_field"):
        bulk[1].no_such_field  # noqa: B018
    await queue.close()


async def test_replaced_data_wins_over_the_exact_copy_of_the_old(opts: dict[str, Any]) -> None:
    queue = Queue("exact-update", opts)
    added = await queue.add("x", {"s": "a\x00b"})
    await added.updateData({"s": "plain"})
    found = await queue.getJob(added.id)
    assert found is not None and found.data == {"s": "plain"}
    await queue.close()


async def test_update_data_jsonb_cannot_hold_names_the_data(opts: dict[str, Any]) -> None:
    queue = Queue("exact-update-refused", opts)
    added = await queue.add("x", {"s": "plain"})
    with pytest.raises(InvalidOption, match=r"'data'.*updateData cannot store it"):
        await added.updateData({"s": "a\x00b"})
    found = await queue.getJob(added.id)
    assert found is not None and found.data == {"s": "plain"}  # nothing half-written
    await queue.close()


async def test_a_qualified_queue_name_past_1024_bytes_is_refused_by_name(
    opts: dict[str, Any],
) -> None:
    """PORTING's kept divergence: Redis takes any length; the engine's unique indexes hold a
    queue beside a jobId and a tenant, so prefix, ':' and name take 1,024 bytes at most."""
    longest = Queue("q" * (1024 - len("bull:")), opts)
    try:
        assert (await longest.add("fits", {})).id
    finally:
        await longest.close()
    with pytest.raises(InvalidOption, match="'name'"):
        Queue("q" * (1025 - len("bull:")), opts)


async def test_automatic_ids_come_from_one_counter_for_all_queues(opts: dict[str, Any]) -> None:
    """A kept divergence (PORTING, "Job ids"): BullMQ counts ids per queue, so two queues'
    first jobs are both "1"; here an automatic id is the engine's, unique across queues, and
    getJob still looks in its own queue only."""
    first, second = Queue("ids-a", opts), Queue("ids-b", opts)
    a = await first.add("x", {"q": "a"})
    b = await second.add("x", {"q": "b"})
    assert a.id.isdigit() and b.id.isdigit() and int(b.id) > int(a.id)
    assert (await first.getJob(a.id)).data == {"q": "a"}  # type: ignore[union-attr]
    assert await first.getJob(b.id) is None and await second.getJob(a.id) is None
    await first.close()
    await second.close()


async def test_a_key_that_is_an_automatic_id_of_the_queue_wins_over_the_engine_id(
    opts: dict[str, Any],
) -> None:
    """A job a migration brought with numeric id N is getJob(N), even where the engine's job N
    of the same queue exists (the migration gives that one a new id; this is the rule that
    makes the moved job win while the two overlap)."""
    queue = Queue("ids-c", opts)
    engine = await queue.engine()
    own = await queue.add("own", {"side": "postgres"})
    await engine.import_jobs(
        [pgjobs.ImportedJob(pgjobs.JobSpec(KIND, {"side": "redis"}, queue=queue.qualifiedName,
                                           job_key=own.id, name="moved"))]
    )  # fmt: skip
    assert (await queue.getJob(own.id)).name == "moved"  # type: ignore[union-attr]
    await queue.close()


def test_json_data_gives_back_what_a_json_round_trip_gives() -> None:
    """A plain scalar comes back as it is, without encoding; anything else (a subclass of a
    scalar type included) as json.loads(json.dumps(value)), with json's errors."""
    import enum
    import json
    import math

    from bullmq_compat import json_data

    class Level(enum.IntEnum):
        HIGH = 2

    values = [None, True, 0, 2**70, "x\ud800", 1.5, -0.0, Level.HIGH, [1, (2, 3)], {"a": None}]
    for value in values:
        expected = json.loads(json.dumps(value))
        got = json_data(value)
        assert got == expected and type(got) is type(expected), value
    assert math.copysign(1, json_data(-0.0)) == -1
    with pytest.raises(ValueError, match="Out of range float"):
        json_data(float("inf"))
    with pytest.raises(TypeError, match="set is not JSON serializable"):
        json_data({1})
