"""Traces: a run reads as one trace from prompt to answer, across a pause, a decision over the API and a
resume in another process; with no SDK configured nothing is recorded and nothing breaks."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from approvals import tracing
from approvals.calls.verdicts import Approve
from approvals.exceptions import Conflict
from approvals.store import SYSTEM, Actor
from approvals.worker.resumer import AgentRegistry, Resumer
from approvals_web.telemetry import exporter_from_environment

from .store.agents import shop_agent
from .store.conftest import postgres_url, sqlite_template  # noqa: F401 - the shared fixtures
from .tracing_process import span_json
from .web.conftest import WebApp, db_url, web, web_tokens  # noqa: F401 - the shared fixtures

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parent.parent
OUR_SPANS = {"invoke_agent", "chat", "execute_tool", "approvals.call.request", "approvals.decide", "approvals.resume"}


@pytest.fixture(scope="module")
def exporter() -> Iterator[InMemorySpanExporter]:
    """This process's spans, in memory: the global provider is set once (it cannot be unset)."""
    memory = InMemorySpanExporter()
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    yield memory
    memory.shutdown()


def in_process(memory: InMemorySpanExporter) -> list[dict[str, Any]]:
    spans = [span_json(span) for span in memory.get_finished_spans()]
    memory.clear()
    return spans


def tracing_process(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tests.tracing_process", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def named(spans: list[dict[str, Any]], name: str) -> dict[str, Any]:
    [span] = [s for s in spans if s["name"] == name]
    return span


async def test_one_trace_from_prompt_to_answer_across_a_decision_and_another_process(
    web: WebApp,  # noqa: F811 - the shared fixture
    db_url: str,  # noqa: F811 - the shared fixture
    exporter: InMemorySpanExporter,
    tmp_path: Path,
) -> None:
    exporter.clear()
    async with web.api("admin") as starter, web.api() as api:  # who starts a run may not approve its calls
        response = await starter.post("/api/runs", json={"agent": "shop", "prompt": "go", "deps": {"log": "/dev/null"}})
        assert response.status_code == 201, response.text
        run_id = response.json()["id"]
        run = await web.store.runs.get_run(run_id)
        assert run.trace_context is not None and set(run.trace_context) >= {"traceparent"}
        trace_id = run.trace_context["traceparent"].split("-")[1]

        # the first steps, in this process, until the run waits for people
        await Resumer(web.store, AgentRegistry([shop_agent])).resume(run_id)
        assert (await web.store.runs.get_run(run_id)).status == "awaiting_approval"
        calls = {c.tool_name: c.id for c in await web.store.calls.run_calls(run_id)}
        for tool, verdict in (
            ("refund", {"verdict": "approve"}),
            ("delete_customer", {"verdict": "deny", "reason": "no"}),
        ):
            decided = await api.post(f"/api/calls/{calls[tool]}/decision", json=verdict)
            assert decided.status_code == 200, decided.text
    here = in_process(exporter)

    spans_file = tmp_path / "spans.jsonl"
    resumed = tracing_process("resume", db_url, run_id, str(spans_file))
    assert resumed.returncode == 0, resumed.stderr
    assert (await web.store.runs.get_run(run_id)).status == "completed"
    there = [json.loads(line) for line in spans_file.read_text().splitlines()]

    ours = [s for s in here + there if s["name"].split(" ")[0] in OUR_SPANS]
    assert {s["trace_id"] for s in ours} == {trace_id}  # one trace, in two processes
    root = named(here, "POST /api/runs")  # FastAPI's own span for the request that started the run
    assert root["trace_id"] == trace_id and root["parent_id"] is None
    stored_span = run.trace_context["traceparent"].split("-")[2]
    start = [s for s in here if s["span_id"] == stored_span]  # the stored context: starting the run
    assert len(start) == 1 and start[0]["name"] == "invoke_agent shop"
    assert start[0]["attributes"]["approvals.run.id"] == run_id
    by_id = {s["span_id"]: s for s in here}
    ancestor = start[0]
    while ancestor["parent_id"] is not None:
        ancestor = by_id[ancestor["parent_id"]]
    assert ancestor is root  # inside the request that started it

    first = [s for s in here if s["name"] == "invoke_agent shop" and s["parent_id"] == start[0]["span_id"]]
    assert len(first) == 1  # the first steps, in this process
    chat = [s for s in here if s["name"] == "chat test"]
    assert len(chat) == 1 and chat[0]["parent_id"] == first[0]["span_id"]
    assert chat[0]["attributes"]["gen_ai.operation.name"] == "chat"
    assert chat[0]["attributes"]["gen_ai.request.model"] == "test"
    lookup = named(here, "execute_tool lookup_order")  # needs no approval: ran at once
    assert lookup["parent_id"] == first[0]["span_id"]
    assert lookup["attributes"]["gen_ai.tool.name"] == "lookup_order"
    assert lookup["attributes"]["gen_ai.tool.call.id"]

    decisions = [s for s in here if s["name"] == "approvals.decide"]
    assert {d["attributes"]["approvals.verdict"] for d in decisions} == {"approve", "deny"}
    assert {d["attributes"]["approvals.call.id"] for d in decisions} == set(calls.values())
    asked = {s["attributes"]["approvals.call.id"]: s for s in here if s["name"] == "approvals.call.request"}
    assert set(asked) == set(calls.values()) and all(s["parent_id"] == first[0]["span_id"] for s in asked.values())
    assert all(
        d["parent_id"] == asked[d["attributes"]["approvals.call.id"]]["span_id"] for d in decisions
    )  # the call's
    requests = {s["trace_id"] for s in here if s["name"].startswith("POST /api/calls/")}
    linked = {
        link["trace_id"] for d in decisions for link in d["links"] if link["attributes"]["approvals.link"] == "request"
    }
    assert len(requests) == 2 and linked == requests  # linked to their requests

    resume = named(there, "approvals.resume")
    assert resume["parent_id"] == start[0]["span_id"]  # the stored context, in a process that never saw it
    assert resume["attributes"]["approvals.run.id"] == run_id
    [wait] = [e for e in resume["events"] if e["name"] == "approvals.waited"]
    assert wait["attributes"]["approvals.wait.seconds"] >= 0
    agent = named(there, "invoke_agent shop")
    assert agent["parent_id"] == resume["span_id"]
    refund = named(there, "execute_tool refund")  # the approved call, run after the wait
    assert refund["parent_id"] == agent["span_id"] and refund["attributes"]["gen_ai.tool.name"] == "refund"
    assert refund["attributes"]["gen_ai.tool.call.id"] == (await web.store.calls.get_call(calls["refund"])).tool_call_id
    assert not [s for s in there if s["name"] == "execute_tool delete_customer"]  # denied: never ran
    assert named(there, "chat test")["parent_id"] == agent["span_id"]


async def test_a_gate_call_request_is_traced(
    web: WebApp,  # noqa: F811 - the shared fixture
    exporter: InMemorySpanExporter,
) -> None:
    token = await web.store.people.create_token("asker", role="reviewer", actor=SYSTEM, scopes=["calls:ask"])
    asked = {"source": "cli", "session_id": "s1", "idempotency_key": "t1", "tool_name": "Bash", "args": {"c": "ls"}}
    exporter.clear()
    with trace.get_tracer("test").start_as_current_span("caller") as caller:
        headers = {"Authorization": f"Bearer {token}", **(tracing.carrier() or {})}  # W3C traceparent
        async with web.client(headers=headers) as agent:
            response = await agent.post("/api/gate/calls", json=asked, params={"wait": 0})
    assert response.status_code == 201, response.text
    request = named(in_process(exporter), "approvals.call.request")
    assert request["trace_id"] == f"{caller.get_span_context().trace_id:032x}"  # the caller's trace, carried over HTTP
    assert request["attributes"]["gen_ai.tool.name"] == "Bash"
    assert request["attributes"]["gen_ai.tool.call.id"] == "t1"
    assert request["attributes"]["approvals.engine"] == "gate"


def test_nothing_is_recorded_or_stored_without_a_provider(db_url: str) -> None:  # noqa: F811 - the shared fixture
    done = tracing_process("untraced", db_url)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[-1])
    assert found == {
        "enabled": False,
        "status": "completed",
        "trace_context": None,
        "gate_run_trace_context": None,
        "call_trace_contexts": [None, None, None],
    }


