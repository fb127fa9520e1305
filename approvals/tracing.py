"""Traces of a run across the wait for a person, on the OpenTelemetry API alone.

A run's trace context is stored with it (`RunRow.trace_context`, a W3C carrier), so the
resume hours later, in whichever process, continues the same trace: a run reads as one
trace from prompt to answer. Spans follow the GenAI semantic conventions where they apply
(`invoke_agent {agent}`, `chat {model}`, `execute_tool {tool}`); the rest are ours
(`approvals.call.request`, `approvals.decide`, `approvals.resume`).

Nothing here configures anything: without an SDK `TracerProvider` (the web app and the
worker set one up only when the `OTEL_*` variables ask, `approvals_web.telemetry`) every
helper returns at once and nothing is recorded or stored.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, NoOpTracerProvider, ProxyTracerProvider, Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

__all__ = (
    "TRACER_NAME",
    "DecisionTrace",
    "carrier",
    "continued",
    "deciding",
    "enabled",
    "executing_tool",
    "model_answered",
    "requesting_call",
    "requesting_model",
    "resuming",
    "starting_run",
    "waited",
)

TRACER_NAME = "approvals"
_tracer = trace.get_tracer(TRACER_NAME)
"""A proxy until a provider is set: it follows whichever provider is set later."""
_W3C = TraceContextTextMapPropagator()
"""Stored contexts are W3C's whatever the process's global propagator, so any process reads them."""
_resume_span: ContextVar[Span | None] = ContextVar("approvals_resume_span", default=None)
"""The `approvals.resume` span in progress, for `waited` to note the wait on."""


def enabled() -> bool:
    """Whether a real tracer provider is set: without one, no span is recorded and no context stored."""
    return not isinstance(trace.get_tracer_provider(), ProxyTracerProvider | NoOpTracerProvider)


def carrier() -> dict[str, str] | None:
    """The current trace context as a W3C carrier (`traceparent`, `tracestate`); None outside a recorded span."""
    if not trace.get_current_span().get_span_context().is_valid:
        return None
    found: dict[str, str] = {}
    _W3C.inject(found)
    return found or None


def continued(stored: Mapping[str, str] | None) -> Context | None:
    """The context a stored carrier stands for, to continue its trace; None (the current one) without it."""
    return _W3C.extract(dict(stored)) if stored else None


def _current_link() -> list[Link]:
    """A link to the current span, when there is one: the request or process that continued another trace."""
    current = trace.get_current_span().get_span_context()
    return [Link(current)] if current.is_valid else []


@contextmanager
def starting_run(agent_name: str, run_id: str) -> Iterator[dict[str, str] | None]:
    """`invoke_agent {agent}` around queueing a run; yields the carrier the run stores (None when not tracing)."""
    if not enabled():
        yield None
        return
    attributes = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent_name, "approvals.run.id": run_id}
    with _tracer.start_as_current_span(f"invoke_agent {agent_name}", attributes=attributes):
        yield carrier()


@contextmanager
def resuming(run_id: str, agent_name: str, stored: Mapping[str, str] | None, *, resumed: bool) -> Iterator[None]:
    """A run's life in this process, continuing the trace it started in.

    `invoke_agent {agent}`, inside `approvals.resume` when the run had stopped before (`resumed`);
    the parent is the run's stored context, and the process's own current span (a request
    that asked for the resume) is a link.
    """
    if not enabled():
        yield
        return
    attributes = {"gen_ai.agent.name": agent_name, "approvals.run.id": run_id}
    parent, links = continued(stored), _current_link()
    agent_span = f"invoke_agent {agent_name}"
    agent_attributes = {"gen_ai.operation.name": "invoke_agent", **attributes}
    if not resumed:
        with _tracer.start_as_current_span(agent_span, context=parent, links=links, attributes=agent_attributes):
            yield
        return
    with _tracer.start_as_current_span("approvals.resume", context=parent, links=links, attributes=attributes) as span:
        token = _resume_span.set(span)
        try:
            with _tracer.start_as_current_span(agent_span, attributes=agent_attributes):
                yield
        finally:
            _resume_span.reset(token)


def waited(history: Sequence[Any]) -> None:
    """Note on the resume in progress how long the run waited: since its last stored response (the paused step)."""
    span = _resume_span.get()
    if span is None:
        return
    stamp = next(
        (m.timestamp for m in reversed(history) if isinstance(getattr(m, "timestamp", None), dt.datetime)), None
    )
    if stamp is None:
        return
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=dt.UTC)
    seconds = (dt.datetime.now(dt.UTC) - stamp).total_seconds()
    span.set_attribute("approvals.wait.seconds", seconds)
    span.add_event("approvals.waited", {"approvals.wait.seconds": seconds, "approvals.paused_at": stamp.isoformat()})


@contextmanager
def requesting_model(model_name: str, provider: str) -> Iterator[Span | None]:
    """`chat {model}`: one model request (GenAI client span)."""
    if not enabled():
        yield None
        return
    attributes = {"gen_ai.operation.name": "chat", "gen_ai.request.model": model_name, "gen_ai.provider.name": provider}
    with _tracer.start_as_current_span(f"chat {model_name}", kind=SpanKind.CLIENT, attributes=attributes) as span:
        yield span


def model_answered(span: Span | None, response: Any) -> None:
    """The response's model and token counts on its `chat` span."""
    if span is None:
        return
    usage = getattr(response, "usage", None)
    name = getattr(response, "model_name", None)
    if name:
        span.set_attribute("gen_ai.response.model", name)
    for ours, theirs in (
        ("input_tokens", "gen_ai.usage.input_tokens"),
        ("output_tokens", "gen_ai.usage.output_tokens"),
    ):
        value = getattr(usage, ours, None)
        if isinstance(value, int):
            span.set_attribute(theirs, value)


