"""How the dashboard speaks of a queue, decided by the queue (``JobQueue.describe_queue``), not
by the jobs on a page: the name its application gives it, and its jobs grouped in tabs, in the
engine's sub-states for a native queue or in BullMQ's states for a queue of the BullMQ facade
(dialect ``"bullmq"``), each tab with its count."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pgjobs.models import FlowSummary, QueueDescription, SubState
from pgjobs.tracking import JobOrder

BULLMQ = "bullmq"
BULLMQ_NO_PRIORITY = 10
"""The engine priority of a BullMQ job added without one (bullmq_compat's NO_PRIORITY; a test
checks they agree): BullMQ's ``waiting``; any other pending priority is ``prioritized``."""


@dataclass(frozen=True, slots=True)
class Tab:
    """One state tab of a queue page: its key in the URL (``?state=``), its title, the
    JobFilter fields that select its jobs and the order they are listed in."""

    key: str
    title: str
    where: dict[str, Any] = field(default_factory=dict)
    order: JobOrder = "created"
    oldest_first: bool = False


ENGINE_TABS = (
    Tab("all", "All", order="recent"),
    Tab("ready", "Ready", {"sub_state": SubState.READY}, "claim", True),
    Tab("active", "Active", {"sub_state": SubState.ACTIVE}, "started"),
    Tab("delayed", "Delayed", {"sub_state": SubState.DELAYED}, "due", True),
    Tab("retry", "Retry", {"sub_state": SubState.RETRY}, "due", True),
    Tab("waiting_children", "Waiting children", {"sub_state": SubState.WAITING_CHILDREN}),
    Tab("completed", "Completed", {"sub_state": SubState.COMPLETED}, "finished"),
    Tab("failed", "Failed", {"sub_state": SubState.FAILED}, "finished"),
    Tab("cancelled", "Cancelled", {"sub_state": SubState.CANCELLED}, "finished"),
)
"""A native queue's tabs: every job, then one per sub-state."""

BULLMQ_TABS = (
    Tab("latest", "Latest", order="recent"),
    Tab("active", "Active", {"sub_state": SubState.ACTIVE}, "started"),
    Tab("waiting", "Waiting",
        {"sub_state": SubState.READY, "priority": BULLMQ_NO_PRIORITY}, "claim", True),
    Tab("prioritized", "Prioritized",
        {"sub_state": SubState.READY, "max_priority": BULLMQ_NO_PRIORITY - 1}, "claim", True),
    Tab("delayed", "Delayed", {"sub_state": (SubState.DELAYED, SubState.RETRY)}, "due", True),
    Tab("waiting-children", "Waiting children", {"sub_state": SubState.WAITING_CHILDREN}),
    Tab("completed", "Completed", {"sub_state": SubState.COMPLETED}, "finished"),
    Tab("failed", "Failed", {"sub_state": (SubState.FAILED, SubState.CANCELLED)}, "finished"),
)  # fmt: skip
"""A BullMQ queue's tabs, as BullMQ's states (bull-board's order): a retry waiting for its
backoff is ``delayed``, a cancelled job ``failed`` (BullMQ has no cancelled state)."""

BULLMQ_STATE_OF = {
    SubState.DELAYED: "delayed",
    SubState.RETRY: "delayed",
    SubState.WAITING_CHILDREN: "waiting-children",
    SubState.ACTIVE: "active",
    SubState.COMPLETED: "completed",
    SubState.FAILED: "failed",
    SubState.CANCELLED: "failed",
}


def bullmq_state(sub_state: SubState, priority: int) -> str:
    """BullMQ's state of a facade job (what its ``getState`` says)."""
    if sub_state is SubState.READY:
        return "waiting" if priority == BULLMQ_NO_PRIORITY else "prioritized"
    return BULLMQ_STATE_OF[sub_state]


def bullmq_priority(priority: int) -> int:
    """BullMQ's priority of a facade job (0: none)."""
    return 0 if priority == BULLMQ_NO_PRIORITY else BULLMQ_NO_PRIORITY - priority


def engine_priority(priority: int) -> int:
    """The engine priority of BullMQ priority ``priority`` (0: none), as the facade writes it."""
    return BULLMQ_NO_PRIORITY if priority == 0 else BULLMQ_NO_PRIORITY - priority


def tabs_of(dialect: str | None) -> tuple[Tab, ...]:
    return BULLMQ_TABS if dialect == BULLMQ else ENGINE_TABS


def tab_counts(
    dialect: str | None, counts: dict[SubState, int], unprioritized: int
) -> dict[str, int]:
    """How many jobs each tab holds, from the queue's sub-state counts and, for a BullMQ
    queue, how many of its ready jobs have no priority (``unprioritized``)."""
    total = sum(counts.values())
    if dialect != BULLMQ:
        return {"all": total, **{s.value: n for s, n in counts.items()}}
    return {
        "latest": total,
        "active": counts[SubState.ACTIVE],
        "waiting": unprioritized,
        "prioritized": counts[SubState.READY] - unprioritized,
        "delayed": counts[SubState.DELAYED] + counts[SubState.RETRY],
        "waiting-children": counts[SubState.WAITING_CHILDREN],
        "completed": counts[SubState.COMPLETED],
        "failed": counts[SubState.FAILED] + counts[SubState.CANCELLED],
    }


@dataclass(frozen=True, slots=True)
class QueueName:
    """A queue as the dashboard names it: its engine name, the name shown, the URL segment
    that leads to it, and its dialect."""

    queue: str
    shown: str
    segment: str
    dialect: str | None


class QueueNames:
    """The names of the queues: a described queue is shown, and reached, by its label when no
    other described queue has that label or that engine name; any queue is reached by its
    engine name too."""

    def __init__(self, descriptions: list[QueueDescription]) -> None:
        self._described = {d.queue: d for d in descriptions}
        labels: dict[str, list[str]] = {}
        for d in descriptions:
            if d.label is not None:
                labels.setdefault(d.label, []).append(d.queue)
        self._by_label = {
            label: queues[0]
            for label, queues in labels.items()
            if len(queues) == 1 and (label not in self._described or queues[0] == label)
        }

    def of(self, queue: str) -> QueueName:
        described = self._described.get(queue)
        if described is None:
            return QueueName(queue, queue, queue, None)
        label = described.label
        shown = label if label is not None else queue
        segment = label if label is not None and self._by_label.get(label) == queue else queue
        return QueueName(queue, shown, segment, described.dialect)

    def resolve(self, segment: str) -> QueueName:
        """The queue a URL segment names: a described queue's engine name, else a label that
        names one queue, else the segment as an engine name."""
        if segment in self._described:
            return self.of(segment)
        return self.of(self._by_label.get(segment, segment))


MOVING = (SubState.READY, SubState.ACTIVE, SubState.DELAYED, SubState.RETRY)
FINISHED_STATES = (SubState.COMPLETED, SubState.FAILED, SubState.CANCELLED)


def flow_outcome(summary: FlowSummary) -> str:
    """A flow's outcome as an operator needs it: ``blocked`` for a running flow in which
    nothing can move (none ready, active or due later) because a job failed or was cancelled
    (its dependents wait until it is requeued or removed); else the engine's outcome."""
    counts = summary.counts
    stuck = counts[SubState.FAILED] + counts[SubState.CANCELLED] > 0
    if summary.outcome == "running" and stuck and not any(counts[s] for s in MOVING):
        return "blocked"
    return summary.outcome
