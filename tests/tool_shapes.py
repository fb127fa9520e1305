"""Ordinary tool functions, described by pydantic-ai and by us (issue 16).

`tests/fixtures/pydantic_ai_schemas.json` holds what pydantic-ai's `Tool(fn).tool_def`
gives for each; regenerate it with `.venv/bin/python -m tests.tool_shapes` after upgrading
pydantic-ai, and read the diff. `test_pydantic_ai_parity.py` compares ours with it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from datetime import date
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

FIXTURE = Path(__file__).parent / "fixtures" / "pydantic_ai_schemas.json"


def refund(order_id: str, amount_cents: int, reason: str | None = None, notify: bool = True) -> str:
    """Refund part or all of an order.

    Args:
        order_id: The order to refund.
        amount_cents: How much, in cents.
        reason: Shown to the customer.
        notify: Whether to email the customer.
    """
    return order_id


def no_docstring(city: str, days: int = 3) -> str:
    return city


class Priority(StrEnum):
    LOW = "low"
    HIGH = "high"


def choices(priority: Priority, channel: Literal["email", "sms"], tags: list[str], on: date | None = None) -> str:
    """File a ticket.

    Args:
        priority: How urgent.
        channel: Where to answer.
        tags: Labels to add.
        on: When to follow up.
    """
    return priority.value


class Address(BaseModel):
    street: str = Field(description="Street and number.")
    city: str


def nested_model(name: str, address: Address) -> str:
    """Ship to an address.

    Args:
        name: Who receives it.
        address: Where it goes.
    """
    return name


def field_default(count: int = Field(1, ge=1, description="How many.")) -> str:
    """Count things."""
    return str(count)


def field_default_described_in_docstring(count: int = Field(5, le=10)) -> str:
    """Count things.

    Args:
        count: At most ten.
    """
    return str(count)


SHAPES: list[Callable[..., Any]] = [
    refund,
    no_docstring,
    choices,
    nested_model,
    field_default,
    field_default_described_in_docstring,
]


def pydantic_ai_definitions() -> dict[str, Any]:
    """What pydantic-ai says of each shape: its description and parameters' JSON schema."""
    from pydantic_ai import Tool

    definitions = {}
    for function in SHAPES:
        definition = Tool(function).tool_def
        definitions[function.__name__] = {
            "description": definition.description,
            "parameters": definition.parameters_json_schema,
        }
    return definitions


if __name__ == "__main__":
    import pydantic_ai

    document = {"pydantic_ai": pydantic_ai.__version__, "tools": pydantic_ai_definitions()}
    FIXTURE.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
    sys.stdout.write(f"wrote {FIXTURE} ({len(SHAPES)} tools, pydantic-ai {pydantic_ai.__version__})\n")