@contextmanager
def executing_tool(tool_name: str, tool_call_id: str) -> Iterator[None]:
    """`execute_tool {tool}`: one tool execution."""
    if not enabled():
        yield
        return
    attributes = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": tool_name,
        "gen_ai.tool.call.id": tool_call_id,
    }
    with _tracer.start_as_current_span(f"execute_tool {tool_name}", attributes=attributes):
        yield


@contextmanager
def requesting_call(engine: str, source: str, tool_name: str, tool_call_id: str) -> Iterator[None]:
    """`approvals.call.request`: an agent running elsewhere asks people about a call."""
    if not enabled():
        yield
        return
    attributes = {
        "approvals.engine": engine,
        "gen_ai.agent.name": source,
        "gen_ai.tool.name": tool_name,
        "gen_ai.tool.call.id": tool_call_id,
    }
    with _tracer.start_as_current_span("approvals.call.request", attributes=attributes):
        yield


class DecisionTrace:
    """What `deciding` learns while a verdict is recorded: the trace context of the call's run."""

    __slots__ = ("run_trace_context",)

    def __init__(self) -> None:
        self.run_trace_context: Mapping[str, str] | None = None


@contextmanager
def deciding(call_id: str, verdict: object) -> Iterator[DecisionTrace]:
    """`approvals.decide`: a person's verdict, in the trace of the call's run, linked to the request.

    The run's context is read with the run's lock by the decision itself (the caller sets it on
    the yielded `DecisionTrace`), so the span is recorded when the decision ends, with the time
    it began: nothing is read for the span alone. A decision that fails (refused, conflicting)
    is recorded with its error, in the current trace.
    """
    found = DecisionTrace()
    if not enabled():
        yield found
        return
    started = time.time_ns()
    links = _current_link()
    error: BaseException | None = None
    try:
        yield found
    except BaseException as exc:
        error = exc
        raise
    finally:
        kind = {"EditAndApprove": "edit"}.get(type(verdict).__name__, type(verdict).__name__.lower())
        attributes = {"approvals.call.id": call_id, "approvals.verdict": kind}
        stored = found.run_trace_context
        span = _tracer.start_span(
            "approvals.decide",
            context=continued(stored),
            links=links if stored else [],
            attributes=attributes,
            start_time=started,
        )
        if error is not None:
            span.record_exception(error)
            span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
        span.end()
