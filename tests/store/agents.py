"""Agents the store tests resume, importable by path from a worker in another process."""

from __future__ import annotations

import os
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio

from approvals import Agent, RunContext, Tool
from approvals.engines.native.models import TestModel

STEP: list[tuple[str, dict[str, Any] | str]] = [
    ("lookup_order", {"order_id": "A-1"}),
    ("refund", {"order_id": "A-1", "amount": "450"}),
    ("delete_customer", {"customer_id": 7}),
]

shop_agent: Agent[dict[str, Any]] = Agent(TestModel([STEP]), name="shop", instructions="You run a shop.")


def _log(ctx: RunContext[dict[str, Any]], line: str) -> None:
    """Append to the file named in the deps, so tests in any process can see what ran."""
    with Path(ctx.deps["log"]).open("a") as log:
        log.write(line + "\n")


@shop_agent.tool_plain
def lookup_order(order_id: str) -> dict[str, str]:
    """Look up an order."""
    return {"order_id": order_id, "total": "450.00"}


@shop_agent.tool(requires_approval=lambda ctx, args: args.amount > 100)
def refund(ctx: RunContext[dict[str, Any]], order_id: str, amount: Decimal) -> str:
    """Refund an order."""
    _log(ctx, f"refund {order_id} {amount}")
    if ctx.deps.get("crash_in_refund"):
        os._exit(17)  # the worker dies mid-call, like a kill -9
    return f"refunded {amount}"


@shop_agent.tool(requires_approval=True, approvals_required=2)
def delete_customer(ctx: RunContext[dict[str, Any]], customer_id: int) -> str:
    """Delete a customer; two people must agree."""
    _log(ctx, f"delete {customer_id}")
    return "deleted"


def send_email(ctx: RunContext[dict[str, Any]], to: str, body: str) -> str:
    """Send an email."""
    _log(ctx, f"email {to}")
    return "sent"


email_agent: Agent[dict[str, Any]] = Agent(
    TestModel([("send_email", {"to": "ann@example.com", "body": "Hello"})]),
    name="mailer",
    tools=[Tool(send_email, requires_approval=True, approval_ttl=60)],
)


class Gate:
    """Where the slow tool waits, like a long API call, until the test lets it finish."""

    def __init__(self) -> None:
        self.entered = anyio.Event()
        self.opened = anyio.Event()

    async def pass_through(self) -> None:
        self.entered.set()
        await self.opened.wait()


slow_agent: Agent[Gate] = Agent(TestModel([("slow_transfer", {"amount": 5})]), name="slow")


@slow_agent.tool(requires_approval=True)
async def slow_transfer(ctx: RunContext[Gate], amount: int) -> str:
    """Transfer money; it takes as long as the test's gate stays shut."""
    await ctx.deps.pass_through()
    return f"transferred {amount}"
