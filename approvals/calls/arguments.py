"""Checking a tool call's arguments: the errors it reports, and the validator of a hand-written JSON Schema.

Every validator of arguments (a function's pydantic model in our engine, pydantic-ai's, a
gate caller's JSON Schema) reports `ArgsInvalid` with one `ArgError` a problem, so reviewers and
models read the same words whichever engine asked. `JsonSchemaArgs` checks arguments against a
schema with `jsonschema`, bounded in time (`bounded_jsonschema`); the gate validates requests
with it (`approvals.calls.requests`) and our engine's `Tool.from_schema` tools do too.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jsonschema

from .bounded_jsonschema import bounded_run, schema_problems
from .bounded_jsonschema import install as install_linear_patterns

__all__ = ("ArgError", "ArgsInvalid", "ArgsSchema", "JsonSchema", "JsonSchemaArgs", "check_json_schema")

install_linear_patterns()  # no schema may make validation backtrack for ever (see bounded_jsonschema)

JsonSchema = dict[str, Any]


@dataclass(frozen=True)
class ArgError:
    """One problem with a call's arguments."""

    location: str
    """Dotted path to the offending value; empty for the arguments as a whole."""
    message: str


class ArgsInvalid(Exception):
    """The arguments did not validate; `errors` says where and why."""

    def __init__(self, errors: list[ArgError]) -> None:
        self.errors = errors
        super().__init__("; ".join(f"{e.location}: {e.message}" for e in errors))


class ArgsSchema(ABC):
    """Validates a call's arguments and maps them onto the function's parameters."""

    json_schema: JsonSchema

    @abstractmethod
    def validate_python(self, data: Any) -> Any:
        """Validate already-parsed arguments; raise `ArgsInvalid`."""

    @abstractmethod
    def validate_json(self, data: str | bytes) -> Any:
        """Parse and validate arguments sent as JSON text; raise `ArgsInvalid`."""

    @abstractmethod
    def call_args(self, validated: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Positional and keyword arguments for the function, without the context."""

    @abstractmethod
    def dump(self, validated: Any) -> dict[str, Any]:
        """The validated arguments as JSON-compatible data, as a reviewer sees them."""


class JsonSchemaArgs(ArgsSchema):
    """Arguments described by a hand-written JSON schema, checked with `jsonschema`."""

    def __init__(self, json_schema: JsonSchema) -> None:
        self.json_schema = json_schema
        validator_cls = jsonschema.validators.validator_for(json_schema, default=jsonschema.Draft202012Validator)
        self._validator = validator_cls(json_schema, format_checker=validator_cls.FORMAT_CHECKER)

    def validate_python(self, data: Any) -> Any:
        """The arguments, or `ArgsInvalid` with every error; bounded in time whatever the schema (`bounded_run`)."""
        try:
            found = bounded_run(lambda: list(self._validator.iter_errors(data)), _too_costly)
        except RecursionError:
            raise ArgsInvalid([ArgError("", "the arguments nest too deeply to check")]) from None
        errors = [
            ArgError(".".join(str(p) for p in error.absolute_path), error.message)
            for error in sorted(found, key=lambda e: list(map(str, e.absolute_path)))
        ]
        if errors:
            raise ArgsInvalid(errors)
        return dict(data)

    def validate_json(self, data: str | bytes) -> Any:
        try:
            parsed = json.loads(data)
        except ValueError as exc:
            raise ArgsInvalid([ArgError("", f"Invalid JSON: {exc}")]) from None
        return self.validate_python(parsed)

    def call_args(self, validated: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (), dict(validated)

    def dump(self, validated: Any) -> dict[str, Any]:
        return dict(validated)


def check_json_schema(json_schema: Any) -> list[str]:
    """Problems that make a hand-written schema unusable for tool arguments."""
    if not isinstance(json_schema, Mapping):
        return ["json_schema must be a dict"]
    problems: list[str] = []
    if json_schema.get("type") != "object":
        problems.append('json_schema must describe an object ("type": "object")')
    validator_cls = jsonschema.validators.validator_for(json_schema, default=jsonschema.Draft202012Validator)
    try:  # counted against the same time budget as a validation
        bounded_run(lambda: validator_cls.check_schema(dict(json_schema)), _Refused)
    except jsonschema.SchemaError as exc:
        problems.append(f"json_schema is not a valid JSON schema: {exc.message}")
    except (_Refused, RecursionError) as exc:
        return [f"json_schema is too costly to check: {exc or 'it nests too deeply'}"]
    problems.extend(schema_problems(json_schema))
    return problems


class _Refused(Exception):
    """A check that ran out of time, said as a problem."""


def _too_costly(reason: str) -> ArgsInvalid:
    return ArgsInvalid([ArgError("", reason)])
