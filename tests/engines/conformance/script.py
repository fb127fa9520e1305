"""What a conformance scenario scripts, in terms no engine owns: the model's turns and what it was told.

A scenario is a list of turns; each turn is the tool calls the model makes (one, several in
parallel). Once the turns are used up the model answers with text: the JSON of every `Told`
it received in the whole run, so the suite reads from the run's output what reached the model
on any engine, in any process.
"""

from __future__ import annotations

import json
import os
import signal
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

Turn = list[tuple[str, dict[str, Any]]]
"""One model turn: the tool calls it makes, as (tool name, arguments)."""

AGENT = "conformance-shop"
"""What the scripted agent is registered as, in the suite and in its worker processes."""
TOOLS_INSTRUCTIONS = "You help customers of the shop."


@dataclass(frozen=True)
class Told:
    """One thing the model received about a call: its result, a denial's reason, or a retry prompt."""

    kind: Literal["result", "denied", "retry"]
    tool: str
    content: str


def told_text(told: list[Told]) -> str:
    """The final answer a scripted model gives: everything it was told, as JSON."""
    return json.dumps([asdict(t) for t in told])


def told_from_output(output: str | None) -> list[Told]:
    """What the model said it was told, read back from a completed run's output."""
    assert output is not None, "the run has no output"
    return [Told(**item) for item in json.loads(output)]


def as_text(content: Any) -> str:
    """A tool return's content as the model reads it, whatever JSON it is."""
    return content if isinstance(content, str) else json.dumps(content, sort_keys=True)


def logged(log: Path) -> list[str]:
    """What the tools did, in order, in any process."""
    return log.read_text().splitlines() if log.exists() else []


def _log(deps: dict[str, Any] | None, line: str) -> None:
    path = (deps or {}).get("log")
    if path:
        with Path(path).open("a") as log:
            log.write(line + "\n")


def lookup_order_body(deps: dict[str, Any] | None, order_id: str) -> str:
    """The safe tool: it never needs a person."""
    _log(deps, f"lookup {order_id}")
    return f"order {order_id}: 2 items"


def refund_body(deps: dict[str, Any] | None, order_id: str, amount: int) -> str:
    """The tool that needs a person; `crash_in_refund` in the deps kills its worker right after the refund."""
    _log(deps, f"refund {order_id} {amount}")
    if (deps or {}).get("crash_in_refund"):
        os.kill(os.getpid(), signal.SIGKILL)  # between executing and recording the result
    return f"refunded {amount} on {order_id}"
