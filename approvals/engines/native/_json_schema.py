"""JSON schema rewrites for OpenAI's strict tool mode, and the rules that mode enforces.

Strict mode makes the provider guarantee that arguments match the schema, but it accepts
only a subset of JSON schema: every property required (optionals become nullable),
`additionalProperties: false` on every object, no defaults, and a short list of keywords.
`to_strict` rewrites a schema into that subset, moving constraints it must drop into the
description so the model still reads them (our own validator still enforces them);
`strict_violations` checks a schema against the rules; `drop_strict_nulls` undoes the
"optional became nullable" rewrite on incoming arguments so parameter defaults apply.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

from ...exceptions import UserError

JsonSchema = dict[str, Any]

#: Keywords strict mode rejects; `to_strict` moves them into the description.
STRICT_INCOMPATIBLE_KEYWORDS = (
    "minLength",
    "maxLength",
    "patternProperties",
    "unevaluatedProperties",
    "propertyNames",
    "minProperties",
    "maxProperties",
    "unevaluatedItems",
    "contains",
    "minContains",
    "maxContains",
    "uniqueItems",
)
#: Keywords strict mode rejects that carry no meaning for the model; dropped.
_STRICT_DROPPED_KEYWORDS = ("title", "$schema", "discriminator", "examples", "readOnly", "writeOnly", "deprecated")
#: Keywords that change what is valid in ways strict mode cannot express.
_STRICT_UNSUPPORTED_KEYWORDS = ("not", "if", "then", "else", "dependentRequired", "dependentSchemas", "prefixItems")
STRICT_STRING_FORMATS = frozenset(
    {"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"}
)
_STRICT_ALLOWED_KEYWORDS = frozenset(
    {
        "type", "properties", "required", "additionalProperties", "items", "anyOf", "$ref", "$defs",
        "enum", "const", "description", "pattern", "format", "minimum", "maximum", "exclusiveMinimum",
        "exclusiveMaximum", "multipleOf", "minItems", "maxItems",
    }
)  # fmt: skip
_LOOKAROUND = re.compile(r"(?<!\\)\(\?(=|!|<=|<!)")
_MAX_NESTING = 10


class StrictSchemaError(UserError):
    """A schema cannot be expressed in OpenAI's strict mode; the message lists why."""


def to_strict(schema: Mapping[str, Any]) -> JsonSchema:
    """Rewrite a tool's parameters schema so OpenAI's strict mode accepts it."""
    result = copy.deepcopy(dict(schema))
    problems: list[str] = []
    if result.get("type") != "object":
        problems.append("#: the parameters schema must be an object")
    _strictify(result, "#", problems)
    for name, definition in result.get("$defs", {}).items():
        _strictify(definition, f"#/$defs/{name}", problems)
    if problems:
        raise StrictSchemaError("schema cannot be made strict:\n" + "\n".join(f"  - {p}" for p in problems))
    return result


def _strictify(node: JsonSchema, path: str, problems: list[str]) -> None:
    notes: list[str] = []
    for key in _STRICT_DROPPED_KEYWORDS:
        node.pop(key, None)
    if "default" in node:
        notes.append(f"default: {_note_value(node.pop('default'))}")
    for key in STRICT_INCOMPATIBLE_KEYWORDS:
        if key in node:
            notes.append(f"{key}={_note_value(node.pop(key))}")
    fmt = node.get("format")
    if fmt is not None and fmt not in STRICT_STRING_FORMATS:
        notes.append(f"format={node.pop('format')}")
    pattern = node.get("pattern")
    if isinstance(pattern, str) and _LOOKAROUND.search(pattern):
        notes.append(f"pattern={node.pop('pattern')}")
    if notes:
        note = ", ".join(notes)
        node["description"] = f"{node['description']} ({note})" if node.get("description") else note
    for key in _STRICT_UNSUPPORTED_KEYWORDS:
        if key in node:
            problems.append(f"{path}: keyword {key!r} is not supported in strict mode")
    if "oneOf" in node:
        node["anyOf"] = node.pop("oneOf")
    if "allOf" in node:
        parts = node.pop("allOf")
        if len(parts) == 1 and isinstance(parts[0], dict):
            for key, value in parts[0].items():
                node.setdefault(key, value)
        else:
            problems.append(f"{path}: 'allOf' with several schemas is not supported in strict mode")
    if "$ref" in node and len(node) > 1:
        # strict mode rejects siblings of $ref but accepts them beside anyOf
        node["anyOf"] = [{"$ref": node.pop("$ref")}]
    if not any(key in node for key in ("type", "anyOf", "$ref", "enum", "const")):
        problems.append(f"{path}: a value of any type (no 'type') is not allowed in strict mode")

    if node.get("type") == "object" or "properties" in node:
        extra = node.get("additionalProperties")
        if extra not in (None, False):
            problems.append(f"{path}: objects with free-form keys (dict types) are not allowed in strict mode")
        node["additionalProperties"] = False
        properties: dict[str, Any] = node.setdefault("properties", {})
        required = set(node.get("required", ()))
        for name, sub in list(properties.items()):
            _strictify(sub, f"{path}/properties/{name}", problems)
            if name not in required and not accepts_null(sub):
                properties[name] = _nullable(sub)
        node["required"] = list(properties)
    if isinstance(node.get("items"), dict):
        _strictify(node["items"], f"{path}/items", problems)
    for index, sub in enumerate(node.get("anyOf", ())):
        if isinstance(sub, dict):
            _strictify(sub, f"{path}/anyOf/{index}", problems)


