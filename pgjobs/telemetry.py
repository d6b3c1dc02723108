"""OpenTelemetry for pgjobs (the ``otel`` extra): spans and metrics, off unless asked for.

- **Spans.** An enqueue call is a ``PRODUCER`` span (``pgjobs enqueue <kind>``; a flow's
  submission ``pgjobs submit flow <name>``); its trace
  context (W3C ``traceparent``) travels inside each job it writes, in ``metadata["otel"]``,
  so that every attempt's ``CONSUMER`` span (``pgjobs process <kind>``) is its child: a job's
  work shows up under the request that enqueued it, as ``bullmq-otel`` does for BullMQ. A job
  whose metadata is not a JSON object (or absent and then set by the caller) carries nothing.
- **Metrics.** ``pgjobs.job.outcomes`` (counter: attempts by queue, kind and outcome),
  ``pgjobs.job.duration`` (histogram, seconds, by queue and kind), and, refreshed by each
  worker at its heartbeat, ``pgjobs.queue.depth`` (jobs by queue and state) and
  ``pgjobs.queue.lag`` (seconds the oldest due job of a queue has waited).

``Telemetry()`` uses the global tracer and meter providers; pass your own to test or to keep
pgjobs apart. Hand it to ``JobQueue.connect(telemetry=...)``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

try:
    from opentelemetry import context as otel_context
    from opentelemetry import metrics, propagate, trace
    from opentelemetry.trace import SpanKind, Status, StatusCode

    AVAILABLE = True
except ImportError:  # pragma: no cover - exercised only without the extra
    AVAILABLE = False

if TYPE_CHECKING:
    from pgjobs.context import JobContext
    from pgjobs.outcomes import Outcome

QUEUE_STATES = ("ready", "delayed", "waiting_children", "running")
METADATA_KEY = "otel"
"""The key of a job's metadata that carries the enqueuing span's trace context."""


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pgjobs-engine")
    except PackageNotFoundError:  # pragma: no cover - a source tree that was not installed
        return "0"


class Telemetry:
    """The spans and metrics of one JobQueue (and the workers it makes)."""

    def __init__(self, *, tracer_provider: Any = None, meter_provider: Any = None) -> None:
        if not AVAILABLE:
            raise ImportError("pgjobs telemetry needs OpenTelemetry: pip install 'pgjobs[otel]'")
        self._tracer = trace.get_tracer("pgjobs", _version(), tracer_provider=tracer_provider)
        meter = metrics.get_meter("pgjobs", _version(), meter_provider=meter_provider)
        self._outcomes = meter.create_counter(
            "pgjobs.job.outcomes", unit="{attempt}", description="Job attempts by outcome"
        )
        self._duration = meter.create_histogram(
            "pgjobs.job.duration", unit="s", description="How long a job's handler ran"
        )
        self._depth = meter.create_gauge(
            "pgjobs.queue.depth", unit="{job}", description="Jobs of a queue by state"
        )
        self._lag = meter.create_gauge(
            "pgjobs.queue.lag",
            unit="s",
            description="How long the oldest due job of a queue has waited",
        )

    # -- producing -------------------------------------------------------------------------

    @contextmanager
    def enqueue_span(self, kind: str, queue: str | None, count: int) -> Iterator[dict[str, str]]:
        """A PRODUCER span around one enqueue call; yields the carrier to store in the jobs."""
        attributes: dict[str, Any] = {
            "messaging.system": "pgjobs",
            "messaging.operation.type": "send",
            "pgjobs.kind": kind,
            "messaging.batch.message_count": count,
        }
        if queue is not None:
            attributes["messaging.destination.name"] = queue
        with self._tracer.start_as_current_span(
            f"pgjobs enqueue {kind}", kind=SpanKind.PRODUCER, attributes=attributes
        ):
            carrier: dict[str, str] = {}
            propagate.inject(carrier)
            yield carrier

    @contextmanager
    def flow_span(self, name: str | None, count: int) -> Iterator[dict[str, str]]:
        """A PRODUCER span around one flow submission; yields the carrier to store in every
        node, so that each node's attempts are its children."""
        attributes: dict[str, Any] = {
            "messaging.system": "pgjobs",
            "messaging.operation.type": "send",
            "messaging.batch.message_count": count,
        }
        if name is not None:
            attributes["pgjobs.flow"] = name
        with self._tracer.start_as_current_span(
            f"pgjobs submit flow {name or ''}".rstrip(),
            kind=SpanKind.PRODUCER,
            attributes=attributes,
        ):
            carrier: dict[str, str] = {}
            propagate.inject(carrier)
            yield carrier

    @staticmethod
    def carry(metadata: Any, carrier: Mapping[str, str]) -> Any:
        """``metadata`` with the trace context added (unchanged if it is not an object)."""
        if not carrier:
            return metadata
        if metadata is None:
            return {METADATA_KEY: dict(carrier)}
        if isinstance(metadata, dict):
            return {**metadata, METADATA_KEY: dict(carrier)}
        return metadata

    # -- consuming -------------------------------------------------------------------------

    @contextmanager
    def job_span(self, ctx: JobContext) -> Iterator[JobSpan]:
        """A CONSUMER span for one attempt, child of the span that enqueued the job."""
        carried = ctx.metadata.get(METADATA_KEY) if isinstance(ctx.metadata, dict) else None
        parent = propagate.extract(carried) if isinstance(carried, dict) else None
        token = otel_context.attach(parent) if parent is not None else None
        try:
            with self._tracer.start_as_current_span(
                f"pgjobs process {ctx.kind}",
                kind=SpanKind.CONSUMER,
                attributes={
                    "messaging.system": "pgjobs",
                    "messaging.operation.type": "process",
                    "messaging.destination.name": ctx.queue,
                    "messaging.message.id": str(ctx.id),
                    "pgjobs.kind": ctx.kind,
                    "pgjobs.attempt": ctx.attempts,
                },
                record_exception=False,
                set_status_on_exception=False,
            ) as span:
                yield JobSpan(self, span, ctx)
        finally:
            if token is not None:
                otel_context.detach(token)

    def record_queues(self, queues: list[str], rows: Sequence[Any]) -> None:
        """Queue depth and lag of ``queues`` from ``queue_gauges`` rows (queue, state, jobs,
        lag): every state of every queue is set, to 0 when it has no job."""
        found = {(row["queue"], row["state"]): row for row in rows}
        for queue in queues:
            for state in QUEUE_STATES:
                row = found.get((queue, state))
                self._depth.set(
                    0 if row is None else int(row["jobs"]),
                    {"pgjobs.queue": queue, "pgjobs.state": state},
                )
            ready = found.get((queue, "ready"))
            self._lag.set(0.0 if ready is None else float(ready["lag"]), {"pgjobs.queue": queue})


