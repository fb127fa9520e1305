"""Traces of a run across the wait for a person, on the OpenTelemetry API alone.

A run's trace context is stored with it (`RunRow.trace_context`, a W3C carrier), so the
resume hours later, in whichever process, continues the same trace: a run reads as one
trace from prompt to answer. A call's is stored with the call (`ToolCallRow.trace_context`):
the context of its `approvals.call.request` span, made where the call was asked for (a
worker's pause continues the run's trace; a gate's request, its caller's), so its decision
(in whichever process, on whichever channel), hand-out and outcome are spans of the call's
trace, linked to the run's and to the request that made them. Spans follow the GenAI
semantic conventions where they apply (`invoke_agent {agent}`, `chat {model}`,
`execute_tool {tool}`); the rest are ours (`approvals.call.request`, `approvals.decide`,
`approvals.call.hand_out`, `approvals.call.outcome`, `approvals.resume`).

Nothing here configures anything: without an SDK `TracerProvider` (the web app and the
worker set one up only when the `OTEL_*` variables ask, `approvals_web.telemetry`) every
helper returns at once and nothing is recorded or stored.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, NoOpTracerProvider, ProxyTracerProvider, Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

__all__ = (
    "TRACER_NAME",
    "CallTrace",
    "RequestedCalls",
    "carrier",
    "continued",
    "deciding",
    "enabled",
    "executing_tool",
    "handing_out",
    "model_answered",
    "requesting_calls",
    "requesting_model",
    "resuming",
    "settling",
    "starting_run",
    "waited",
    "within",
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
    """The current trace context as a W3C carrier (`traceparent`, `tracestate`); None outside a recorded span.

    None without a provider too, even inside a caller's propagated context: nothing is stored untraced."""
    if not enabled() or not trace.get_current_span().get_span_context().is_valid:
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


class RequestedCalls:
    """The `approvals.call.request` spans of calls being stored, one a call in the order asked.

    Each call stores its span's context (`context`), written by the INSERT that stores the
    call, so nothing is read or written for tracing alone. Without a provider there are no
    spans and every context is None.
    """

    __slots__ = ("_spans",)

    def __init__(self, spans: Sequence[Span] = ()) -> None:
        self._spans = list(spans)

    def context(self, index: int) -> dict[str, str] | None:
        """The W3C carrier of the `index`th call's span, to store with the call; None when not tracing."""
        if not self._spans:
            return None
        found: dict[str, str] = {}
        _W3C.inject(found, context=trace.set_span_in_context(self._spans[index]))
        return found or None

    def stored(self, index: int, call_id: str) -> None:
        """The `index`th call was stored as `call_id` (the id a retry of the write gave it)."""
        if self._spans:
            self._spans[index].set_attribute("approvals.call.id", call_id)

    def in_run(self, run_context: Mapping[str, str] | None) -> None:
        """Link each call's span to the trace its run started in, unless the span continues it already."""
        run = _span_context(run_context)
        if run is None:
            return
        for span in self._spans:
            if span.get_span_context().trace_id != run.trace_id:
                span.add_link(run, {"approvals.link": "run"})


@contextmanager
def requesting_calls(
    calls: Sequence[tuple[str, str]], *, engine: str | None = None, agent: str | None = None, run_id: str | None = None
) -> Iterator[RequestedCalls]:
    """`approvals.call.request`, one span a call (`(tool name, tool call id)`), around storing them.

    Children of the current span: a worker's pause, in the run's trace; a gate's request, in
    its caller's (the HTTP request's traceparent). A failed write ends them with its error.
    """
    if not calls or not enabled():
        yield RequestedCalls()
        return
    common = {"approvals.engine": engine, "gen_ai.agent.name": agent, "approvals.run.id": run_id}
    spans = [
        _tracer.start_span(
            "approvals.call.request",
            attributes={
                **{k: v for k, v in common.items() if v is not None},
                "gen_ai.tool.name": tool_name,
                "gen_ai.tool.call.id": tool_call_id,
            },
        )
        for tool_name, tool_call_id in calls
    ]
    try:
        yield RequestedCalls(spans)
    except BaseException as exc:
        for span in spans:
            _failed(span, exc)
        raise
    finally:
        for span in spans:
            span.end()


