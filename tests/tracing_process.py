"""A run's steps in a process of their own, for the tracing tests.

`python -m tests.tracing_process start DATABASE_URL SPANS`: start a run of the shop agent and
take its first steps until it pauses for people; prints the run's id as JSON.
`python -m tests.tracing_process decide DATABASE_URL SPANS CALL_ID=VERDICT...`: a reviewer's
verdict (`approve`, or `deny`) on each call, through `ApprovalService.decide`.
`python -m tests.tracing_process resume DATABASE_URL RUN_ID SPANS`: resume the run.
Each records with this process's own SDK tracer provider: SPANS is a file its finished spans
are appended to as JSON lines, or `otlp` to send them as the app does (`configure_tracing`,
from the `OTEL_*` variables).
`python -m tests.tracing_process untraced DATABASE_URL`: a whole run (start, pause, decisions,
resume) and a gate call, with no provider set; prints what tracing left behind, as JSON.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from approvals import tracing
from approvals.calls.requests import CallRequest
from approvals.calls.verdicts import Approve, Deny
from approvals.service import ApprovalService
from approvals.store import Actor, Database, Store
from approvals.worker.resumer import AgentRegistry, Resumer
from approvals_web.telemetry import configure_tracing

REVIEWER = Actor("alice", "reviewer")
STARTER = Actor("svc", "reviewer")


def span_json(span: ReadableSpan) -> dict[str, Any]:
    """What the tests read of a span: ids in hex, its parent, attributes, events and links."""
    context = span.get_span_context()
    assert context is not None
    return {
        "name": span.name,
        "trace_id": f"{context.trace_id:032x}",
        "span_id": f"{context.span_id:016x}",
        "parent_id": f"{span.parent.span_id:016x}" if span.parent else None,
        "attributes": dict(span.attributes or {}),
        "events": [{"name": e.name, "attributes": dict(e.attributes or {})} for e in span.events],
        "links": [
            {
                "trace_id": f"{link.context.trace_id:032x}",
                "span_id": f"{link.context.span_id:016x}",
                "attributes": dict(link.attributes or {}),
            }
            for link in span.links
        ],
        "service": span.resource.attributes.get("service.name"),
    }


class JsonLinesExporter(SpanExporter):
    """Appends each finished span to a file, one JSON object a line."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with self.path.open("a") as out:
            for span in spans:
                out.write(json.dumps(span_json(span)) + "\n")
        return SpanExportResult.SUCCESS


def registry() -> AgentRegistry:
    registry = AgentRegistry()
    registry.load("tests.store.agents:shop_agent")
    return registry


def traced(spans: str, name: str) -> None:
    """This process's tracer provider: spans to a JSON lines file, or over OTLP as the app sends them."""
    if spans == "otlp":
        assert configure_tracing(f"tracing-{name}")
        return
    provider = TracerProvider(resource=Resource.create({"service.name": f"tracing-{name}"}))
    provider.add_span_processor(SimpleSpanProcessor(JsonLinesExporter(Path(spans))))
    trace.set_tracer_provider(provider)


def flushed() -> None:
    provider = trace.get_tracer_provider()
    if isinstance(provider, TracerProvider):
        provider.shutdown()  # sends what a batch processor still holds


async def start(url: str, spans: str) -> None:
    traced(spans, "start")
    database = Database(url)
    try:
        service = ApprovalService(Store(database), registry())
        run_id = await service.start_run("shop", "refund and delete", actor=STARTER, deps={"log": "/dev/null"})
        await service.resumer.resume(run_id)
        sys.stdout.write(json.dumps({"run_id": run_id}) + "\n")
    finally:
        await database.dispose()
        flushed()


async def decide(url: str, spans: str, *verdicts: str) -> None:
    traced(spans, "decide")
    database = Database(url)
    try:
        service = ApprovalService(Store(database), registry())
        for call_id, verdict in (pair.split("=") for pair in verdicts):
            await service.decide(call_id, Approve() if verdict == "approve" else Deny(reason="no"), actor=REVIEWER)
    finally:
        await database.dispose()
        flushed()


async def resume(url: str, run_id: str, spans: str) -> None:
    traced(spans, "resume")
    database = Database(url)
    try:
        await Resumer(Store(database), registry(), worker_id="traced-subprocess").resume(run_id)
    finally:
        await database.dispose()
        flushed()


async def untraced(url: str) -> None:
    database = Database(url)
    store = Store(database)
    service = ApprovalService(store, registry())
    alice = Actor("alice", "reviewer")
    try:
        run_id = await service.start_run(
            "shop", "refund and delete", actor=Actor("svc", "reviewer"), deps={"log": "/dev/null"}
        )
        await service.resumer.resume(run_id)
        calls = {c.tool_name: c for c in await store.calls.run_calls(run_id)}
        await service.decide(calls["refund"].id, Approve(), actor=alice)
        await service.decide(calls["delete_customer"].id, Deny(reason="no"), actor=alice)
        await service.resumer.resume(run_id)
        run = await store.runs.get_run(run_id)
        asked = CallRequest(engine="gate", source="cli", session_id="s1", tool_name="Bash", args={"c": "ls"})
        gate, _ = await service.request_call(asked, actor=alice)
        stored = [c.trace_context for c in [*await store.calls.run_calls(run_id), gate]]
        found = {
            "enabled": tracing.enabled(),
            "status": run.status,
            "trace_context": run.trace_context,
            "gate_run_trace_context": (await store.runs.get_run(gate.run_id)).trace_context,
            "call_trace_contexts": stored,
        }
        sys.stdout.write(json.dumps(found) + "\n")
    finally:
        await database.dispose()


if __name__ == "__main__":
    commands: dict[str, Callable[..., Awaitable[None]]] = {
        "start": start,
        "decide": decide,
        "resume": resume,
        "untraced": untraced,
    }
    anyio.run(commands[sys.argv[1]], *sys.argv[2:])