def _nullable(schema: JsonSchema) -> JsonSchema:
    """`schema` or null; the description stays on the outside where the model reads it."""
    inner = dict(schema)
    description = inner.pop("description", None)
    if set(inner) == {"anyOf"}:
        result: JsonSchema = {"anyOf": [*inner["anyOf"], {"type": "null"}]}
    else:
        result = {"anyOf": [inner, {"type": "null"}]}
    if description:
        result["description"] = description
    return result


def accepts_null(schema: Any) -> bool:
    """True when the schema explicitly allows null."""
    if not isinstance(schema, dict):
        return False
    kind = schema.get("type")
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return True
    if None in schema.get("enum", ()) or ("const" in schema and schema["const"] is None):
        return True
    return any(accepts_null(sub) for sub in schema.get("anyOf", ()))


def _note_value(value: Any) -> str:
    return repr(value) if isinstance(value, str) else str(value).replace("None", "null")


def strict_violations(schema: Mapping[str, Any]) -> list[str]:
    """Every way `schema` breaks OpenAI's strict-mode rules; empty when it complies."""
    problems: list[str] = []
    if schema.get("type") != "object":
        problems.append("#: the root must be an object")
    if "anyOf" in schema:
        problems.append("#: the root must not be anyOf")
    _check_strict(schema, "#", 0, problems)
    for name, definition in schema.get("$defs", {}).items():
        _check_strict(definition, f"#/$defs/{name}", 0, problems)
    return problems


def _check_strict(node: Any, path: str, depth: int, problems: list[str]) -> None:
    if not isinstance(node, Mapping):
        problems.append(f"{path}: a schema must be an object")
        return
    if depth > _MAX_NESTING:
        problems.append(f"{path}: nested deeper than {_MAX_NESTING} levels")
    for key in node:
        if key not in _STRICT_ALLOWED_KEYWORDS:
            problems.append(f"{path}: keyword {key!r} is not allowed")
    if "$ref" in node and len(node) > 1:
        problems.append(f"{path}: $ref must not have sibling keywords")
    if not any(key in node for key in ("type", "anyOf", "$ref", "enum", "const")):
        problems.append(f"{path}: every schema needs a type, anyOf, $ref, enum or const")
    fmt = node.get("format")
    if fmt is not None and fmt not in STRICT_STRING_FORMATS:
        problems.append(f"{path}: format {fmt!r} is not supported")
    pattern = node.get("pattern")
    if isinstance(pattern, str) and _LOOKAROUND.search(pattern):
        problems.append(f"{path}: patterns with lookaround are not supported")
    kind = node.get("type")
    if kind == "object" or (isinstance(kind, list) and "object" in kind) or "properties" in node:
        if node.get("additionalProperties") is not False:
            problems.append(f"{path}: additionalProperties must be false")
        properties = node.get("properties", {})
        if sorted(node.get("required", [])) != sorted(properties):
            problems.append(f"{path}: every property must be listed in required")
        for name, sub in properties.items():
            _check_strict(sub, f"{path}/properties/{name}", depth + 1, problems)
    if "items" in node:
        _check_strict(node["items"], f"{path}/items", depth + 1, problems)
    for index, sub in enumerate(node.get("anyOf", ())):
        _check_strict(sub, f"{path}/anyOf/{index}", depth, problems)


def drop_strict_nulls(data: Any, schema: Mapping[str, Any]) -> Any:
    """Remove nulls a strict-mode model sent for optional, non-nullable properties.

    Strict mode makes the model send every property, with null for "not given"; the
    original (non-strict) `schema` says which of those nulls stand for an omitted value,
    so the parameter's default applies instead of a validation error.
    """
    return _drop_nulls(data, schema, schema.get("$defs", {}))


def _drop_nulls(data: Any, schema: Mapping[str, Any], defs: Mapping[str, Any]) -> Any:
    schema = _resolve(schema, defs)
    if isinstance(data, dict) and "anyOf" in schema:  # Optional[Model]: follow the object branch
        objects = [_resolve(s, defs) for s in schema["anyOf"] if isinstance(s, Mapping)]
        schema = next((s for s in objects if "properties" in s), schema)
    if isinstance(data, dict) and "properties" in schema:
        properties = schema["properties"]
        required = set(schema.get("required", ()))
        cleaned: dict[str, Any] = {}
        for key, value in data.items():
            sub = properties.get(key)
            if value is None and sub is not None and key not in required and not accepts_null(_resolve(sub, defs)):
                continue
            cleaned[key] = _drop_nulls(value, sub, defs) if sub is not None else value
        return cleaned
    if isinstance(data, list) and isinstance(schema.get("items"), dict):
        return [_drop_nulls(item, schema["items"], defs) for item in data]
    return data


def _resolve(schema: Mapping[str, Any], defs: Mapping[str, Any]) -> Mapping[str, Any]:
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        resolved: Mapping[str, Any] = defs.get(ref.removeprefix("#/$defs/"), schema)
        return resolved
    any_of = schema.get("anyOf")
    if isinstance(any_of, list) and len(any_of) == 1 and isinstance(any_of[0], dict):
        return _resolve(any_of[0], defs)
    return schema
