"""A coffee-machine shop's support agent for the browser tests and the screenshots in docs/.

Its tools have described, constrained arguments and a nested model, so the call page shows
what reviewers see in a real deployment: labelled fields, types, limits, a `$ref`'d address.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Any

from pydantic import BaseModel, Field

from approvals import Agent, RunContext, Tool
from approvals.engines.native.models import TestModel

ORDERS = {"A-1042": {"total": "149.90", "items": ["Espresso machine Vero 2"], "customer_id": 311}}


class Address(BaseModel):
    """Where a parcel goes."""

    name: str = Field(description="Recipient's full name.")
    street: str = Field(description="Street and house number.")
    postcode: Annotated[str, Field(pattern=r"^\d{5}$", description="Five digits.")]
    city: str


def lookup_order(order_id: str) -> dict[str, Any]:
    """Look up an order: its total, items and customer.

    Args:
        order_id: The order number, like A-1042.
    """
    return {"order_id": order_id, **ORDERS.get(order_id, {})}


def refund(
    ctx: RunContext[Any],
    order_id: Annotated[str, Field(pattern=r"^A-\d+$")],
    amount: Annotated[Decimal, Field(gt=0, le=500, decimal_places=2)],
    reason: str,
    notify_customer: bool = True,
) -> str:
    """Refund part or all of an order to the customer's card.

    Args:
        order_id: The order to refund.
        amount: How much to refund, in euros.
        reason: Why, in the customer's words; printed on their statement.
        notify_customer: Email the customer a receipt.
    """
    return f"refunded {amount} EUR on {order_id}"


def ship_replacement(
    ctx: RunContext[Any], order_id: str, address: Address, items: list[str], express: bool = False
) -> str:
    """Send replacement items by parcel, free of charge.

    Args:
        order_id: The order being replaced.
        address: Where the parcel goes.
        items: The items to send again.
        express: Next-day delivery (costs the shop 25 EUR).
    """
    return f"parcel with {len(items)} item(s) on its way to {address.city}"


def close_account(ctx: RunContext[Any], customer_id: int, reason: str) -> str:
    """Close a customer's account and delete their saved payment methods. Cannot be undone.

    Args:
        customer_id: The customer whose account to close.
        reason: Why the account is closed; kept in the customer record.
    """
    return f"account {customer_id} closed"


PROMPT = (
    "Customer Dana Weber writes: my espresso machine from order A-1042 arrived with a cracked tank. "
    "I want my money back, a working machine, and please close my account."
)
SCRIPT: list[Any] = [
    ("lookup_order", {"order_id": "A-1042"}),
    [
        ("refund", {"order_id": "A-1042", "amount": "149.90", "reason": "Arrived with a cracked water tank"}),
        (
            "ship_replacement",
            {
                "order_id": "A-1042",
                "address": {"name": "Dana Weber", "street": "Lindenstraße 12", "postcode": "10969", "city": "Berlin"},
                "items": ["Espresso machine Vero 2"],
                "express": True,
            },
        ),
        ("close_account", {"customer_id": 311, "reason": "Customer asked to close the account"}),
    ],
]

support_agent: Agent[Any] = Agent(
    TestModel(SCRIPT),
    name="support",
    instructions="You handle support requests for a shop that sells coffee machines.",
    tools=[
        Tool(lookup_order),
        Tool(refund, requires_approval=True, approval_ttl=600),
        Tool(ship_replacement, requires_approval=True, approval_ttl=4 * 3600),
        Tool(close_account, requires_approval=True),
    ],
)
