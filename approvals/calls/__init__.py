"""The call lifecycle every engine uses: request a decision on a tool call, decide, wait, settle.

A call is requested with validated arguments (the tool's validator, or the JSON Schema the
caller gives), their digest and the tool's definition; reviewers decide it (`store.calls.decide`,
one rule set for every channel); the caller waits for the decision (`store.calls.wait_for_decision`,
woken by `LISTEN/NOTIFY` on PostgreSQL, in-process on SQLite) and reports the outcome
(`store.calls.settle_call`). Calls of an agent that runs elsewhere gather in a run of that agent,
so the inbox, run page, audit, quorum, expiry and webhooks treat them as any other.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .requests import ANY_OBJECT, CallRequest, ValidatedRequest, validate_request, validate_with_schema

__all__ = ("ANY_OBJECT", "CallRequest", "ValidatedRequest", "validate_request", "validate_with_schema")


def __getattr__(name: str) -> Any:
    """The requests' names, loaded when first used: `calls.actors` and `calls.states` are read by layers
    (the CLI's help, the rules) that need not load the JSON Schema validators `calls.requests` uses."""
    if name in __all__:
        return getattr(importlib.import_module(".requests", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
