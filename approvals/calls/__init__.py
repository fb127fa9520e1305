"""The call lifecycle every engine uses: request a decision on a tool call, decide, wait, settle.

A call is requested with validated arguments (the tool's validator, or the JSON Schema the
caller gives), their digest and the tool's definition; reviewers decide it (`Store.decide`,
one rule set for every channel); the caller waits for the decision (`Store.wait_for_decision`,
woken by `LISTEN/NOTIFY` on PostgreSQL, in-process on SQLite) and reports the outcome
(`Store.settle_call`). Calls of an agent that runs elsewhere gather in a run of that agent,
so the inbox, run page, audit, quorum, expiry and webhooks treat them as any other.
"""

from __future__ import annotations

from .requests import ANY_OBJECT, CallRequest, ValidatedRequest, validate_request, validate_with_schema

__all__ = ("ANY_OBJECT", "CallRequest", "ValidatedRequest", "validate_request", "validate_with_schema")
