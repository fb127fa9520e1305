"""One trace per call: a call's request span, stored with the call, is the parent of its decision, hand-out and
outcome, in whichever process they happen; the decision's log line names the run, the call and that trace."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from approvals import tracing
from approvals.logs import ContextFilter
from approvals.store import SYSTEM, Actor, Store

from .store.conftest import postgres_url, sqlite_template, store  # noqa: F401 - the shared fixtures
from .store.test_conversation_store import paused_shop_chat
from .test_tracing import exporter, in_process, named, tracing_process  # noqa: F401 - the shared fixture
from .web.conftest import WebApp, db_url, web, web_tokens  # noqa: F401 - the shared fixtures

pytestmark = pytest.mark.anyio


def from_file(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def trace_and_span(stored: dict[str, str] | None) -> tuple[str, str]:
    """The trace id and span id of a stored W3C context."""
    assert stored is not None
    _, trace_id, span_id, _ = stored["traceparent"].split("-")
    return trace_id, span_id


def links(span: dict[str, Any], kind: str) -> list[tuple[str, str]]:
    return [
        (link["trace_id"], link["span_id"]) for link in span["links"] if link["attributes"]["approvals.link"] == kind
    ]


def requested(spans: list[dict[str, Any]], call_id: str) -> dict[str, Any]:
    [span] = [
        s for s in spans if s["name"] == "approvals.call.request" and s["attributes"]["approvals.call.id"] == call_id
    ]
    return span


async def test_a_native_pause_is_traced_per_call_across_three_processes(
    web: WebApp,  # noqa: F811 - the shared fixture
    db_url: str,  # noqa: F811 - the shared fixture
    exporter: InMemorySpanExporter,  # noqa: F811 - the shared fixture
    tmp_path: Path,
) -> None:
    """Paused in process A, decided over the API of the web app in process B (this one), resumed in process C."""
    started = tracing_process("start", db_url, str(tmp_path / "a.jsonl"))
    assert started.returncode == 0, started.stderr
    run_id = json.loads(started.stdout.splitlines()[-1])["run_id"]
    run = await web.store.runs.get_run(run_id)
    assert run.status == "awaiting_approval"
    run_trace, run_span = trace_and_span(run.trace_context)
    calls = {c.tool_name: c for c in await web.store.calls.run_calls(run_id)}
    a = from_file(tmp_path / "a.jsonl")

    agent = [s for s in a if s["name"] == "invoke_agent shop" and s["parent_id"] == run_span]
    assert len(agent) == 1  # the first steps, in the run's trace
    for tool in ("refund", "delete_customer"):
        call = calls[tool]
        request = requested(a, call.id)  # the call's own span, made by the pause
        assert (request["trace_id"], request["span_id"]) == trace_and_span(call.trace_context)  # stored with it
        assert request["trace_id"] == run_trace and request["parent_id"] == agent[0]["span_id"]
        assert request["attributes"]["gen_ai.tool.name"] == tool
        assert request["attributes"]["gen_ai.tool.call.id"] == call.tool_call_id
        assert request["attributes"]["approvals.run.id"] == run_id

    exporter.clear()
    async with web.api() as api:
        for tool, verdict in (
            ("refund", {"verdict": "approve"}),
            ("delete_customer", {"verdict": "deny", "reason": "no"}),
        ):
            decided = await api.post(f"/api/calls/{calls[tool].id}/decision", json=verdict)
            assert decided.status_code == 200, decided.text
    b = in_process(exporter)
    http = {s["trace_id"] for s in b if s["name"].startswith("POST /api/calls/") and not s["parent_id"]}
    resumed = tracing_process("resume", db_url, run_id, str(tmp_path / "c.jsonl"))
    assert resumed.returncode == 0, resumed.stderr
    c = from_file(tmp_path / "c.jsonl")

    for tool in ("refund", "delete_customer"):
        call = calls[tool]
        [decision] = [
            s for s in b if s["name"] == "approvals.decide" and s["attributes"]["approvals.call.id"] == call.id
        ]
        assert (decision["trace_id"], decision["parent_id"]) == trace_and_span(call.trace_context)  # the call's
        [(request_trace, _)] = links(decision, "request")  # the deciding request: linked, not the parent
        assert request_trace in http and request_trace != decision["trace_id"]
        http.remove(request_trace)  # each decision its own request
        assert links(decision, "run") == [(run_trace, run_span)]
    refund = named(c, "execute_tool refund")  # run after the wait, in the run's trace: the call's
    assert refund["trace_id"] == run_trace
    assert refund["attributes"]["gen_ai.tool.call.id"] == calls["refund"].tool_call_id
    assert {s["service"] for s in a + c} == {"tracing-start", "tracing-resume"}


async def test_a_gate_call_decided_in_another_process_is_a_trace_of_its_own(
    web: WebApp,  # noqa: F811 - the shared fixture
    db_url: str,  # noqa: F811 - the shared fixture
    exporter: InMemorySpanExporter,  # noqa: F811 - the shared fixture
    tmp_path: Path,
) -> None:
    """Two calls of one gate session, each asked in its caller's trace; decided in another process; handed out
    and settled here: every step of a call in its own trace, the second call linked to the session's."""
    token = await web.store.people.create_token("asker", role="reviewer", actor=SYSTEM, scopes=["calls:ask"])
    exporter.clear()
    callers: list[str] = []
    ids: list[str] = []
    for key in ("k1", "k2"):
        asked = {"source": "cli", "session_id": "s1", "idempotency_key": key, "tool_name": "Bash", "args": {"c": key}}
        with trace.get_tracer("test").start_as_current_span(f"caller {key}") as caller:
            headers = {"Authorization": f"Bearer {token}", **(tracing.carrier() or {})}
            async with web.client(headers=headers) as agent:
                response = await agent.post("/api/gate/calls", json=asked, params={"wait": 0})
        assert response.status_code == 201, response.text
        callers.append(f"{caller.get_span_context().trace_id:032x}")
        ids.append(response.json()["call_id"])
    asking = in_process(exporter)
    calls = [await web.store.calls.get_call(call_id) for call_id in ids]
    session = await web.store.runs.get_run(calls[0].run_id)

    requests = [requested(asking, call.id) for call in calls]
    for call, request, caller_trace in zip(calls, requests, callers, strict=True):
        assert request["trace_id"] == caller_trace  # one trace per call: its caller's
        assert (request["trace_id"], request["span_id"]) == trace_and_span(call.trace_context)
    assert trace_and_span(session.trace_context) == trace_and_span(calls[0].trace_context)  # the session's trace
    assert links(requests[1], "run") == [trace_and_span(session.trace_context)]  # the later call: linked to it
    assert links(requests[0], "run") == []  # the first call continues it

    decided = tmp_path / "b.jsonl"
    done = tracing_process("decide", db_url, str(decided), *(f"{call_id}=approve" for call_id in ids))
    assert done.returncode == 0, done.stderr
    decisions = from_file(decided)
    for call, request in zip(calls, requests, strict=True):
        [decision] = [s for s in decisions if s["attributes"]["approvals.call.id"] == call.id]
        assert decision["name"] == "approvals.decide" and decision["service"] == "tracing-decide"
        assert (decision["trace_id"], decision["parent_id"]) == (request["trace_id"], request["span_id"])

    async with web.client(headers={"Authorization": f"Bearer {token}"}) as agent:
        answer = await agent.get(f"/api/gate/calls/{ids[0]}", params={"wait": 0})
        assert answer.json()["handed_out"] is True, answer.text
        settled = await agent.post(f"/api/gate/calls/{ids[0]}/outcome", json={"outcome": "succeeded"})
        assert settled.status_code == 200, settled.text
    here = in_process(exporter)
    for name, method in (("approvals.call.hand_out", "GET"), ("approvals.call.outcome", "POST")):
        step = named(here, name)
        assert (step["trace_id"], step["parent_id"]) == (requests[0]["trace_id"], requests[0]["span_id"])
        [http] = [s for s in here if s["name"].startswith(f"{method} /api/gate/calls/") and s["parent_id"] is None]
        assert [trace_id for trace_id, _ in links(step, "request")] == [http["trace_id"]]
    assert named(here, "approvals.call.outcome")["attributes"]["approvals.call.outcome"] == "succeeded"


