"""OpenTelemetry through the SDK's in-memory exporters: an enqueue is a producer span whose
trace context travels in the job, every attempt is a consumer span under it (a failed one
marked as an error, with the exception), and the outcome counter, the duration histogram and
the queue gauges say what happened."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from pgjobs import Backoff, Flow, JobContext, JobQueue, Registry
from pgjobs.telemetry import Telemetry


@pytest.fixture
def exporters() -> tuple[InMemorySpanExporter, InMemoryMetricReader, Telemetry]:
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    telemetry = Telemetry(
        tracer_provider=tracer_provider, meter_provider=MeterProvider(metric_readers=[reader])
    )
    return spans, reader, telemetry


def _points(reader: InMemoryMetricReader, name: str) -> list[Any]:
    data = reader.get_metrics_data()
    assert data is not None
    return [
        point
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == name
        for point in metric.data.data_points
    ]


async def test_spans_link_each_attempt_to_its_enqueue_and_metrics_count_outcomes(
    pool: asyncpg.Pool, schema_name: str, registry: Registry, exporters: Any
) -> None:
    spans, reader, telemetry = exporters
    tries: dict[int, int] = {}

    @registry.kind("tick", input=dict, queue="otel", max_attempts=2, backoff=Backoff.fixed(0))
    async def tick(ctx: JobContext, data: dict) -> None:
        tries[data["n"]] = tries.get(data["n"], 0) + 1
        if data["n"] == 0 and tries[0] == 1:
            raise RuntimeError("first try of job 0")

    jobs = await JobQueue.connect(
        pool=pool, schema=schema_name, registry=registry, telemetry=telemetry
    )
    await jobs.migrate()
    tracer = telemetry._tracer
    with tracer.start_as_current_span("request") as request:
        one = await jobs.enqueue("tick", {"n": 0}, metadata={"source": "test"})
        batch = await jobs.enqueue_batch("tick", [{"n": n} for n in range(1, 4)])
    row = await jobs.get(one.id)
    assert row is not None and row.metadata["source"] == "test"
    assert row.metadata["otel"]["traceparent"].startswith("00-")

    await jobs.worker(queues=["otel"]).run(until_drained=True)
    assert tries == {0: 2, 1: 1, 2: 1, 3: 1}

    finished = spans.get_finished_spans()
    enqueues = [s for s in finished if s.name == "pgjobs enqueue tick"]
    processes = [s for s in finished if s.name == "pgjobs process tick"]
    assert len(enqueues) == 2 and len(processes) == 5
    request_id = request.get_span_context().span_id
    for span in enqueues:
        assert span.kind is SpanKind.PRODUCER and span.parent is not None
        assert span.parent.span_id == request_id
    single, bulk = sorted(enqueues, key=lambda s: s.start_time or 0)
    assert single.attributes is not None and bulk.attributes is not None
    assert bulk.attributes["messaging.batch.message_count"] == 3
    by_job = {int(str(s.attributes["messaging.message.id"])): s for s in processes if s.attributes}
    assert set(by_job) == {one.id, *(r.id for r in batch)}
    trace_id = request.get_span_context().trace_id
    for span in processes:
        assert span.kind is SpanKind.CONSUMER and span.parent is not None
        assert span.context is not None and span.context.trace_id == trace_id
        job_id = int(str(span.attributes["messaging.message.id"]))  # type: ignore[index]
        expected = single if job_id == one.id else bulk
        assert span.parent.span_id == expected.get_span_context().span_id
    failed = [s for s in processes if s.status.status_code is StatusCode.ERROR]
    assert len(failed) == 1 and failed[0].attributes is not None
    assert failed[0].attributes["pgjobs.outcome"] == "retrying"
    assert failed[0].attributes["pgjobs.attempt"] == 1
    [event] = [e for e in failed[0].events if e.name == "exception"]
    assert event.attributes is not None
    assert event.attributes["exception.message"] == "first try of job 0"

    outcomes = {
        p.attributes["pgjobs.outcome"]: p.value for p in _points(reader, "pgjobs.job.outcomes")
    }
    assert outcomes == {"completed": 4, "retrying": 1}
    [duration] = _points(reader, "pgjobs.job.duration")
    assert duration.count == 5
    depth = {p.attributes["pgjobs.state"]: p.value for p in _points(reader, "pgjobs.queue.depth")}
    # Read by the worker as it started, before it claimed anything: four jobs due.
    assert depth == {"ready": 4, "delayed": 0, "waiting_children": 0, "running": 0}
    [lag] = _points(reader, "pgjobs.queue.lag")
    assert lag.value >= 0


async def test_without_telemetry_nothing_is_added_to_the_job(
    jobs: JobQueue, registry: Registry
) -> None:
    registry.declare("tick", input=dict)
    result = await jobs.enqueue("tick", {}, metadata={"source": "test"})
    row = await jobs.get(result.id)
    assert row is not None and row.metadata == {"source": "test"}


async def test_a_flow_submission_is_one_producer_span_over_every_node(
    pool: asyncpg.Pool, schema_name: str, registry: Registry, exporters: Any
) -> None:
    """submit_flow is one PRODUCER span, child of the caller's; each node carries its trace
    context next to its own metadata, so every node's attempt is a child of that span."""
    spans, _, telemetry = exporters
    ran: list[str] = []

    @registry.kind("step", input=dict, queue="otel-flow")
    async def step(ctx: JobContext, data: dict) -> None:
        ran.append(data["node"])

    jobs = await JobQueue.connect(
        pool=pool, schema=schema_name, registry=registry, telemetry=telemetry
    )
    await jobs.migrate()
    flow = Flow("nightly")
    flow.add("parent", "step", {"node": "parent"}, metadata={"owner": "ops"})
    for child in ("a", "b"):
        flow.add(child, "step", {"node": child})
        flow.edge(child, "parent")
    with telemetry._tracer.start_as_current_span("request") as request:
        submitted = await jobs.submit_flow(flow)
    parent = await jobs.get(submitted.job_ids["parent"])
    assert parent is not None and parent.metadata["owner"] == "ops"
    assert parent.metadata["otel"]["traceparent"].startswith("00-")
    assert flow._nodes["parent"].spec.metadata == {"owner": "ops"}  # the caller's stays as it was

    await jobs.worker(queues=["otel-flow"]).run(until_drained=True)
    assert sorted(ran[:2]) == ["a", "b"] and ran[2] == "parent"
    finished = spans.get_finished_spans()
    [submit] = [s for s in finished if s.name == "pgjobs submit flow nightly"]
    assert submit.kind is SpanKind.PRODUCER and submit.parent is not None
    assert submit.parent.span_id == request.get_span_context().span_id
    assert submit.attributes is not None
    assert submit.attributes["messaging.batch.message_count"] == 3
    processes = [s for s in finished if s.name == "pgjobs process step"]
    assert len(processes) == 3
    for span in processes:
        assert span.parent is not None
        assert span.parent.span_id == submit.get_span_context().span_id
