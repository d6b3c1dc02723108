"""BullMQ's error classes (``bullmq.custom_errors``). A processor raises them; the worker maps
them to engine signals."""

from __future__ import annotations


class UnrecoverableError(Exception):
    """Fail the job at once, whatever attempts remain (engine: Fatal)."""


class DelayedError(Exception):
    """Raised after ``job.moveToDelayed(...)``: the attempt ends without counting (a deferral)."""


class WaitingChildrenError(Exception):
    """Raised after ``job.moveToWaitingChildren(...)`` returned True: the job waits for its
    children and runs again, without using an attempt."""


class RateLimitError(Exception):
    """Raised after ``worker.rateLimit(ms)``: the job goes back to waiting without counting."""


class GroupMaxSizeExceededError(Exception):
    """BullMQ Pro's: ``add`` of a job whose group already holds ``group.maxSize`` jobs; the job
    is not added."""
