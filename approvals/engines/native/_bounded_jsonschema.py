"""JSON Schema validation that no schema and no arguments can make run for long.

Schemas come from callers of the gate, from the MCP servers the gateway proxies and from
tools' authors, and the arguments from models; both are checked on the server's event loop
or next to it. `jsonschema` as it is lets either stall a process:

* `pattern`, `patternProperties` and the property names `additionalProperties` and
  `unevaluatedProperties` weigh are matched with Python's backtracking `re`: `^(a+)+$` takes
  seconds on 22 characters and years on 40. Here every such match is made by RE2, whose time
  is linear in the text (`install`). RE2 has no lookaround and no backreferences (ECMA-262,
  the dialect JSON Schema names, has both): `schema_problems` refuses a schema that uses
  them, and a match against one nobody checked fails, so its arguments are refused rather
  than waved through. Like ECMA-262 without its `u` flag, `\\d` and `\\w` are ASCII.
* `uniqueItems` compares every pair of items that do not sort (objects): 1,000 small objects
  took 5.7 s. Here items are reduced to hashable keys and counted once (`_unique_items`).
* Nothing bounds the work itself: `anyOf` over recursive `$ref`s is exponential in the depth
  of the arguments. Every keyword applied and every pattern matched counts as a step, and a
  validation that takes longer than `MAX_SECONDS` (`budget`) is stopped and its arguments
  refused as too costly to check. Callers on an event loop validate in a worker thread, so
  even that second is not the loop's. A subschema cannot escape the budget by naming another dialect: `$schema` is
  allowed at the root only.
"""

from __future__ import annotations

import contextvars
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache, lru_cache
from types import ModuleType
from typing import Any

import jsonschema
import jsonschema._keywords
import jsonschema._legacy_keywords
import jsonschema._utils
import re2
from jsonschema.exceptions import ValidationError

__all__ = ("MAX_SECONDS", "TooCostly", "bounded", "budget", "install", "schema_problems")

MAX_SECONDS = 1.0
"""How long one validation may take: ordinary arguments take well under a millisecond; callers run it off the loop."""
_CHECK_EVERY = 64
"""Steps between two looks at the clock (a step is a keyword applied or a pattern matched: microseconds)."""


class TooCostly(Exception):
    """A validation went past its time budget."""


_DEADLINE: contextvars.ContextVar[list[float] | None] = contextvars.ContextVar("jsonschema_deadline", default=None)


@contextmanager
def budget(seconds: float = MAX_SECONDS) -> Iterator[None]:
    """Bound the validations inside to `seconds` in all: `TooCostly` once they take longer."""
    token = _DEADLINE.set([time.monotonic() + seconds, 0, seconds])
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def _spend() -> None:
    state = _DEADLINE.get()
    if state is None:
        return
    state[1] += 1
    if state[1] % _CHECK_EVERY == 0 and time.monotonic() > state[0]:
        raise TooCostly(f"checking these arguments against the tool's schema takes longer than {state[2]:g} s")


_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a refused pattern is reported to its author, not printed to our stderr


@lru_cache(maxsize=512)
def _compiled(pattern: str) -> Any | None:
    """The pattern compiled by RE2, or None when RE2 cannot run it (lookaround, backreferences, bad syntax)."""
    try:
        return re2.compile(pattern, options=_OPTIONS)
    except re2.error:
        return None


def search(pattern: str, string: str, flags: int = 0) -> Any | None:
    """`re.search` in linear time; a pattern RE2 cannot compile matches nothing (fail closed)."""
    if flags:
        raise ValueError("patterns are matched by RE2, without flags")
    _spend()
    compiled = _compiled(pattern)
    return None if compiled is None else compiled.search(string)


class _LinearRe(ModuleType):
    """`re` as jsonschema's keywords see it: `search` by RE2, everything else as it was."""

    def __getattr__(self, name: str) -> Any:
        return getattr(re, name)


