"""What an operator's collector receives: three processes send their spans over OTLP/HTTP, set up from `OTEL_*`
variables as the app and the worker are, to a real receiver that decodes the protobuf bodies."""

from __future__ import annotations

import gzip
import json
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from approvals.store import Database, Store

from .store.conftest import postgres_url, sqlite_template  # noqa: F401 - the shared fixtures
from .test_tracing import tracing_process
from .test_tracing_calls import trace_and_span
from .web.conftest import db_url  # noqa: F401 - the shared fixture

pytestmark = pytest.mark.anyio


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind is not None else None


class Receiver(ThreadingHTTPServer):
    """An OTLP/HTTP trace receiver: `POST /v1/traces`, protobuf; keeps each span as the tests read them."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.spans: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    @property
    def endpoint(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"

    def received(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    found = {
                        "name": span.name,
                        "trace_id": span.trace_id.hex(),
                        "span_id": span.span_id.hex(),
                        "parent_id": span.parent_span_id.hex() or None,
                        "attributes": {a.key: _value(a.value) for a in span.attributes},
                        "links": [(link.trace_id.hex(), link.span_id.hex()) for link in span.links],
                        "service": resource.get("service.name"),
                    }
                    with self.lock:
                        self.spans.append(found)


class _Handler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        if self.path != "/v1/traces" or self.headers.get("Content-Type") != "application/x-protobuf":
            self.send_error(404 if self.path != "/v1/traces" else 415)
            return
        self.server.received(body)
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the test reads what was received."""


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


async def test_a_paused_call_decided_in_another_process_reaches_a_real_otlp_receiver_as_one_trace(
    db_url: str,  # noqa: F811 - the shared fixture
    receiver: Receiver,
) -> None:
    """Paused in one process, decided in a second, resumed in a third, each exporting with the OTLP HTTP exporter."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env |= {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "50"}
    started = tracing_process("start", db_url, "otlp", env=env)
    assert started.returncode == 0, started.stderr
    run_id = json.loads(started.stdout.splitlines()[-1])["run_id"]
    database = Database(db_url)
    try:
        store = Store(database)
        run = await store.runs.get_run(run_id)
        calls = {c.tool_name: c for c in await store.calls.run_calls(run_id)}
        verdicts = [f"{calls['refund'].id}=approve", f"{calls['delete_customer'].id}=deny"]
        decided = tracing_process("decide", db_url, "otlp", *verdicts, env=env)
        assert decided.returncode == 0, decided.stderr
        resumed = tracing_process("resume", db_url, run_id, "otlp", env=env)
        assert resumed.returncode == 0, resumed.stderr
        assert (await store.runs.get_run(run_id)).status == "completed"
    finally:
        await database.dispose()

    spans = receiver.spans  # each process shut its provider down, sending all it held, before it exited
    run_trace, run_span = trace_and_span(run.trace_context)
    assert {s["service"] for s in spans} == {"tracing-start", "tracing-decide", "tracing-resume"}
    assert {s["trace_id"] for s in spans} == {run_trace}  # no request carried a trace in: all the run's
    for tool in ("refund", "delete_customer"):
        call = calls[tool]
        [request] = [
            s
            for s in spans
            if s["attributes"].get("approvals.call.id") == call.id and s["name"] == "approvals.call.request"
        ]
        assert request["service"] == "tracing-start"
        assert (request["trace_id"], request["span_id"]) == trace_and_span(call.trace_context)
        [decision] = [
            s for s in spans if s["attributes"].get("approvals.call.id") == call.id and s["name"] == "approvals.decide"
        ]
        assert decision["service"] == "tracing-decide" and decision["parent_id"] == request["span_id"]
        assert (run_trace, run_span) in decision["links"]
    [refund] = [s for s in spans if s["name"] == "execute_tool refund"]
    assert refund["service"] == "tracing-resume"
    [resume] = [s for s in spans if s["name"] == "approvals.resume"]
    assert resume["parent_id"] == run_span
