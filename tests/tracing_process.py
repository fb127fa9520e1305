"""A run's steps in a process of their own, for the tracing tests.

`python -m tests.tracing_process resume DATABASE_URL RUN_ID SPANS_FILE`: resume the run with
this process's own SDK tracer provider; its finished spans are written to SPANS_FILE as JSON lines.
`python -m tests.tracing_process untraced DATABASE_URL`: a whole run (start, pause, decisions,
resume) with no provider set; prints what tracing left behind, as JSON.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from approvals import tracing
from approvals.calls.verdicts import Approve, Deny
from approvals.service import ApprovalService
from approvals.store import Actor, Database, Store
from approvals.worker.resumer import AgentRegistry, Resumer


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
        "links": [f"{link.context.trace_id:032x}" for link in span.links],
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


async def resume(url: str, run_id: str, spans: str) -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(JsonLinesExporter(Path(spans))))
    trace.set_tracer_provider(provider)
    database = Database(url)
    try:
        await Resumer(Store(database), registry(), worker_id="traced-subprocess").resume(run_id)
    finally:
        await database.dispose()
        provider.shutdown()


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
        found = {"enabled": tracing.enabled(), "status": run.status, "trace_context": run.trace_context}
        sys.stdout.write(json.dumps(found) + "\n")
    finally:
        await database.dispose()


if __name__ == "__main__":
    if sys.argv[1] == "resume":
        anyio.run(resume, sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        anyio.run(untraced, sys.argv[2])
