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
  validation that takes longer than `MAX_SECONDS` (`bounded_run`) is stopped and its arguments
  refused as too costly to check. Callers on an event loop try it there first for at most
  `QUICK_SECONDS` (`quick_pass`) and move what takes longer to a worker thread, so the loop
  never gives a schema more than a few milliseconds. Every dialect's validator counts (a
  subschema's `$schema` switches dialect), and so does the check against the metaschema.
"""

from __future__ import annotations

import contextvars
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from types import ModuleType
from typing import Any, TypeVar

import jsonschema
import jsonschema._keywords
import jsonschema._legacy_keywords
import jsonschema._utils
import re2
from jsonschema.exceptions import ValidationError

T = TypeVar("T")

__all__ = (
    "MAX_SECONDS",
    "QUICK_SECONDS",
    "TooCostly",
    "bounded_run",
    "install",
    "quick_pass",
    "schema_problems",
)

MAX_SECONDS = 1.0
"""How long one validation may take in all: ordinary arguments take well under a millisecond."""
QUICK_SECONDS = 0.005
"""How long a first pass on the event loop may take (`quick_pass`) before the caller moves it to a thread."""
_CHECK_EVERY = 64
"""Steps between two looks at the clock (a step is a keyword applied or a pattern matched: microseconds)."""


class TooCostly(Exception):
    """A validation went past its time budget."""


@dataclass
class _Budget:
    """The CPU time this thread may spend (`time.thread_time`), not wall time: a machine busy with other
    work, or another thread holding the GIL, must not refuse a check that costs what it always costs."""

    deadline: float
    seconds: float
    quick: bool
    """A first pass: running out is for the caller to handle (`TooCostly` reaches it), not a refusal."""
    steps: int = 0


_BUDGET: contextvars.ContextVar[_Budget | None] = contextvars.ContextVar("jsonschema_budget", default=None)


@contextmanager
def quick_pass(seconds: float = QUICK_SECONDS) -> Iterator[None]:
    """Try the validations inside within `seconds` where the caller is (an event loop): `TooCostly` past it,
    and the caller runs them again in a worker thread, under the full `MAX_SECONDS` (`bounded_run`).

    A 200 µs thread hop costs more than most validations take, so most never leave the loop."""
    token = _BUDGET.set(_Budget(time.thread_time() + seconds, seconds, quick=True))
    try:
        yield
    finally:
        _BUDGET.reset(token)


def bounded_run(run: Callable[[], T], refuse: Callable[[str], Exception]) -> T:
    """`run()` within `MAX_SECONDS`; past it, the `refuse(reason)` exception. Inside a `quick_pass`, its
    budget applies instead and `TooCostly` is raised for the caller to try again off the loop."""
    if (outer := _BUDGET.get()) is not None and outer.quick:
        return run()
    token = _BUDGET.set(_Budget(time.thread_time() + MAX_SECONDS, MAX_SECONDS, quick=False))
    try:
        return run()
    except TooCostly as exc:
        raise refuse(str(exc)) from None
    finally:
        _BUDGET.reset(token)


def _spend() -> None:
    state = _BUDGET.get()
    if state is None:
        return
    state.steps += 1
    if state.steps % _CHECK_EVERY == 0 and time.thread_time() > state.deadline:
        raise TooCostly(f"checking against the tool's schema takes longer than {state.seconds:g} s")


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
    """Make jsonschema safe to run on anyone's schema, in this whole process; idempotent.

    Every pattern is matched by RE2, and every keyword of every dialect's validator (each
    `$schema` names one, and a subschema may switch) counts against the budget of the
    validation under way, with `uniqueItems` in linear time. Outside a budget a keyword costs
    one context-variable read more.
    """
    for module in MATCHING_MODULES:
        module.re = _linear_re  # type: ignore[attr-defined]
    dialects = {*getattr(jsonschema.validators, "_VALIDATORS", {}).values(), *_DRAFTS}
    for validator_cls in dialects:
        keywords = validator_cls.VALIDATORS
        for name, keyword in list(keywords.items()):
            if not getattr(keyword, "counted", False):
                keywords[name] = _counted(_unique_items if name == "uniqueItems" else keyword)


_DRAFTS = (
    jsonschema.Draft3Validator,
    jsonschema.Draft4Validator,
    jsonschema.Draft6Validator,
    jsonschema.Draft7Validator,
    jsonschema.Draft201909Validator,
    jsonschema.Draft202012Validator,
)


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

    counted.counted = True  # type: ignore[attr-defined]
    return counted


def schema_problems(schema: Any) -> list[str]:
    """What makes a schema unsafe to validate with: patterns RE2 cannot run."""
    return [
        f"json_schema's pattern {pattern!r} cannot be matched in linear time (lookaround and backreferences "
        "are not supported: patterns are matched with RE2)"
        for pattern in sorted({p for p in _patterns(schema) if _compiled(p) is None})
    ]


_DATA_KEYWORDS = frozenset({"const", "default", "enum", "examples"})
"""Keywords whose values are instances, not schemas: a "pattern" there is data."""


def _patterns(schema: Any) -> Iterator[str]:
    for key, value in _schema_items(schema):
        if key == "pattern" and isinstance(value, str):
            yield value
        elif key == "patternProperties" and isinstance(value, dict):
            yield from (name for name in value if isinstance(name, str))


def _schema_items(schema: Any) -> Iterator[tuple[str, Any]]:
    """Every (keyword, value) of a schema and its subschemas, without recursion; data keywords left out."""
    stack: list[Any] = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            for key, value in node.items():
                if key in _DATA_KEYWORDS:
                    continue
                yield key, value
                if isinstance(value, (dict, list)):
                    stack.append(value)
