"""Run, call and trace ids on every log line, so an operator can follow one run through all its processes.

A run's lines are spread over the process that started it, the workers that resumed it hours later
and the web process where a person decided; the ids on each line join them up, and the trace and
span ids join a line to its trace. The ids live in context variables, so they follow the work
through `await`s and into the tasks it starts, and a log call never has to pass them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from opentelemetry import trace

__all__ = ("LOG_FIELDS", "ContextFilter", "current_call_id", "current_run_id", "with_call", "with_run")

LOG_FIELDS = ("run_id", "call_id", "trace_id", "span_id")
"""The attributes `ContextFilter` puts on every record (None when not known)."""

_run_id: ContextVar[str | None] = ContextVar("approvals_run_id", default=None)
_call_id: ContextVar[str | None] = ContextVar("approvals_call_id", default=None)


@contextmanager
def with_run(run_id: str | None) -> Iterator[None]:
    """Lines logged inside carry `run_id` (the work is this run's)."""
    token = _run_id.set(run_id)
    try:
        yield
    finally:
        _run_id.reset(token)


@contextmanager
def with_call(call_id: str | None) -> Iterator[None]:
    """Lines logged inside carry `call_id` (the work is about this call)."""
    token = _call_id.set(call_id)
    try:
        yield
    finally:
        _call_id.reset(token)


def current_run_id() -> str | None:
    """The run the current work belongs to, if any."""
    return _run_id.get()


def current_call_id() -> str | None:
    """The call the current work is about, if any."""
    return _call_id.get()


class ContextFilter(logging.Filter):
    """Puts the run, call, trace and span ids on every record it sees; never drops one.

    Attach it to a handler, not a logger: a logger's filters do not see its children's records.
    An id a caller passed itself (`extra={"run_id": ...}`) is kept.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "run_id", None) is None:
            record.run_id = _run_id.get()
        if getattr(record, "call_id", None) is None:
            record.call_id = _call_id.get()
        span = trace.get_current_span().get_span_context()
        if span.is_valid:
            record.trace_id = trace.format_trace_id(span.trace_id)
            record.span_id = trace.format_span_id(span.span_id)
        else:
            record.trace_id = record.span_id = None
        return True