class CallTrace:
    """What a step on a stored call (a decision, a hand-out, an outcome) learns as it is written.

    The step reads the call anyway (locked); the caller hands it over with `found`, and the
    step's span is made when the step ends, with the time it began, in the call's trace:
    nothing is read for the span alone. A step that neither found its call nor failed (a
    hand-out of a call handed out before) records nothing. `span` is the span afterwards (None
    when none was made), for the step's log line to name (`within`).
    """

    __slots__ = ("call_context", "run_context", "seen", "span")

    def __init__(self) -> None:
        self.call_context: Mapping[str, str] | None = None
        self.run_context: Mapping[str, str] | None = None
        self.seen = False
        self.span: Span | None = None

    def found(self, call: Any, run_context: Mapping[str, str] | None = None) -> None:
        """The call as the step left it (its stored `trace_context`), and its run's stored context if read."""
        self.call_context = getattr(call, "trace_context", None)
        self.run_context = run_context
        self.seen = True


def _span_context(stored: Mapping[str, str] | None) -> trace.SpanContext | None:
    if not stored:
        return None
    found = trace.get_current_span(_W3C.extract(dict(stored))).get_span_context()
    return found if found.is_valid else None


def _failed(span: Span, error: BaseException) -> None:
    span.record_exception(error)
    span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))


@contextmanager
def _call_step(name: str, attributes: dict[str, Any]) -> Iterator[CallTrace]:
    """`name`, a span of the call's trace (its stored context the parent), linked to its run's and to the
    current span (the request that made the step); in the current trace when the call's context is unknown
    (the step failed before reading it, or the call was stored untraced)."""
    found = CallTrace()
    if not enabled():
        yield found
        return
    started = time.time_ns()
    current = _current_link()
    error: BaseException | None = None
    try:
        yield found
    except BaseException as exc:
        error = exc
        raise
    finally:
        if found.seen or error is not None:
            found.span = _step_span(name, attributes, found, started, current, error)


def _step_span(
    name: str,
    attributes: dict[str, Any],
    found: CallTrace,
    started: int,
    current: list[Link],
    error: BaseException | None,
) -> Span:
    """The span of a step that ended (see `_call_step`)."""
    stored = found.call_context or found.run_context  # a call stored before calls had contexts: its run's
    links = []
    run = _span_context(found.run_context) if found.call_context else None
    if run is not None:
        links.append(Link(run, {"approvals.link": "run"}))
    if stored:
        links.extend(Link(link.context, {"approvals.link": "request"}) for link in current)
    span = _tracer.start_span(name, context=continued(stored), links=links, attributes=attributes, start_time=started)
    if error is not None:
        _failed(span, error)
    span.end()
    return span


def deciding(call_id: str, verdict: object) -> AbstractContextManager[CallTrace]:
    """`approvals.decide`: a person's verdict, a span of the call's trace, linked to the deciding request.

    The call (and its run's context) come from the decision's own locked reads (the caller
    passes them to `CallTrace.found`). A decision that fails (refused, conflicting) is recorded
    with its error, in the current trace.
    """
    kind = {"EditAndApprove": "edit"}.get(type(verdict).__name__, type(verdict).__name__.lower())
    return _call_step("approvals.decide", {"approvals.call.id": call_id, "approvals.verdict": kind})


def handing_out(call_id: str) -> AbstractContextManager[CallTrace]:
    """`approvals.call.hand_out`: an approved call given to its caller to run, in the call's trace."""
    return _call_step("approvals.call.hand_out", {"approvals.call.id": call_id})


def settling(call_id: str, outcome: str) -> AbstractContextManager[CallTrace]:
    """`approvals.call.outcome`: how a call its caller ran went, in the call's trace."""
    return _call_step("approvals.call.outcome", {"approvals.call.id": call_id, "approvals.call.outcome": str(outcome)})


def within(step: CallTrace) -> AbstractContextManager[object]:
    """The step's span as the current one (ended already), so lines logged inside name the call's trace."""
    if step.span is None:
        return nullcontext()
    return trace.use_span(step.span, end_on_exit=False)