async def test_a_chat_apps_paused_run_stores_its_trace_and_each_calls(
    store: Store,  # noqa: F811 - the shared fixture
    exporter: InMemorySpanExporter,  # noqa: F811 - the shared fixture
    tmp_path: Path,
) -> None:
    """A pydantic-ai chat app's run begins paused, in the app's process and trace: no worker pause made its calls."""
    exporter.clear()
    with trace.get_tracer("test").start_as_current_span("chat app request") as app:
        _, run_id = await paused_shop_chat(store, tmp_path)
    app_trace = f"{app.get_span_context().trace_id:032x}"
    run = await store.runs.get_run(run_id)
    [call] = await store.calls.run_calls(run_id)
    request = requested(in_process(exporter), call.id)
    assert trace_and_span(run.trace_context)[0] == app_trace  # its resume continues the app's trace
    assert (request["trace_id"], request["span_id"]) == trace_and_span(call.trace_context)
    assert request["trace_id"] == app_trace and request["parent_id"] == f"{app.get_span_context().span_id:016x}"
    assert request["attributes"]["approvals.engine"] == "pydantic_ai"
    assert request["attributes"]["gen_ai.tool.name"] == call.tool_name


class Lines(logging.Handler):
    """The records logged while it is attached, with the ids `ContextFilter` puts on them."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []
        self.addFilter(ContextFilter())

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def lines() -> Iterator[Lines]:
    handler, root, approvals = Lines(), logging.getLogger(), logging.getLogger("approvals")
    level = approvals.level
    approvals.setLevel(logging.INFO)
    root.addHandler(handler)
    yield handler
    root.removeHandler(handler)
    approvals.setLevel(level)


async def test_the_decision_log_line_names_its_run_its_call_and_the_calls_trace(
    web: WebApp,  # noqa: F811 - the shared fixture
    exporter: InMemorySpanExporter,  # noqa: F811 - the shared fixture
    lines: Lines,
) -> None:
    service = web.app.state.context.service
    run_id = await service.start_run("shop", "refund", actor=Actor("svc", "reviewer"), deps={"log": "/dev/null"})
    await service.resumer.resume(run_id)
    call = next(c for c in await web.store.calls.run_calls(run_id) if c.tool_name == "refund")
    exporter.clear()
    async with web.api() as api:
        decided = await api.post(f"/api/calls/{call.id}/decision", json={"verdict": "approve"})
        assert decided.status_code == 200, decided.text
    [line] = [r for r in lines.records if r.name == "approvals.service" and "decided by" in r.getMessage()]
    call_trace, _ = trace_and_span(call.trace_context)
    assert (line.run_id, line.call_id, line.trace_id) == (run_id, call.id, call_trace)  # type: ignore[attr-defined]
    decision = named(in_process(exporter), "approvals.decide")
    assert line.span_id == decision["span_id"]  # type: ignore[attr-defined]