@pytest.mark.parametrize(
    ("environ", "exporter_name"),
    [
        ({}, None),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, "OTLPSpanExporter"),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, "OTLPSpanExporter"),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, "OTLPSpanExporter"),
        ({"OTEL_TRACES_EXPORTER": "console"}, "ConsoleSpanExporter"),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, None),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, None),
    ],
)
def test_an_exporter_only_when_the_environment_asks(environ: dict[str, str], exporter_name: str | None) -> None:
    exporter = exporter_from_environment(environ)
    assert (type(exporter).__name__ if exporter is not None else None) == exporter_name


def test_a_stored_context_is_continued() -> None:
    carrier = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    context = tracing.continued(carrier)
    assert context is not None
    parent = trace.get_current_span(context).get_span_context()
    assert (parent.trace_id, parent.span_id, parent.is_remote) == (
        0x0AF7651916CD43DD8448EB211C80319C,
        0xB7AD6B7169203331,
        True,
    )
    assert tracing.continued(None) is None


async def test_a_decision_span_covers_the_decision_and_a_refused_one_says_why(
    web: WebApp,  # noqa: F811 - the shared fixture
    exporter: InMemorySpanExporter,
) -> None:
    """The run's context comes with the decision's own read of the run, so the span is made when it ends: it must
    still start before the decision was written and sit in the run's trace. A refused decision read no context
    (its transaction rolled back): its span carries the error, in the caller's trace."""
    service = web.app.state.context.service
    run_id = await service.start_run("shop", "refund", actor=Actor("svc", "reviewer"), deps={"log": "/dev/null"})
    await service.resumer.resume(run_id)
    stored = (await web.store.runs.get_run(run_id)).trace_context
    calls = {call.tool_name: call for call in await web.store.calls.run_calls(run_id)}
    exporter.clear()
    before = time.time_ns()
    await service.decide(calls["refund"].id, Approve(), actor=Actor("alice", "reviewer"))
    with pytest.raises(Conflict):
        await service.decide(calls["refund"].id, Approve(), actor=Actor("bob", "reviewer"))
    after = time.time_ns()
    spans = [s for s in exporter.get_finished_spans() if s.name == "approvals.decide"]
    assert len(spans) == 2
    decided = (await web.store.audit.audit_events(action="call.approved", run_id=run_id)).items[0].at.timestamp() * 1e9
    for span in spans:
        assert span.start_time is not None and span.end_time is not None
        assert before <= span.start_time <= span.end_time <= after
    first, refused = spans
    run_trace = stored["traceparent"].split("-")[1]
    assert [f"{s.get_span_context().trace_id:032x}" == run_trace for s in spans] == [True, False]  # type: ignore[union-attr]
    assert first.start_time is not None and first.start_time <= decided + 1e6  # begun before the write (+1 ms: clocks)
    assert first.status.status_code is StatusCode.UNSET
    assert refused.status.status_code is StatusCode.ERROR and "Conflict" in (refused.status.description or "")
    assert [event.name for event in refused.events] == ["exception"]
