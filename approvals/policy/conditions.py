"""A rule's condition: a CEL expression over the call, compiled once and evaluated per call.

CEL (the Common Expression Language) is small, side-effect free and always terminates,
so an admin's condition can run inside the call lifecycle. We use the Rust implementation's
Python bindings (`common-expression-language`): evaluation takes microseconds, and a syntax
error names its line and column.

A condition sees these variables (`VARIABLES`): the call's validated `args`, its `tool`,
`agent` (the agent or the gate's source), `engine`, `session`, `context` (what a gate's
caller said about the call: working directory, requester, ...), `requester` (who asked)
and `now` (a UTC timestamp). A condition must come out `true` or `false`; any other value,
a missing field or a type error is a failed evaluation, which the rule set treats as `ask`.

A condition's cost is estimated from its text when it is compiled (`cost`): one that may take
more than `cost.MAX_COST` steps is refused. One estimated cheap whatever the call holds is
evaluated where it is asked (microseconds); any other runs in a separate process with a time
budget (`sandbox`), past which it counts as failed.
"""

from __future__ import annotations

import datetime as dt
import importlib.machinery
import importlib.util
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache, cached_property, lru_cache
from pathlib import Path
from types import ModuleType
from typing import Any

from . import sandbox
from .cost import Cost, estimate

__all__ = ("VARIABLES", "Condition", "ConditionFailed", "InvalidCondition", "OverBudget", "compile_condition")

VARIABLES: Mapping[str, str] = {
    "args": "the call's validated arguments (a map)",
    "tool": "the tool's name",
    "agent": "the agent, or the gate's source (claude-code, an app's name)",
    "engine": "the engine that asks (native, pydantic_ai, gate, claude_code, ...)",
    "session": "the session (a gate's session id, else the run's id)",
    "context": "what the caller said about the call (working directory, requester, ...); a map, maybe empty",
    "requester": "who asked: the user or token whose credentials asked for the call (never the caller's word)",
    "now": "the time of the request (a UTC timestamp)",
}
"""What a condition may refer to, with what a form shows about each."""
MAX_CONDITION = 4000
_POSITION = re.compile(r"<input>:(\d+):(\d+):\s*(.*)")


@cache
def _cel() -> ModuleType:
    """The CEL engine: the Rust extension of `common-expression-language`, loaded by itself.

    The package's `__init__` also imports its command-line tool (typer, rich, prompt-toolkit:
    0.65 s, and the web stack the core must not pull in), which we never use. The extension
    module is loaded on its own from the package's folder and registered under its name, so a
    later `import cel` elsewhere reuses it. Should its layout ever change, the package is imported.
    """
    loaded = sys.modules.get("cel.cel")
    if loaded is not None:
        return loaded
    package = importlib.util.find_spec("cel")
    folders = package.submodule_search_locations if package is not None else None
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    found = [p for p in Path(next(iter(folders or ["."]))).glob("cel.*") if p.name.endswith(suffixes)]
    if len(found) == 1:
        spec = importlib.util.spec_from_file_location("cel.cel", found[0])
        if spec is not None and spec.loader is not None:
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            sys.modules["cel.cel"] = module
            return module
    import cel  # pragma: no cover - only if the package's layout changed

    return cel


class InvalidCondition(ValueError):
    """A condition that does not compile: the message, and where (1-based line and column) when known."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None) -> None:
        self.message, self.line, self.column = message, line, column
        where = f" at line {line}, column {column}" if line is not None else ""
        super().__init__(f"{message}{where}")


class ConditionFailed(Exception):
    """A condition that compiled but could not be evaluated for one call (a missing field, a type error)."""


class OverBudget(ConditionFailed):
    """A condition that outlasted its time budget (`sandbox.condition_budget`) for one call."""


@dataclass(frozen=True, eq=False)
class Condition:
    """A compiled condition; `text` is what its author wrote."""

    text: str
    _program: Any
    cost: Cost | None = None
    """Its estimated cost; None when the estimate's parser could not follow it (it then runs with a budget)."""

    @property
    def inline(self) -> bool:
        """Provably cheap: evaluated where it is asked, not in the worker process."""
        return self.cost is not None and self.cost.inline

    @cached_property
    def constant(self) -> bool | None:
        """The condition's value when it reads no variable (`true`, `1 > 2`), else None.

        Worked out once per condition, and only for a cheap one: a costly constant is not judged.
        """
        if not self.inline or _variables(self._program) & set(VARIABLES):
            return None
        try:
            value = self._program.execute({})
        except Exception:  # a constant that fails is not a constant
            return None
        return value if isinstance(value, bool) else None

    def holds(self, activation: Mapping[str, Any], budget: float | None = None) -> bool:
        """Whether the condition is true for this call; `ConditionFailed` when it cannot say (`OverBudget`
        when it took longer than `budget` seconds, `sandbox.condition_budget()` unless given).

        `activation`: the variables (`activation()`), or the same made `prepared` once for several conditions
        (those are for inline conditions; others are sent to the worker process as plain values).
        """
        if not self.inline:
            return self._holds_elsewhere(activation, budget)
        try:
            value = self._program.execute(activation)
        except Exception as exc:  # the bindings raise KeyError, TypeError, RuntimeError, ...
            raise ConditionFailed(_evaluation_error(exc)) from None
        if not isinstance(value, bool):
            raise ConditionFailed(f"the condition gave {type(value).__name__} {value!r}, not true or false")
        return value

    def _holds_elsewhere(self, activation: Mapping[str, Any], budget: float | None) -> bool:
        variables = activation if isinstance(activation, dict) else _plain(activation)
        try:
            answer = sandbox.evaluator().evaluate(self.text, variables, budget)
        except sandbox.OverBudget as exc:
            raise OverBudget(f"{exc}: it counts as failed") from None
        except sandbox.EvaluatorFailed as exc:
            raise ConditionFailed(str(exc)) from None
        if "value" in answer:
            return bool(answer["value"])
        if "other" in answer:
            kind, shown = answer["other"]
            raise ConditionFailed(f"the condition gave {kind} {shown}, not true or false")
        kind, text, key = answer["error"]
        if kind == "KeyError" and key is not None:
            raise ConditionFailed(f"no field {key!r} (test it first with has(...))")
        text = str(text).split(". ")[0].strip()
        raise ConditionFailed(f"{kind}: {text}" if text else str(kind))


