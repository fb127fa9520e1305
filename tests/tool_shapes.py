"""Ordinary tool functions, described by pydantic-ai and by us (issue 16).

`tests/fixtures/pydantic_ai_schemas.json` holds what pydantic-ai's `Tool(fn).tool_def`
gives for each; regenerate it with `.venv/bin/python -m tests.tool_shapes` after upgrading
pydantic-ai, and read the diff. `test_pydantic_ai_parity.py` compares ours with it.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable
from datetime import date
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field
from typing_extensions import TypedDict

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


# Issue 16: *args and **kwargs; a lone dataclass, TypedDict or model parameter; attribute
# docstrings in nested types; docstrings made only of a Returns or an Args section.


def tag_items(*labels: str) -> str:
    """Tag the selected items.

    Args:
        labels: Labels to add.
    """
    return ",".join(labels)


def set_counters(**counters: int) -> str:
    """Set named counters.

    Args:
        counters: New value of each counter, by name.
    """
    return ",".join(counters)


def label_order(order_id: int, *labels: str, **counts: int) -> str:
    """Label an order.

    Args:
        order_id: The order.
        *labels: Labels to add.
        **counts: How many of each item.
    """
    return str(order_id)


@dataclasses.dataclass
class Shipment:
    """A parcel to send."""

    to: str
    """Who receives it."""
    weight_kg: float = 1.0
    """Its weight, in kilograms."""


def ship(shipment: Shipment) -> str:
    return shipment.to


def ship_described(shipment: Shipment) -> str:
    """Send a parcel today."""
    return shipment.to


class Ticket(TypedDict):
    """A support ticket."""

    title: str
    """One line about the problem."""
    urgent: bool


def file_ticket(ticket: Ticket) -> str:
    return ticket["title"]


def file_ticket_described(ticket: Ticket) -> str:
    """Open a ticket for the support team."""
    return ticket["title"]


class Customer(BaseModel):
    """A customer to greet."""

    name: str
    """Their full name (pydantic-ai does not read a model's attribute docstrings)."""
    visits: int = Field(0, description="Visits so far.")


def greet(customer: Customer) -> str:
    return customer.name


class Dimensions(BaseModel):
    height_cm: int
    """Not in the schema: a model reads attribute docstrings only with its own `use_attribute_docstrings`."""


class Measured(BaseModel, use_attribute_docstrings=True):
    width_cm: int
    """In the schema: this model asks for attribute docstrings."""


@dataclasses.dataclass
class Label:
    text: str
    """What the label says."""
    color: Literal["red", "green"] = "red"
    """Its color."""


class Contact(TypedDict):
    email: str
    """Where to write."""


def pack(dimensions: Dimensions, measured: Measured, label: Label, contact: Contact, boxes: list[Label]) -> str:
    """Pack an order."""
    return label.text


@dataclasses.dataclass
class Order:
    """An order to ship."""

    shipment: Shipment
    labels: list[Label]
    """Stuck on the parcel."""


def ship_order(order: Order) -> str:
    return order.shipment.to


def current_time() -> str:
    """
    Returns:
        The time now, in UTC.
    """
    return ""


def forecast(city: str, days: int = 3) -> str:
    """
    Args:
        city: Which city.
        days: How many days ahead.
    """
    return city


SHAPES: list[Callable[..., Any]] = [
    refund,
    no_docstring,
    choices,
    nested_model,
    field_default,
    field_default_described_in_docstring,
    tag_items,
    set_counters,
    label_order,
    ship,
    ship_described,
    ship_order,
    file_ticket,
    file_ticket_described,
    greet,
    pack,
    current_time,
    forecast,
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
