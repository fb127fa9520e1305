"""pydantic-ai agents for the tests: real `pydantic_ai.Agent`s with pydantic-ai's `FunctionModel`.

The scripted model calls tools on the first turn and, once every call has an outcome, answers
with what each outcome said, so a test reads from the output what the model was told.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field
from pydantic_ai import Agent, ApprovalRequired, CallDeferred, RunContext
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel


def _log(ctx: RunContext[dict[str, Any]], line: str) -> None:
    path = (ctx.deps or {}).get("log")
    if path:
        with Path(path).open("a") as log:
            log.write(line + "\n")


def outcomes_text(messages: list[ModelMessage]) -> str:
    """What the last request told the model about each call: `name=outcome:content`."""
    last = messages[-1]
    if not isinstance(last, ModelRequest):
        return ""
    said = [
        f"{p.tool_name}={p.outcome}:{p.content if isinstance(p.content, str) else json.dumps(p.content)}"
        for p in last.parts
        if isinstance(p, ToolReturnPart)
    ]
    return "; ".join(said)


def scripted(*calls: tuple[str, dict[str, Any]]) -> FunctionModel:
    """A model that makes `calls` on its first turn, then reports their outcomes."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(
                parts=[ToolCallPart(name, args, tool_call_id=f"call-{i}") for i, (name, args) in enumerate(calls)]
            )
        return ModelResponse(parts=[TextPart(outcomes_text(messages) or "You are welcome.")])

    return FunctionModel(respond, model_name="scripted")


class Refund(BaseModel):
    order_id: str
    amount_cents: int = Field(gt=0, le=100_000, description="How much, in cents.")


shop = Agent(
    scripted(("lookup_order", {"order_id": "A-1"}), ("refund", {"order_id": "A-1", "amount_cents": 450})),
    name="pai-shop",
    deps_type=dict,
    instructions="You help customers of the shop.",
)


@shop.tool
def lookup_order(ctx: RunContext[dict[str, Any]], order_id: str) -> str:
    """Look an order up."""
    _log(ctx, f"lookup {order_id}")
    return f"order {order_id}: 2 items, 45.00 EUR"


@shop.tool(requires_approval=True)
def refund(ctx: RunContext[dict[str, Any]], order_id: str, amount_cents: int = Field(gt=0, le=100_000)) -> str:
    """Refund part or all of an order.

    Args:
        order_id: The order to refund.
        amount_cents: How much, in cents.
    """
    _log(ctx, f"refund {order_id} {amount_cents}")
    if (ctx.deps or {}).get("crash_in_refund"):
        os._exit(17)  # the worker dies after the refund happened, before anything is stored
    return f"refunded {amount_cents} on {order_id}"


big_refunds = Agent(
    scripted(("refund_big", {"order_id": "B-9", "amount_cents": 90_000}), ("ask_customer", {"question": "Why?"})),
    name="pai-big",
    deps_type=dict,
)


@big_refunds.tool(metadata={"approvals": {"approvals_required": 2, "idempotent": True}})
def refund_big(ctx: RunContext[dict[str, Any]], order_id: str, amount_cents: int) -> str:
    """Refund, asking two people when it is over 500.00."""
    if amount_cents > 50_000 and not ctx.tool_call_approved:
        raise ApprovalRequired(metadata={"reason": "over 500.00"})
    _log(ctx, f"refund_big {order_id} {amount_cents}")
    return f"refunded {amount_cents} on {order_id}"


@big_refunds.tool_plain
def ask_customer(question: str) -> str:
    """Ask the customer something; a person relays the answer."""
    raise CallDeferred(metadata={"reason": "a person asks the customer"})


helpdesk = Agent(
    scripted(
        ("refund", {"order_id": "A-1042", "amount_cents": 14990}),
        ("send_voucher", {"email": "ann@example.com", "value_eur": 10}),
        ("close_account", {"customer_id": 311}),
    ),
    name="pai-helpdesk",
    deps_type=dict,
    instructions="You are the helpdesk of a coffee-machine shop.",
)
helpdesk.tool(requires_approval=True)(refund)


@helpdesk.tool(requires_approval=True)
def send_voucher(ctx: RunContext[dict[str, Any]], email: str, value_eur: int = Field(le=50)) -> str:
    """Email the customer a voucher.

    Args:
        email: Where to send it.
        value_eur: Its value, in euros.
    """
    _log(ctx, f"voucher {email} {value_eur}")
    return f"voucher of {value_eur} EUR sent to {email}"


@helpdesk.tool(requires_approval=True)
def close_account(ctx: RunContext[dict[str, Any]], customer_id: int) -> str:
    """Close a customer's account for good."""
    _log(ctx, f"close {customer_id}")
    return f"closed {customer_id}"


reminders = Agent(scripted(("send_reminder", {"email": "ann@example.com"})), name="pai-reminders", deps_type=dict)


@reminders.tool(requires_approval=True, metadata={"approvals": {"approval_ttl": 0.2}})
def send_reminder(ctx: RunContext[dict[str, Any]], email: str) -> str:
    """Email a payment reminder; unanswered within its time, it is not sent."""
    _log(ctx, f"reminder {email}")
    return f"reminded {email}"
