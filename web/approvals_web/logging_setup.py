"""How a server or worker process writes its log lines: readable text, or one JSON object a line.

JSON is for log collectors (Loki, Elasticsearch, CloudWatch): each line is an object with the
fields in `JSON_FIELDS`, so a run, a call or a trace can be searched for without parsing text.
Either way every line carries the run, call and trace ids `approvals.logs` knows.
"""

from __future__ import annotations

import logging
import sys
from typing import IO, Literal

from approvals.logs import ContextFilter

__all__ = ("JSON_FIELDS", "LogFormat", "configure_logging")

LogFormat = Literal["text", "json"]

JSON_FIELDS = ("time", "level", "logger", "message", "run_id", "call_id", "trace_id", "span_id")
"""The fields of every JSON line (ids are null when not known); an exception adds `exc_info`."""

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

_INSTALLED = "_approvals_handler"
"""Marks the handler this module installed, so configuring again replaces it instead of adding another."""


def configure_logging(
    log_format: LogFormat = "text", *, stream: IO[str] | None = None, level: int = logging.INFO
) -> logging.Handler:
    """Send the library's lines (INFO and up by default) and every library's warnings to `stream` (stderr).

    The handler goes on the root logger, so other libraries' lines (a web server's, a database
    driver's) come out in the same format; the `approvals` loggers are let through from `level`.
    Calling it again replaces the handler it installed before. Returns the handler.
    """
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(_json_formatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    handler.addFilter(ContextFilter())
    setattr(handler, _INSTALLED, True)
    root = logging.getLogger()
    for old in [existing for existing in root.handlers if getattr(existing, _INSTALLED, False)]:
        root.removeHandler(old)
    root.addHandler(handler)
    approvals = logging.getLogger("approvals")
    approvals.setLevel(level)
    approvals.propagate = True
    return handler


def _json_formatter() -> logging.Formatter:
    from pythonjsonlogger.json import JsonFormatter  # the server extra; only needed when JSON is asked for

    return JsonFormatter(
        ["levelname", "name", "message", "run_id", "call_id", "trace_id", "span_id"],
        rename_fields={"levelname": "level", "name": "logger"},
        timestamp="time",
    )
