"""Job options as a Queue maps them to the engine's: a set is mapped once per queue and then
remembered by value (an application passes few: its queues' defaultJobOptions, mostly). What
is remembered must never stand for another set: not for equal values of another type, and not
for what a caller's dict held before it was changed."""

from __future__ import annotations

import re
from typing import Any

import pytest

from bullmq_compat import Queue


@pytest.mark.parametrize(
    ("valid", "invalid", "option"),
    [
        ({"attempts": 1}, {"attempts": True}, "attempts"),
        ({"attempts": 2}, {"attempts": 2.0}, "attempts"),
        ({"priority": 1}, {"priority": True}, "priority"),
        ({"removeOnComplete": {"count": 1}}, {"removeOnComplete": {"count": True}},
         "removeOnComplete.count"),
    ],
)  # fmt: skip
async def test_a_set_seen_before_is_not_taken_for_equal_values_of_another_type(
    opts: dict[str, Any], valid: dict[str, Any], invalid: dict[str, Any], option: str
) -> None:
    queue = Queue("options", opts)
    await queue.add("x", {}, valid)
    with pytest.raises(ValueError, match=re.escape(f"option '{option}'")):
        await queue.add("x", {}, invalid)
    assert await queue.count() == 1
    await queue.close()


async def test_each_set_keeps_its_own_values_and_types(opts: dict[str, Any]) -> None:
    """``removeOnComplete: true`` removes a job at once, ``1`` keeps the newest one: equal in
    Python, two different sets."""
    queue = Queue("options", opts)
    removed_at_once = await queue.add("x", {}, {"removeOnComplete": True})
    keeps_one = await queue.add("x", {}, {"removeOnComplete": 1})
    again = await queue.add("x", {}, {"removeOnComplete": True})
    stored = [await queue.getJob(job.id) for job in (removed_at_once, keeps_one, again)]
    assert [job.opts["removeOnComplete"] for job in stored if job is not None] == [True, 1, True]
    assert [type(job.opts["removeOnComplete"]) for job in stored if job is not None] == [
        bool,
        int,
        bool,
    ]
    await queue.close()


async def test_changing_a_dict_after_an_add_changes_nothing_remembered(
    opts: dict[str, Any],
) -> None:
    """The options of a later add with the first add's values are those values, though the
    caller changed the dicts it passed first."""
    queue = Queue("options", opts)
    given = {"attempts": 2, "backoff": {"type": "fixed", "delay": 10}}
    await queue.add("x", {}, given)
    given["backoff"]["delay"] = 20
    later = await queue.add("x", {}, {"attempts": 2, "backoff": {"type": "fixed", "delay": 10}})
    stored = await queue.getJob(later.id)
    assert stored is not None and stored.opts["backoff"] == {"type": "fixed", "delay": 10}
    await queue.close()
