"""Reliability: bad input through the facade's entry points. Each call gets an error naming the
option at fault, and nothing is written."""

from __future__ import annotations

import re
from typing import Any

import pytest

from bullmq_compat import FlowProducer, Queue
from pgjobs import JobQueue

pytestmark = pytest.mark.reliability

BAD_OPTS: list[tuple[dict[str, Any], str]] = [
    ({"priority": "high"}, "priority"),
    ({"priority": -1}, "priority"),
    ({"priority": 2**21}, "priority"),
    ({"priority": True}, "priority"),
    ({"delay": -5}, "delay"),
    ({"delay": "soon"}, "delay"),
    ({"delay": 10**16}, "delay"),  # milliseconds, named as BullMQ names them
    ({"attempts": -1}, "attempts"),
    ({"attempts": 2.5}, "attempts"),
    ({"backoff": {"type": 7}}, "backoff.type"),
    ({"backoff": {"type": "fixed", "delay": -5}}, "backoff.delay"),
    ({"backoff": {"type": "fixed", "delay": 10, "jitter": 3}}, "backoff.jitter"),
    ({"backoff": "fast"}, "backoff"),
    ({"jobId": "123"}, "jobId"),
    ({"jobId": "x" * 2000}, "jobId"),
    ({"jobId": "a\x00b"}, "jobId"),
    ({"removeOnComplete": {"count": -1}}, "removeOnComplete.count"),
    ({"removeOnFail": {"age": "old"}}, "removeOnFail.age"),
    ({"deduplication": {"id": "d" * 2000}}, "deduplication.id"),
    ({"parent": {"id": "p", "queue": "bull:q"}, "lifo": {1, 2}}, "opts"),
    ({"removeOnComplete": "yes"}, "removeOnComplete"),
    ({"removeOnFail": [1]}, "removeOnFail"),
    ({"deduplication": "dd"}, "deduplication"),
    ({"deduplication": {"id": "d", "ttl": -1}}, "deduplication.ttl"),
    ({"deduplication": {"id": "d", "bogus": 1}}, "deduplication"),
    ({"repeat": {"every": 10}}, "repeat"),
    ({"debounce": {"id": "x"}}, "debounce"),
    ({"parent": {"id": "x"}}, "parent"),
]


@pytest.mark.parametrize(("opts", "field"), BAD_OPTS, ids=[f for _, f in BAD_OPTS])
async def test_bad_job_options_are_named_and_write_nothing(
    jobs: JobQueue, opts: dict[str, Any], field: str
) -> None:
    queue = Queue("bad", {"connection": jobs})
    with pytest.raises(ValueError, match=re.escape(f"option '{field}'")):
        await queue.add("x", {"n": 1}, opts)
    with pytest.raises(ValueError, match=re.escape(f"option '{field}'")):
        await queue.addBulk([{"name": "ok", "data": {}}, {"name": "x", "data": {}, "opts": opts}])
    assert await queue.count() == 0  # the good job of the bulk was not written either
    await queue.close()


async def test_bad_data_schedulers_flows_and_connections(jobs: JobQueue) -> None:
    queue = Queue("bad", {"connection": jobs})
    with pytest.raises(ValueError, match=r"NaN|JSON|nan"):
        await queue.add("x", {"n": float("nan")})
    with pytest.raises(ValueError, match=r"every|pattern"):
        await queue.upsertJobScheduler("s", {}, "x", {})
    with pytest.raises(ValueError):
        await queue.upsertJobScheduler("s", {"pattern": "not a cron"}, "x", {})
    with pytest.raises(ValueError, match="jobId"):
        await queue.upsertJobScheduler("s", {"every": 1000}, "x", {}, {"jobId": "a"})
    with pytest.raises(ValueError, match="queueName"):
        await FlowProducer({"connection": jobs}).add({"name": "p", "data": {}})
    with pytest.raises(ValueError, match="failParentOnFailure"):
        await FlowProducer({"connection": jobs}).add({
            "name": "p", "queueName": "bad", "data": {},
            "children": [{"name": "c", "queueName": "bad", "data": {},
                          "opts": {"failParentOnFailure": True,
                                   "continueParentOnFailure": True}}],
        })  # fmt: skip
    with pytest.raises(ValueError, match="getMetrics type"):
        await queue.getMetrics("sometimes")
    with pytest.raises(ValueError, match="unknown job state"):
        await queue.getJobCounts("sleeping")
    with pytest.raises(TypeError, match="connection"):
        await Queue("bad", {"connection": 42}).count()
    assert await queue.count() == 0 and await jobs.list_schedules() == []
    await queue.close()
