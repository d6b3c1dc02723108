"""A dataset written the way a BullMQ application writes it, through the facade, for the
dashboard's screenshots (``./run screenshots``) and its bench (``./run bench-dashboard``): five
queues (``webhooks`` paused), finished jobs with return values and multi-attempt failures,
order flows blocked by a failed ``charge-card``, three-level report flows, prioritized and
delayed jobs, job schedulers, logs, and a slow job left active with its progress."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import bullmq_compat
from pgjobs import JobQueue


@dataclass
class Dataset:
    failed_job: int = 0
    """The engine id of a job that failed its three attempts."""
    blocked_flow: int = 0
    blocked_root: int = 0
    """A flow held by its failed charge-card."""
    active_job: int = 0
    """The job left active, its progress at 40%."""
    release: asyncio.Event = field(default_factory=asyncio.Event)
    """Set it to let the active job end (``close`` does)."""
    _closing: list[Any] = field(default_factory=list)

    async def close(self) -> None:
        self.release.set()
        for obj in reversed(self._closing):
            await obj.close()


async def _drain(queue: Any, worker: Any, expected: int) -> None:
    """Wait until ``expected`` jobs of ``queue`` have finished (completed or failed)."""
    done = asyncio.get_running_loop().create_future()
    seen = 0

    def finished(*_: Any) -> None:
        nonlocal seen
        seen += 1
        if seen >= expected and not done.done():
            done.set_result(None)

    worker.on("completed", finished)
    worker.on("failed", finished)
    await asyncio.wait_for(done, 120)


async def write(jobs: JobQueue, scale: int = 1) -> Dataset:
    """Write the dataset on ``jobs`` (``scale`` multiplies the finished jobs)."""
    data = Dataset()
    opts = {"connection": jobs}
    queues = {name: bullmq_compat.Queue(name, opts) for name in
              ("emails", "image-resize", "reports", "webhooks", "orders", "payments")}  # fmt: skip
    data._closing.extend(queues.values())

    # emails: finished history with return values, then waiting, prioritized and delayed jobs
    async def send(job: Any, token: Any) -> dict[str, Any]:
        await job.log(f"rendering template {job.name}")
        await job.log(f"sent to {job.data['to']}")
        if job.data["n"] % 17 == 0:
            raise RuntimeError(f"SMTP 451 for {job.data['to']}: try again later")
        return {"messageId": f"<{job.data['n']}@mail.example.com>"}

    history = 300 * scale
    await queues["emails"].addBulk([
        {"name": "welcome", "data": {"to": f"user{n}@example.com", "n": n}}
        for n in range(history)
    ])  # fmt: skip
    worker = bullmq_compat.Worker("emails", send, {**opts, "concurrency": 20})
    await _drain(queues["emails"], worker, history)
    await worker.close()
    for n in range(40):
        await queues["emails"].add("welcome", {"to": f"new{n}@example.com", "n": n})
    for n in range(12):
        await queues["emails"].add("invoice", {"to": f"vip{n}@example.com", "n": n},
                                   {"priority": 1 + n % 3})  # fmt: skip
    for n in range(8):
        await queues["emails"].add("digest", {"to": f"d{n}@example.com", "n": n},
                                   {"delay": 900_000 * (n + 1)})  # fmt: skip
    await queues["emails"].upsertJobScheduler(
        "weekly-digest", {"pattern": "0 9 * * 1", "tz": "Europe/Paris"},
        {"name": "digest", "data": {"to": "all@example.com", "n": 0}},
    )  # fmt: skip
    await queues["emails"].upsertJobScheduler(
        "retry-bounces", {"every": 900_000}, {"name": "bounces", "data": {"n": 0}}
    )

    # webhooks: failures over three attempts each, then paused with work waiting
    async def post(job: Any, token: Any) -> None:
        await job.log(f"POST https://hooks.example.com/t/{job.data['n']}")
        raise RuntimeError(f"POST https://hooks.example.com/t/{job.data['n']} answered 503")

    failing = [await queues["webhooks"].add("order.created", {"n": n},
                                             {"attempts": 3, "backoff": 10})
               for n in range(6)]  # fmt: skip
    worker = bullmq_compat.Worker("webhooks", post, {**opts, "concurrency": 6})
    await _drain(queues["webhooks"], worker, 6 * 3)  # 'failed' comes with every attempt
    await worker.close()
    data.failed_job = failing[0].engine_id
    for n in range(25):
        await queues["webhooks"].add("order.created", {"n": 100 + n})
    await queues["webhooks"].pause()

    # orders: flows whose charge-card fails, which blocks the order for ever
    flows = bullmq_compat.FlowProducer(opts)
    data._closing.append(flows)
    roots = []
    for n in range(6):
        tree = await flows.add({
            "name": "ship-order", "queueName": "orders", "data": {"order": n},
            "children": [
                {"name": "charge-card", "queueName": "payments", "data": {"order": n},
                 "opts": {"failParentOnFailure": False}},
                {"name": "reserve-stock", "queueName": "orders", "data": {"order": n}},
            ],
        })  # fmt: skip
        assert tree is not None
        roots.append(tree["job"].engine_id)

    async def charge(job: Any, token: Any) -> str:
        if job.data["order"] % 3 == 0:
            raise RuntimeError("card declined: insufficient funds")
        return "charged"

    async def ship(job: Any, token: Any) -> str:
        return "shipped" if job.name == "ship-order" else "reserved"

    payer = bullmq_compat.Worker("payments", charge, opts)
    await _drain(queues["payments"], payer, 6)
    await payer.close()
    shipper = bullmq_compat.Worker("orders", ship, opts)
    await _drain(queues["orders"], shipper, 6 + 4)  # six reservations, four orders shipped
    await shipper.close()
    blocked = await jobs.get(roots[0])
    assert blocked is not None and blocked.flow_id is not None
    data.blocked_flow = blocked.flow_id
    data.blocked_root = blocked.id

    # reports: three-level flows left waiting for their children
    for n in range(3):
        await flows.add({
            "name": "quarterly-report", "queueName": "reports", "data": {"q": n},
            "children": [{"name": "region", "queueName": "reports", "data": {"r": r},
                          "children": [{"name": "extract", "queueName": "reports",
                                        "data": {"r": r, "part": p}} for p in range(2)]}
                         for r in range(2)],
        })  # fmt: skip

    # image-resize: one slow job left active at 40%
    started = asyncio.get_running_loop().create_future()

    async def resize(job: Any, token: Any) -> str:
        await job.log("downloading original (4.2 MB)")
        await job.updateProgress(40)
        if not started.done():
            started.set_result(job.id)
        await data.release.wait()
        return "resized"

    slow = await queues["image-resize"].add("resize", {"image": "cat.jpg", "width": 800})
    resizer = bullmq_compat.Worker("image-resize", resize, opts)
    data._closing.append(resizer)
    await asyncio.wait_for(started, 30)
    data.active_job = slow.engine_id
    for n in range(15):
        await queues["image-resize"].add("resize", {"image": f"img{n}.png", "width": 400})
    return data
