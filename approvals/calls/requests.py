"""A request for a decision on one tool call, from any engine, and how its arguments are checked.

Resumable engines (our agents, pydantic-ai) validate a call with the tool's own validator
before it pauses. An agent that runs elsewhere (a gate) sends its call here: the arguments
are validated against the JSON Schema it gives (with `jsonschema`), or against the tool an
agent registered in this process has under that name; a reviewer's edit is later checked by
the same validator. The digest of the validated arguments binds every approval to them.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from ..exceptions import InvalidArguments, ToolRetryError, UserError
from .arguments import ArgsInvalid, JsonSchemaArgs, check_json_schema
from .canonical import canonical_json, digest, non_finite_path
from .tools import ArgsValidator, ToolDefinition

__all__ = (
    "ANY_OBJECT",
    "MAX_APPROVAL_TTL",
    "CallRequest",
    "ReportedOutcome",
    "ValidatedRequest",
    "validate_request",
    "validate_with_schema",
)

ANY_OBJECT: dict[str, Any] = {"type": "object"}
"""The schema of a call whose caller gave none: any JSON object."""
MAX_TOOL_NAME = 64
MAX_NAME = 200
MAX_APPROVAL_TTL = 366 * 24 * 3600.0
"""A year and a day: the longest people may be given to decide a call."""


@dataclass(frozen=True, kw_only=True)
class CallRequest:
    """One tool call an agent asks a decision on."""

    engine: str
    """The engine asking (`approvals.engines`): its runs are continued by it, not by our worker."""
    source: str
    """Who asks: the agent or application (the run's agent name)."""
    session_id: str
    """The caller's own id for the session the call belongs to; its calls gather in one run."""
    tool_name: str
    args: Mapping[str, Any]
    tool_call_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    """The idempotency key: asking again with the same one gets the same call and the same decision."""
    json_schema: Mapping[str, Any] | None = None
    """The tool's arguments as JSON Schema; None: a registered tool's validator, or any object."""
    description: str = ""
    """What the tool does, shown to reviewers."""
    context: Mapping[str, Any] | None = None
    """The call's circumstances (working directory, requester, ...), shown to reviewers."""
    reason: str | None = None
    """Why the call needs a person, when the caller says."""
    approvals_required: int = 1
    approval_ttl: float | None = None
    """Seconds people have to decide before the call expires (a denial the caller reads)."""
    same_arguments_same_call: bool = False
    """Whether asking again with the same tool and arguments in the session, under another key, is the same call
    while that call waits or is approved and not yet handed out. A coding CLI's retry has a new tool call id, but
    is the model asking again (after "it waits for approval", or with a reviewer's edit); a service's two
    identical refunds are two calls, so the generic gate leaves this off."""

    def problems(self) -> list[str]:
        """What makes the request unusable, before anything is validated or stored."""
        found = []
        for name, value, limit in (
            ("source", self.source, MAX_NAME),
            ("session_id", self.session_id, MAX_NAME),
            ("tool_call_id", self.tool_call_id, MAX_NAME),
            ("tool_name", self.tool_name, MAX_TOOL_NAME),
        ):
            if not value.strip():
                found.append(f"{name} must not be empty")
            elif len(value) > limit:
                found.append(f"{name} must be at most {limit} characters")
        if self.approvals_required < 1:
            found.append("approvals_required must be at least 1")
        if self.approval_ttl is not None and not 0 < self.approval_ttl <= MAX_APPROVAL_TTL:
            found.append(f"approval_ttl must be a positive number of seconds, at most {MAX_APPROVAL_TTL:g}")
        if self.json_schema is not None:
            try:
                found.extend(_schema_problems(_schema_text(self.json_schema)))
            except (TypeError, ValueError):
                found.append("json_schema must be plain JSON (no NaN or infinite numbers)")
        return found

    def expires_at(self, now: dt.datetime) -> dt.datetime | None:
        return now + dt.timedelta(seconds=self.approval_ttl) if self.approval_ttl else None


@dataclass(frozen=True)
class ReportedOutcome:
    """A report that a tool a caller was handed ran: which call (its key, else its tool and input), and the output."""

    engine: str
    source: str
    session_id: str
    tool_call_id: str | None
    tool_name: str
    args_digest: str
    result: Any


@dataclass(frozen=True)
class ValidatedRequest:
    """A request whose arguments passed their validator: what is stored and shown to reviewers."""

    request: CallRequest
    args: dict[str, Any]
    args_digest: str
    definition: ToolDefinition
    """The tool as the caller described it (or as the registered tool is), stored with the call."""


def _schema_text(json_schema: Mapping[str, Any]) -> str:
    return canonical_json(json_schema)


@lru_cache(maxsize=256)
def _schema_problems(schema_text: str) -> tuple[str, ...]:
    """`check_json_schema`, once per distinct schema: checking one against the metaschema takes milliseconds,
    and a gate's callers send the same few schemas with every call."""
    return tuple(check_json_schema(json.loads(schema_text)))


@lru_cache(maxsize=256)
def _schema_args(schema_text: str) -> JsonSchemaArgs:
    """A validator for the schema, built once per distinct schema."""
    return JsonSchemaArgs(json.loads(schema_text))


def validate_with_schema(tool_name: str, json_schema: Mapping[str, Any], args: Any) -> dict[str, Any]:
    """`args` checked against `json_schema`; `InvalidArguments` lists every field error."""
    if not isinstance(args, Mapping):
        raise InvalidArguments(tool_name, [("", "the arguments must be a JSON object")], "Invalid arguments")
    try:
        validated: dict[str, Any] = _schema_args(_schema_text(json_schema)).validate_python(dict(args))
    except ArgsInvalid as exc:
        errors = [(error.location, error.message) for error in exc.errors]
        raise InvalidArguments(tool_name, errors, f"Invalid arguments for {tool_name}: {exc}") from None
    bad = non_finite_path(validated)
    if bad is not None:
        where = ".".join(map(str, bad))
        raise InvalidArguments(tool_name, [(where, "must be a finite number")], "Invalid arguments: not finite")
    return validated


def validate_request(request: CallRequest, tool: ArgsValidator | None = None) -> ValidatedRequest:
    """Check a request and its arguments: against its JSON Schema, else `tool` (a registered one), else any object.

    `UserError` for an unusable request, `InvalidArguments` (with field errors) for bad arguments.
    """
    problems = request.problems()
    if problems:
        raise UserError("Invalid call request: " + "; ".join(problems))
    if request.json_schema is None and tool is not None:
        try:
            args = tool.dump_args(tool.validate_args(dict(request.args)))
        except ToolRetryError as exc:
            raise InvalidArguments(request.tool_name, exc.errors, exc.message) from None
        definition = tool.tool_def
    else:
        schema = dict(request.json_schema) if request.json_schema is not None else ANY_OBJECT
        args = validate_with_schema(request.tool_name, schema, request.args)
        definition = ToolDefinition(
            name=request.tool_name, parameters_json_schema=schema, description=request.description
        )
    return ValidatedRequest(request, args, digest(args), definition)
