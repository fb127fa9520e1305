"""A tool's JSON schema as labelled form fields, and the edit form's strings back as JSON values.

The reviewer reads and edits arguments through the same fields, so the schema is walked in
one place: `$ref`s and nullable unions resolved, each property given a kind, a type label
and its constraints in words. The approve-and-remember form (`RememberForm`) lives here too:
what the reviewer chose, kept as typed when the store refuses it. Nothing here touches the
database or the request.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from approvals.policy import Remember, RememberScope, pinned_condition

from .views import as_text

FIELD_PREFIX = "args."
"""Edit-form inputs are named `args.<dotted path>`, apart from csrf_token and the other form fields."""


def _input_name(path: tuple[str, ...]) -> str:
    return FIELD_PREFIX + ".".join(path)


Kind = Literal["string", "integer", "number", "scalar", "boolean", "enum", "object", "json"]


COMMAND_FIELDS = frozenset({"command", "cmd", "script"})
"""Argument names whose text is a shell command."""


@dataclass
class ArgField:
    """One argument (or a nested model's property) as a labelled field."""

    path: tuple[str, ...]
    label: str
    kind: Kind
    type_label: str
    description: str | None
    constraints: list[str]
    required: bool
    nullable: bool
    has_value: bool
    """False when the arguments leave this optional field out."""
    display: str
    """The value as text for reading (JSON for complex values)."""
    input_value: str
    """What the edit form's input holds: the current value, or what the reviewer typed."""
    options: list[tuple[str, str]] = field(default_factory=list)
    """(submitted value, label) for a select: enums and booleans that may be null."""
    children: list[ArgField] = field(default_factory=list)
    error: str | None = None
    multiline: bool = False

    @property
    def dotted(self) -> str:
        return ".".join(self.path)

    @property
    def name(self) -> str:
        """The form input's name."""
        return _input_name(self.path)

    @property
    def checked(self) -> bool:
        return self.input_value == "true"

    @property
    def is_command(self) -> bool:
        """A shell command (a coding agent's `command`): shown as code, edited in a monospace box."""
        return self.kind == "string" and self.path[-1] in COMMAND_FIELDS


class _Schema:
    """A JSON schema with local `$ref`s resolved against its `$defs`."""

    def __init__(self, root: Mapping[str, Any]) -> None:
        self.root = root

    def resolve(self, node: Mapping[str, Any], depth: int = 0) -> dict[str, Any]:
        """The node with `$ref` (and a lone `allOf`) replaced by its target; its own keys win."""
        resolved = dict(node)
        while depth < 20:
            depth += 1
            if "$ref" in resolved and isinstance(resolved["$ref"], str) and resolved["$ref"].startswith("#/"):
                target: Any = self.root
                for part in resolved.pop("$ref")[2:].split("/"):
                    target = (
                        target.get(part.replace("~1", "/").replace("~0", "~"), {}) if isinstance(target, dict) else {}
                    )
                resolved = {**target, **resolved}
            elif isinstance(resolved.get("allOf"), list) and len(resolved["allOf"]) == 1:
                (only,) = resolved.pop("allOf")
                resolved = {**only, **resolved}
            else:
                break
        return resolved

    def unwrap_nullable(self, node: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """`anyOf [X, null]` or `type: [x, "null"]` -> (X, True)."""
        options = node.get("anyOf") or node.get("oneOf")
        if isinstance(options, list):
            non_null = [o for o in options if not (isinstance(o, dict) and o.get("type") == "null")]
            if len(non_null) < len(options):
                rest = {k: v for k, v in node.items() if k not in ("anyOf", "oneOf")}
                if len(non_null) == 1:
                    return {**self.resolve(non_null[0]), **rest}, True
                return {**rest, "anyOf": non_null}, True
        types = node.get("type")
        if isinstance(types, list) and "null" in types:
            others = [t for t in types if t != "null"]
            return {**node, "type": others[0] if len(others) == 1 else others}, True
        return node, False


def _kind(node: Mapping[str, Any]) -> Kind:
    if "enum" in node or "const" in node:
        return "enum"
    declared: object = node.get("type")  # not Any, so the match below narrows it to the literal
    match declared:
        case "string" | "integer" | "number" | "boolean" as simple:
            return simple
    if declared == "object" and isinstance(node.get("properties"), dict) and node["properties"]:
        return "object"
    options = node.get("anyOf") or node.get("oneOf")
    if (
        isinstance(options, list)
        and options
        and all(isinstance(o, dict) and o.get("type") in ("string", "integer", "number") for o in options)
    ):
        return "scalar"  # e.g. Decimal: a number or a numeric string
    return "json"


def _type_label(node: Mapping[str, Any], kind: Kind, nullable: bool) -> str:
    if kind == "enum":
        label = "choice"
    elif kind == "object":
        label = f"object ({node['title']})" if node.get("title") else "object"
    elif kind == "scalar":
        label = " or ".join(str(o.get("type")) for o in node.get("anyOf") or node.get("oneOf") or [])
    elif node.get("type") == "array":
        items = node.get("items")
        item_type = items.get("type") or items.get("title") if isinstance(items, dict) else None
        label = f"list of {item_type}" if item_type else "list"
    elif kind == "json" and node.get("type") == "object":
        label = "object"
    elif kind == "json":
        label = "JSON"
    else:
        label = kind
    return f"{label} or null" if nullable else label


def _constraints(node: Mapping[str, Any]) -> list[str]:
    words = {
        "minimum": "≥ {}",
        "exclusiveMinimum": "> {}",
        "maximum": "≤ {}",
        "exclusiveMaximum": "< {}",
        "multipleOf": "multiple of {}",
        "minLength": "at least {} characters",
        "maxLength": "at most {} characters",
        "pattern": "matches {}",
        "format": "format {}",
        "minItems": "at least {} items",
        "maxItems": "at most {} items",
    }
    branches = [node, *(b for b in node.get("anyOf") or node.get("oneOf") or [] if isinstance(b, dict))]
    found: list[str] = []
    for branch in branches:  # a Decimal's limits sit on its "number" branch
        for key, template in words.items():
            if key in branch and (text := template.format(_number(branch[key]))) not in found:
                found.append(text)
    if "enum" in node:
        found.append("one of " + ", ".join(json.dumps(v, ensure_ascii=False) for v in node["enum"]))
    if "default" in node:
        found.append("default " + json.dumps(node["default"], ensure_ascii=False))
    return found


def _number(value: Any) -> Any:
    """500.0 -> 500, for constraints a person reads."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def arg_fields(
    schema: Mapping[str, Any],
    args: Mapping[str, Any],
    *,
    submitted: Mapping[str, str] | None = None,
    errors: Sequence[tuple[str, str]] = (),
) -> tuple[list[ArgField], list[str]]:
    """The arguments as fields, in schema order, and the errors that belong to no field.

    `submitted` (form name -> text) replaces the values shown in inputs, so a reviewer's
    invalid edit is shown back as typed; `errors` are (dotted location, message) pairs.
    """
    resolver = _Schema(schema)
    root = resolver.resolve(schema)
    fields = _fields(resolver, root, args, (), submitted or {}) if root.get("properties") else []
    declared = root.get("properties") or {}
    extra = _extra_schema(root)
    if extra is not None:  # a free-form object, or a tool's **kwargs: one box per other argument given
        fields += [
            _field(resolver, extra, (key,), value, True, False, submitted or {})
            for key, value in args.items()
            if key not in declared
        ]
    return fields, _attach_errors(fields, errors)


def _extra_schema(root: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The schema of arguments beyond the declared properties (a `**kwargs`), or None when there are none.

    An object with no properties at all takes any argument, each in a JSON box.
    """
    extra = root.get("additionalProperties", not root.get("properties"))
    if extra is False:
        return None
    return extra if isinstance(extra, Mapping) else {}


def _fields(
    resolver: _Schema,
    node: Mapping[str, Any],
    values: Mapping[str, Any],
    prefix: tuple[str, ...],
    submitted: Mapping[str, str],
    depth: int = 0,
) -> list[ArgField]:
    """The fields of an object's properties: the arguments themselves, or a nested model's."""
    properties = node.get("properties") or {}
    required = set(node.get("required") or ())
    fields = []
    for name, prop in properties.items():
        if not isinstance(prop, dict):
            continue
        path = (*prefix, name)
        present = isinstance(values, Mapping) and name in values
        value = values.get(name) if present else None
        fields.append(_field(resolver, prop, path, value, present, name in required, submitted, depth))
    return fields


def _field(
    resolver: _Schema,
    raw: Mapping[str, Any],
    path: tuple[str, ...],
    value: Any,
    present: bool,
    required: bool,
    submitted: Mapping[str, str],
    depth: int = 0,
) -> ArgField:
    node, nullable = resolver.unwrap_nullable(resolver.resolve(raw))
    kind = _kind(node)
    if kind == "object" and (depth > 5 or (value is not None and not isinstance(value, dict))):
        kind = "json"
    if not present:
        shown = ""
    elif kind == "json":  # a JSON box: a string keeps its quotes, so it reads back as a string
        shown = json.dumps(value, indent=2, ensure_ascii=False)
    else:
        shown = as_text(value)
    input_value = shown
    options: list[tuple[str, str]] = []
    if kind == "enum":
        choices = node["enum"] if "enum" in node else [node["const"]]
        options = [(json.dumps(c, ensure_ascii=False), as_text(c)) for c in choices]
        if nullable:
            options.insert(0, ("null", "(none)"))
        input_value = json.dumps(value, ensure_ascii=False) if present else ""
    elif kind == "boolean" and nullable:  # three states do not fit a checkbox
        options = [("null", "(none)"), ("true", "true"), ("false", "false")]
        input_value = shown or "null"
    children: list[ArgField] = []
    if kind == "object":
        children = _fields(resolver, node, value if isinstance(value, dict) else {}, path, submitted, depth + 1)
    input_value = submitted.get(_input_name(path), input_value)
    return ArgField(
        path=path,
        label=path[-1],
        kind=kind,
        type_label=_type_label(node, kind, nullable),
        description=node.get("description") or raw.get("description"),
        constraints=_constraints(node),
        required=required,
        nullable=nullable,
        has_value=present,
        display=shown if present else "(not given)",
        input_value=input_value,
        options=options,
        children=children,
        multiline=kind == "json"
        or (kind == "string" and ("\n" in input_value or len(input_value) > 80 or path[-1] in COMMAND_FIELDS)),
    )


def _walk(fields: Iterable[ArgField]) -> Iterable[ArgField]:
    for item in fields:
        yield item
        yield from _walk(item.children)


def _attach_errors(fields: list[ArgField], errors: Sequence[tuple[str, str]]) -> list[str]:
    """Put each error on the deepest field whose path starts its location; return the rest."""
    by_path = {item.dotted: item for item in _walk(fields)}
    leftover = []
    for location, message in errors:
        parts = location.split(".") if location else []
        for cut in range(len(parts), 0, -1):
            target = by_path.get(".".join(parts[:cut]))
            if target is not None:
                rest = ".".join(parts[cut:])
                text = f"{rest}: {message}" if rest else message
                target.error = f"{target.error}; {text}" if target.error else text
                break
        else:
            leftover.append(f"{location}: {message}" if location else message)
    return leftover


def args_from_form(schema: Mapping[str, Any], form: Mapping[str, str]) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """The edit form's strings as JSON values, typed by the schema, and the inputs that could not be read.

    Text that does not parse as the schema's type is passed on unchanged, so the tool's own
    validator names the problem; only unreadable JSON is reported here.
    """
    resolver = _Schema(schema)
    root = resolver.resolve(schema)
    problems: list[tuple[str, str]] = []
    extra_names = {
        name.removeprefix(FIELD_PREFIX)
        for name in form
        if name.startswith(FIELD_PREFIX)
        and name.removeprefix(FIELD_PREFIX).split(".")[0] not in root.get("properties", {})
    }
    # the other arguments (free-form, or **kwargs) come back as the fields they were shown in
    fields, _ = arg_fields(schema, dict.fromkeys(extra_names) if _extra_schema(root) is not None else {})
    return _values(fields, form, problems), problems


def _values(fields: list[ArgField], form: Mapping[str, str], problems: list[tuple[str, str]]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for item in fields:
        if item.kind == "object":
            typed = [v for k, v in form.items() if k.startswith(item.name + ".") and v.strip() not in ("", "false")]
            if typed or item.required:
                values[item.label] = _values(item.children, form, problems)
            elif item.nullable and any(k.startswith(item.name + ".") for k in form):
                values[item.label] = None  # an optional object the reviewer left empty
            continue
        text = form.get(item.name)
        if text is None:
            continue  # not in the form: the validator says whether it was required
        if text.strip() == "" and item.kind != "string":
            if item.nullable:
                values[item.label] = None
            elif item.required:
                values[item.label] = "" if item.kind != "json" else None
            continue  # an emptied optional field falls back to its default
        if text == "" and item.kind == "string" and item.nullable:
            values[item.label] = None
            continue
        values[item.label] = _convert(item, text, problems)
    return values


def _convert(item: ArgField, text: str, problems: list[tuple[str, str]]) -> Any:
    stripped = text.strip()
    if item.kind == "integer" and re.fullmatch(r"[+-]?\d+", stripped):
        return int(stripped)
    if item.kind == "number":
        try:
            number = float(stripped)
        except ValueError:
            return text
        return int(stripped) if re.fullmatch(r"[+-]?\d+", stripped) else number
    if item.kind == "boolean":
        return {"true": True, "false": False, "null": None}.get(stripped, text)
    if item.kind == "enum":
        try:
            return json.loads(stripped)
        except ValueError:
            return text
    if item.kind == "json":
        return _parse_json(item.dotted, text, problems)
    if item.kind == "scalar":
        return stripped
    return text


def _parse_json(location: str, text: str, problems: list[tuple[str, str]]) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        detail = getattr(exc, "msg", str(exc))
        where = f" (line {exc.lineno}, column {exc.colno})" if isinstance(exc, json.JSONDecodeError) else ""
        problems.append((location, f"Not valid JSON: {detail}{where}"))
        return text


def form_values(items: Iterable[tuple[str, Any]]) -> dict[str, str]:
    """The submitted `args.*` fields; for a checkbox behind a hidden "false", the last value wins."""
    values: dict[str, str] = {}
    for name, value in items:
        if name.startswith(FIELD_PREFIX) and isinstance(value, str):
            values[name] = value
    return values


# --- approve and remember ------------------------------------------------------------------

REMEMBER_PERIODS: dict[str, tuple[str, dt.timedelta]] = {
    "1h": ("1 hour", dt.timedelta(hours=1)),
    "8h": ("8 hours", dt.timedelta(hours=8)),
    "1d": ("1 day", dt.timedelta(days=1)),
    "7d": ("7 days", dt.timedelta(days=7)),
    "30d": ("30 days", dt.timedelta(days=30)),
}
"""The periods the form offers, by the value it submits; the store allows up to `MAX_REMEMBER`."""
Pinning = Literal["args", "condition"]


@dataclass
class RememberForm:
    """The approve-and-remember form: the call's top-level arguments to pin, or a condition, a scope, a period.

    Built with defaults for the card (every argument pinned, the condition prefilled from them),
    or from what the reviewer submitted, so a refused form comes back as they left it.
    """

    names: list[str]
    """The call's top-level argument names, one checkbox each."""
    pinned: list[str]
    scope: str = RememberScope.SESSION
    period: str = "1h"
    pinning: Pinning = "args"
    condition: str = ""
    error: str | None = None
    open: bool = False
    """Shown unfolded: the reviewer submitted it and it was refused."""

    periods = REMEMBER_PERIODS

    @classmethod
    def for_call(cls, args: Mapping[str, Any]) -> RememberForm:
        names = sorted(args)
        return cls(names=names, pinned=names, condition=pinned_condition(args, None))

    @classmethod
    def submitted(
        cls,
        args: Mapping[str, Any],
        *,
        scope: str,
        period: str,
        pinning: Pinning,
        pinned: Sequence[str],
        condition: str,
    ) -> RememberForm:
        names = sorted(args)
        chosen = [name for name in names if name in set(pinned)]
        return cls(names, chosen, scope, period, pinning, condition, open=True)

    def remember(self) -> Remember:
        """What the store is asked to remember; a `ValueError` names a choice the form does not offer."""
        try:
            scope = RememberScope(self.scope)
        except ValueError:
            raise ValueError("Choose this session or this agent.") from None
        if self.period not in REMEMBER_PERIODS:
            raise ValueError(f"Choose a period: {', '.join(label for label, _ in REMEMBER_PERIODS.values())}.")
        duration = REMEMBER_PERIODS[self.period][1]
        if self.pinning == "condition":
            if not self.condition.strip():
                raise ValueError("Write a condition, or pin arguments instead.")
            return Remember(scope, duration, condition=self.condition.strip())
        every = self.pinned == self.names  # all pinned: no argument may be added either
        return Remember(scope, duration, pinned=None if every else list(self.pinned))
