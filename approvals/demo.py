"""The demo: an operations assistant for a small shop, with tools that show the range.

- `lookup_order` and `find_customer` are safe lookups that run at once;
- `refund` needs approval only above 100;
- `delete_customer` always needs approval, from two different people;
- `send_email` needs approval, and its body is what a reviewer typically edits.

It runs on a scripted model, so it works with no API key. With OPENAI_API_KEY (or an
OpenAI-compatible OPENAI_BASE_URL, such as a local Ollama or llama.cpp server) or
ANTHROPIC_API_KEY set, the same agent uses that real model instead.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from decimal import Decimal
from typing import Annotated, Any

from pydantic import Field

from .engines.native.agent import Agent
from .engines.native.messages import (
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolDeniedPart,
    ToolReturnPart,
    UserPromptPart,
)
from .engines.native.models import AgentInfo, FunctionModel, Model, ModelSettings, infer_model

__all__ = ("DEMO_PROMPTS", "demo_agent", "demo_model")

ORDERS: dict[str, dict[str, Any]] = {
    "A-1001": {"customer_id": 17, "total": "89.90", "status": "delivered"},
    "A-1002": {"customer_id": 17, "total": "249.00", "status": "damaged in transit"},
    "A-1003": {"customer_id": 42, "total": "1299.00", "status": "never arrived"},
}
CUSTOMERS: dict[int, dict[str, Any]] = {
    17: {"name": "Dana Whitfield", "email": "dana@example.com", "open_orders": 0},
    42: {"name": "Sam Okafor", "email": "sam@example.com", "open_orders": 1},
}

DEMO_PROMPTS = [
    "Order A-1001 arrived late; refund 15.00 as a goodwill gesture.",
    "Order A-1002 was damaged in transit. Refund it in full and tell the customer.",
    "Customer 42 asked us to delete their account and all their data.",
    "Order A-1003 never arrived. Refund 1299.00.",
    "Email customer 17 that their replacement ships tomorrow.",
]


def lookup_order(order_id: Annotated[str, Field(pattern=r"^A-\d{4}$")]) -> dict[str, Any]:
    """Look up an order: its customer, total and status.

    Args:
        order_id: The order number, like A-1001.
    """
    order = ORDERS.get(order_id)
    return {"order_id": order_id, **order} if order else {"order_id": order_id, "error": "no such order"}


def find_customer(customer_id: int) -> dict[str, Any]:
    """Find a customer's name, email and number of open orders.

    Args:
        customer_id: The customer's number.
    """
    customer = CUSTOMERS.get(customer_id)
    return {"customer_id": customer_id, **customer} if customer else {"customer_id": customer_id, "error": "unknown"}


def refund(
    order_id: Annotated[str, Field(pattern=r"^A-\d{4}$")],
    amount: Annotated[Decimal, Field(gt=0, le=10_000, decimal_places=2)],
    reason: Annotated[str, Field(min_length=3, max_length=500)],
) -> str:
    """Refund part or all of an order to the customer's original payment method.

    Args:
        order_id: The order to refund, like A-1001.
        amount: How much to refund, in euros.
        reason: Why, as the customer will read it on their statement.
    """
    return f"Refunded {amount} EUR on {order_id} ({reason})."


def delete_customer(customer_id: int, confirm_no_open_orders: bool = True) -> str:
    """Delete a customer and all their personal data. This cannot be undone.

    Args:
        customer_id: The customer to delete.
        confirm_no_open_orders: Refuse if the customer still has open orders.
    """
    customer = CUSTOMERS.get(customer_id, {})
    if confirm_no_open_orders and customer.get("open_orders"):
        return f"Not deleted: customer {customer_id} has {customer['open_orders']} open order(s)."
    return f"Customer {customer_id} and their data were deleted."


def send_email(
    to: Annotated[str, Field(pattern=r"^[^@\s]+@[^@\s]+\.[^@\s]+$")],
    subject: Annotated[str, Field(min_length=1, max_length=200)],
    body: Annotated[str, Field(min_length=1, max_length=5000)],
) -> str:
    """Send an email to a customer from the support address.

    Args:
        to: The recipient's email address.
        subject: The subject line.
        body: The message, in plain text.
    """
    return f"Email to {to} sent: {subject!r}."


def _scripted(messages: Sequence[ModelRequest | ModelResponse], info: AgentInfo) -> ModelResponse:
    """A deterministic stand-in for a model: reads the request, calls tools, then sums up."""
    prompt = next(
        (p.content for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, UserPromptPart)),
        "",
    )
    step = sum(1 for m in messages if isinstance(m, ModelResponse))
    plan = _plan(prompt)
    if step < len(plan):
        return ModelResponse(
            parts=[
                ToolCallPart(tool_name=name, args=args, tool_call_id=f"call_{step}_{i}")
                for i, (name, args) in enumerate(plan[step])
            ]
        )
    return ModelResponse(parts=[TextPart(content=_summary(messages))])


def _plan(prompt: str) -> list[list[tuple[str, dict[str, Any]]]]:
    order = re.search(r"A-\d{4}", prompt)
    customer = re.search(r"[Cc]ustomer (\d+)", prompt)
    amount = re.search(r"(\d+\.\d{2})", prompt)
    if "delete" in prompt.lower() and customer:
        cid = int(customer.group(1))
        return [[("find_customer", {"customer_id": cid})], [("delete_customer", {"customer_id": cid})]]
    if "refund" in prompt.lower() and order:
        oid = order.group(0)
        total = amount.group(1) if amount else ORDERS.get(oid, {}).get("total", "10.00")
        customer_id = ORDERS.get(oid, {}).get("customer_id", 17)
        email = CUSTOMERS.get(customer_id, {}).get("email", "customer@example.com")
        steps: list[list[tuple[str, dict[str, Any]]]] = [[("lookup_order", {"order_id": oid})]]
        refund_call = ("refund", {"order_id": oid, "amount": total, "reason": "Sorry about your order"})
        if "tell the customer" in prompt.lower():
            body = f"Hello,\n\nwe refunded {total} EUR for order {oid}. We are sorry for the trouble.\n\nThe shop team"
            steps.append([refund_call, ("send_email", {"to": email, "subject": f"Refund for {oid}", "body": body})])
        else:
            steps.append([refund_call])
        return steps
    if "email" in prompt.lower() and customer:
        cid = int(customer.group(1))
        email = CUSTOMERS.get(cid, {}).get("email", "customer@example.com")
        body = "Hello,\n\nyour replacement ships tomorrow.\n\nThe shop team"
        return [[("send_email", {"to": email, "subject": "Your replacement", "body": body})]]
    return []


def _summary(messages: Sequence[ModelRequest | ModelResponse]) -> str:
    last = messages[-1] if messages else None
    if not isinstance(last, ModelRequest):
        return "I could not find anything to do for this request."
    lines = []
    for part in last.parts:
        if isinstance(part, ToolReturnPart):
            content = part.content if isinstance(part.content, str) else json.dumps(part.content)
            lines.append(f"{part.tool_name}: {content}")
        elif isinstance(part, ToolDeniedPart):
            lines.append(f"{part.tool_name} was not done: a reviewer declined ({part.reason}). I will not retry it.")
    return "Here is what happened:\n" + "\n".join(f"- {line}" for line in lines) if lines else "Done."


def demo_model() -> Model:
    """A real model when credentials are in the environment, otherwise the scripted one."""
    if os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL"):
        return infer_model("openai:" + os.environ.get("APPROVALS_DEMO_OPENAI_MODEL", "gpt-4o-mini"))
    if os.environ.get("ANTHROPIC_API_KEY"):
        return infer_model("anthropic:" + os.environ.get("APPROVALS_DEMO_ANTHROPIC_MODEL", "claude-sonnet-4-5"))
    return FunctionModel(_scripted, model_name="scripted-demo")


def _refund_needs_approval(ctx: Any, args: Any) -> bool:
    return bool(args.amount > 100)


DEMO_MODEL_SETTINGS: ModelSettings = {"max_tokens": 512}
"""A real model answers in a few paragraphs at most; a small local one would otherwise ramble for minutes."""

demo_agent: Agent[None] = Agent(
    demo_model(),
    name="shop-assistant",
    model_settings=DEMO_MODEL_SETTINGS,
    instructions=(
        "You are the operations assistant of a small online shop. Look things up before acting. "
        "Refunds above 100 EUR, deleting customers and emails need a person's approval; if a person "
        "declines, do not try the same action again: explain and stop."
    ),
)
demo_agent.tool_plain(lookup_order)
demo_agent.tool_plain(find_customer)
demo_agent.tool_plain(requires_approval=_refund_needs_approval, approval_ttl=24 * 3600)(refund)
demo_agent.tool_plain(requires_approval=True, approvals_required=2)(delete_customer)
demo_agent.tool_plain(requires_approval=True, approval_ttl=24 * 3600)(send_email)