_linear_re = _LinearRe("re")
_linear_re.search = search  # type: ignore[attr-defined]
MATCHING_MODULES = (jsonschema._keywords, jsonschema._legacy_keywords, jsonschema._utils)
"""The modules of jsonschema that match patterns against instances with `re.search`."""


def install() -> None:
    """Make jsonschema match every pattern with RE2, in this whole process; idempotent."""
    for module in MATCHING_MODULES:
        module.re = _linear_re  # type: ignore[attr-defined]


def _key(value: Any) -> Any:
    """A hashable key equal for JSON-equal values: 1 and 1.0 alike, true and 1 not, objects whatever their order."""
    if isinstance(value, bool) or value is None:
        return ("literal", value)
    if isinstance(value, (int, float)):
        return ("number", value)
    if isinstance(value, str):
        return ("string", value)
    if isinstance(value, (list, tuple)):
        return ("array", tuple(_key(item) for item in value))
    if isinstance(value, dict):
        return ("object", frozenset((name, _key(item)) for name, item in value.items()))
    return ("other", repr(value))


def _unique_items(validator: Any, unique: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    """`uniqueItems` in linear time (jsonschema's compares every pair of objects)."""
    if unique and validator.is_type(instance, "array"):
        seen: set[Any] = set()
        for item in instance:
            _spend()
            key = _key(item)
            if key in seen:
                yield ValidationError(f"{_short(item)} appears more than once, but the items must be unique")
                return
            seen.add(key)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


def _counted(keyword: Callable[..., Any]) -> Callable[..., Any]:
    def counted(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        _spend()
        return keyword(validator, value, instance, schema)

    return counted


@cache
def bounded(validator_cls: type[Any]) -> type[Any]:
    """`validator_cls` with every keyword counted against the budget and `uniqueItems` in linear time."""
    keywords = {name: _counted(keyword) for name, keyword in validator_cls.VALIDATORS.items()}
    if "uniqueItems" in keywords:
        keywords["uniqueItems"] = _counted(_unique_items)
    extended: type[Any] = jsonschema.validators.extend(validator_cls, keywords)  # type: ignore[no-untyped-call]
    return extended


def schema_problems(schema: Any) -> list[str]:
    """What makes a schema unsafe to validate with: patterns RE2 cannot run, `$schema` below the root."""
    problems = [
        f"json_schema's pattern {pattern!r} cannot be matched in linear time (lookaround and backreferences "
        "are not supported: patterns are matched with RE2)"
        for pattern in sorted({p for p in _patterns(schema) if _compiled(p) is None})
    ]
    if _nested_dialects(schema):
        problems.append("json_schema may name its dialect ($schema) only at its root")
    return problems


_DATA_KEYWORDS = frozenset({"const", "default", "enum", "examples"})
"""Keywords whose values are instances, not schemas: a "pattern" or "$schema" there is data."""


def _patterns(schema: Any) -> Iterator[str]:
    for key, value, _ in _schema_items(schema):
        if key == "pattern" and isinstance(value, str):
            yield value
        elif key == "patternProperties" and isinstance(value, dict):
            yield from (name for name in value if isinstance(name, str))


def _nested_dialects(schema: Any) -> bool:
    return any(key == "$schema" and not at_root for key, _, at_root in _schema_items(schema))


def _schema_items(schema: Any) -> Iterator[tuple[str, Any, bool]]:
    """Every (keyword, value, at the root) of a schema and its subschemas, without recursion; data left out."""
    stack: list[tuple[Any, bool]] = [(schema, True)]
    while stack:
        node, at_root = stack.pop()
        if isinstance(node, list):
            stack.extend((item, False) for item in node)
        elif isinstance(node, dict):
            for key, value in node.items():
                if key in _DATA_KEYWORDS:
                    continue
                yield key, value, at_root
                if isinstance(value, (dict, list)):
                    stack.append((value, False))