class JobSpan:
    """The running attempt's span: ``finish`` records its outcome, span status and metrics."""

    def __init__(self, telemetry: Telemetry, span: Any, ctx: JobContext) -> None:
        self._telemetry = telemetry
        self._span = span
        self._ctx = ctx
        self._started = time.monotonic()

    def finish(self, outcome: Outcome | None) -> None:
        name = outcome_name(outcome, self._ctx)
        attributes = {"pgjobs.queue": self._ctx.queue, "pgjobs.kind": self._ctx.kind}
        self._telemetry._duration.record(time.monotonic() - self._started, attributes)
        self._telemetry._outcomes.add(1, {**attributes, "pgjobs.outcome": name})
        self._span.set_attribute("pgjobs.outcome", name)
        error = _error_of(outcome)
        if error is not None:
            self._span.add_event(
                "exception",
                {
                    "exception.type": str(error.get("type", "")),
                    "exception.message": str(error.get("message", "")),
                    "exception.stacktrace": str(error.get("traceback", "")),
                },
            )
        if name in ("retrying", "dead"):
            message = error.get("message") if error is not None else None
            self._span.set_status(Status(StatusCode.ERROR, str(message) if message else None))


def _error_of(outcome: Outcome | None) -> dict[str, Any] | None:
    if outcome is None or not outcome.error_json:
        return None
    from pgjobs import jsonvalue

    error = jsonvalue.loads(outcome.error_json)
    return error if isinstance(error, dict) else None


def outcome_name(outcome: Outcome | None, ctx: JobContext) -> str:
    """completed, retrying, dead, deferred, released (given back unrun) or lost."""
    if outcome is None:
        return "completed" if ctx.completed else "lost"
    if outcome.status == "completed":
        return "completed"
    if outcome.status == "dead":
        return "dead"
    if outcome.deferred:
        return "deferred"
    return "released" if outcome.refund_attempt else "retrying"