def _plain(activation: Mapping[str, Any]) -> dict[str, Any]:
    """The variables of a prepared context, as plain values for the worker process."""
    found = getattr(activation, "variables", None)
    return dict(found) if isinstance(found, dict) else dict(activation)


def compile_condition(text: str) -> Condition:
    """Compile a condition; `InvalidCondition` with the error's position when it is not valid CEL.

    A condition that names a variable a call never has (`arg.amount` for `args.amount`) is
    refused too: it could only ever fail; so is one whose estimated cost is over `cost.MAX_COST`.
    Compiled once per text and process (every listing of the rules reads each condition).
    """
    compiled = _compiled(text)
    if isinstance(compiled, Condition):
        return compiled
    message, line, column = compiled
    raise InvalidCondition(message, line, column)


@lru_cache(maxsize=2048)
def _compiled(text: str) -> Condition | tuple[str, int | None, int | None]:
    try:
        return _compile(text)
    except InvalidCondition as exc:
        return (exc.message, exc.line, exc.column)


def _compile(text: str) -> Condition:
    if not text.strip():
        raise InvalidCondition("the condition is empty")
    if len(text) > MAX_CONDITION:
        raise InvalidCondition(f"the condition is longer than {MAX_CONDITION} characters")
    try:
        program = _cel().compile(text)
    except Exception as exc:  # the bindings raise ValueError with the parser's report
        raise _compile_error(str(exc)) from None
    unknown = sorted(_variables(program) - set(VARIABLES) - _bound_by_macros(text))
    if unknown:
        known = ", ".join(VARIABLES)
        raise InvalidCondition(f"unknown variable {unknown[0]!r}; a condition may use {known}")
    cost = estimate(text)
    refusal = cost.refusal() if cost is not None else None
    if refusal is not None:
        raise InvalidCondition(refusal)
    return Condition(text, program, cost)


def _variables(program: Any) -> set[str]:
    names = program.variables
    return set(names() if callable(names) else names)


_MACRO_VARIABLE = re.compile(r"\.\s*(?:all|exists|exists_one|map|filter)\s*\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*,")


def _bound_by_macros(text: str) -> set[str]:
    """The names a macro binds (`args.items.exists(item, ...)` binds `item`): variables, but not the call's."""
    return set(_MACRO_VARIABLE.findall(text))


def _compile_error(report: str) -> InvalidCondition:
    """The parser's report as a short message with its position (its caret drawing is left out)."""
    found = _POSITION.search(report)
    if found is None:
        return InvalidCondition(report.splitlines()[0] if report else "the condition is not valid CEL")
    line, column, message = int(found.group(1)), int(found.group(2)), found.group(3).strip()
    return InvalidCondition(message or "syntax error", line, column)


def _evaluation_error(exc: Exception) -> str:
    if isinstance(exc, KeyError):
        return f"no field {exc.args[0]!r} (test it first with has(...))"
    text = str(exc).split(". ")[0].strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def prepared(variables: Mapping[str, Any]) -> Mapping[str, Any]:
    """The variables converted for CEL once, for all the conditions one call meets.

    Evaluating with a plain mapping converts every variable for each condition (tens of
    microseconds); a prepared context is converted once. Values CEL cannot take stay a
    mapping, so each condition that reads them fails on its own, saying why.
    """
    try:
        context: Mapping[str, Any] = _cel().Context(dict(variables))
        return context
    except Exception:  # the bindings raise TypeError, ValueError, ... for a value they cannot convert
        return variables


def activation(
    *,
    args: Mapping[str, Any],
    tool: str,
    agent: str,
    engine: str,
    session: str,
    context: Mapping[str, Any] | None,
    requester: str | None,
    now: dt.datetime,
) -> dict[str, Any]:
    """The variables a condition sees for one call (`VARIABLES`)."""
    return {
        "args": args,
        "tool": tool,
        "agent": agent,
        "engine": engine,
        "session": session,
        "context": dict(context or {}),
        "requester": requester or "",
        "now": now,
    }
