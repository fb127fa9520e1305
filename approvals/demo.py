"""A small shop's tools, run through the tool layer: what runs at once and what waits for a person.

`make run` starts this until the web app exists. It needs no API key: the "model" is a
fixed list of tool calls, some valid, some not.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Annotated, Any

import anyio
from pydantic import Field

from . import RunContext, Tool
from ._tool_manager import CallDeferred, CallRetry, CallSucceeded, ToolManager
from .formats import to_openai_tool

ORDERS = {"A-100": Decimal("30.00"), "A-200": Decimal("450.00")}


def lookup_order(order_id: str) -> dict[str, str]:
    """Look up an order's total.

    Args:
        order_id: The order, like A-100.
    """
    return {"order_id": order_id, "total": str(ORDERS.get(order_id, "unknown"))}


def refund(order_id: str, amount: Annotated[Decimal, Field(gt=0, decimal_places=2)], reason: str) -> str:
    """Refund part of an order; above 100 a person must approve.

    Args:
        order_id: The order to refund.
        amount: How much to refund.
        reason: Why, in the customer's words.
    """
    return f"refunded {amount} on {order_id}"


def delete_customer(customer_id: int) -> str:
    """Delete a customer and all their data.

    Args:
        customer_id: The customer to delete.
    """
    return f"deleted {customer_id}"


TOOLS = [
    Tool(lookup_order),
    Tool(refund, requires_approval=lambda ctx, args: args.amount > 100),
    Tool(delete_customer, requires_approval=True),
]

SCRIPTED_CALLS: list[tuple[str, Any]] = [
    ("lookup_order", {"order_id": "A-200"}),
    ("refund", {"order_id": "A-100", "amount": "20.00", "reason": "late delivery"}),
    ("refund", '{"order_id": "A-200", "amount": "450.00", "reason": "never arrived"}'),
    ("refund", {"order_id": "A-200", "amount": -5}),
    ("delete_customer", {"customer_id": "42"}),
]


class _Call:
    def __init__(self, index: int, tool_name: str, args: Any) -> None:
        self.tool_name, self.args, self.tool_call_id = tool_name, args, f"call-{index}"


async def main() -> None:
    print("Tools as OpenAI sees them:")
    for item in TOOLS:
        print(json.dumps(to_openai_tool(item.tool_def), indent=2))
    manager: ToolManager[None] = ToolManager({t.name: t for t in TOOLS}, default_retries=3)
    calls = [_Call(i, name, args) for i, (name, args) in enumerate(SCRIPTED_CALLS, 1)]
    print("\nOne step of scripted tool calls:")
    for call, outcome in zip(
        calls, await manager.handle_calls(RunContext(deps=None, run_id="demo"), calls), strict=True
    ):
        print(f"\n{call.tool_call_id} {call.tool_name}({call.args})")
        if isinstance(outcome, CallSucceeded):
            print(f"  ran: {outcome.result.return_value}")
        elif isinstance(outcome, CallRetry):
            print("  sent back to the model:\n    " + outcome.message.replace("\n", "\n    "))
        else:
            assert isinstance(outcome, CallDeferred)
            print(f"  waits for a person, validated args {outcome.validated.dumped_args}")
            print(f"  digest {outcome.validated.digest[:16]}…")


if __name__ == "__main__":
    anyio.run(main)
