"""Agents for the outage tests: a gated tool that waits for the test's signal, and a model that writes garbage."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from approvals import Agent, RunContext, Tool
from approvals.engines.native.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from approvals.engines.native.models import AgentInfo, FunctionModel, TestModel


def slow_refund(ctx: RunContext[dict[str, Any]], order_id: str) -> str:
    """Refund an order, once the test says so (a file appears), so the test can break the database meanwhile."""
    log = Path(ctx.deps["log"])
    with log.open("a") as out:
        out.write(f"started {order_id}\n")
    gate = Path(ctx.deps["gate"])
    deadline = time.monotonic() + 120
    while not gate.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    with log.open("a") as out:
        out.write(f"refunded {order_id}\n")
    return f"refunded {order_id}"


gated_agent: Agent[dict[str, Any]] = Agent(
    TestModel([("slow_refund", {"order_id": "A-1"})], final_text="done"),
    name="gated",
    tools=[Tool(slow_refund, requires_approval=True)],
)


def echo_nul(text: str) -> str:
    """Return what it is given, with a NUL character: JSONB cannot hold it."""
    return f"{text}\x00"


def _garbage(messages: Sequence[ModelRequest | ModelResponse], info: AgentInfo) -> ModelResponse:
    """First a response no database can store as it is; then text."""
    if any(isinstance(p, ToolReturnPart) for m in messages if isinstance(m, ModelRequest) for p in m.parts):
        return ModelResponse(parts=[TextPart(content="finished \x00 with a lone \ud800 surrogate")])
    long_id = "x" * 500
    return ModelResponse(
        parts=[
            TextPart(content="calling \x00 tools \udfff"),
            ToolCallPart(tool_name="note", args='{"text": "a\\u0000b \\ud800"}', tool_call_id=long_id),
            ToolCallPart(tool_name="note", args={"text": "c\x00d"}, tool_call_id="dup"),
            ToolCallPart(tool_name="note", args={"text": "e"}, tool_call_id="dup"),
        ]
    )


def note(text: str) -> str:
    """Keep a note."""
    return f"noted {len(text)} characters"


garbage_agent: Agent[None] = Agent(FunctionModel(_garbage), name="garbage", tools=[Tool(note, requires_approval=True)])
nul_result_agent: Agent[None] = Agent(
    TestModel([("echo_nul", {"text": "hi"})], final_text="done"), name="nul-result", tools=[Tool(echo_nul)]
)
