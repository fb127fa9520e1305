"""LlamaIndex under the conformance suite: a real `FunctionAgent`, scripted with LlamaIndex's mock function-calling
LLM.

LlamaIndex builds a tool's schema from its function's annotations, so this module keeps them real (no
`from __future__ import annotations`).
"""

import warnings
from collections.abc import Sequence
from typing import Any

from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ChatMessage, MessageRole, TextBlock, ToolCallBlock
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.tools import FunctionTool
from pydantic import Field
from pydantic.warnings import PydanticDeprecationWarning

from approvals.engines.llamaindex import DENIED_PREFIX, requires_approval, run_deps

from ..script import TOOLS_INSTRUCTIONS, Told, Turn, lookup_order_body, refund_body, told_text

RETRY_PREFIX = "Tool call validation failed"
"""How our approval tools word arguments their schema refuses (LlamaIndex hands the model the error's text)."""


def told(messages: Sequence[ChatMessage]) -> list[Told]:
    """Everything the model received about calls, in the order it made them.

    LlamaIndex gives the model each tool's output as text, and the results of parallel calls in
    the order they finished; the scripted model reports them in the order of its calls.
    """
    calls: dict[str, tuple[int, str]] = {}
    said: list[tuple[int, Told]] = []
    for message in messages:
        for block in message.blocks:
            if isinstance(block, ToolCallBlock) and block.tool_call_id:
                calls[block.tool_call_id] = (len(calls), block.tool_name)
        if message.role != MessageRole.TOOL:
            continue
        text = "".join(block.text for block in message.blocks if isinstance(block, TextBlock))
        order, tool = calls.get(str(message.additional_kwargs.get("tool_call_id")), (len(calls), ""))
        if text.startswith(DENIED_PREFIX):
            said.append((order, Told("denied", tool, text.removeprefix(DENIED_PREFIX))))
        elif text.startswith(RETRY_PREFIX):
            said.append((order, Told("retry", tool, text)))
        else:
            said.append((order, Told("result", tool, text)))
    return [t for _, t in sorted(said, key=lambda item: item[0])]


def lookup_order(order_id: str) -> str:
    """Look an order up."""
    return lookup_order_body(run_deps(), order_id)


def refund(order_id: str, amount: int = Field(gt=0)) -> str:  # LlamaIndex reads constraints from a `Field` default
    """Refund part or all of an order."""
    return refund_body(run_deps(), order_id, amount)


class LlamaIndexHarness:
    """The LlamaIndex engine (`approvals.engines.llamaindex`): the registry adopts a `FunctionAgent`."""

    engine = "llamaindex"

    def agent(self, name: str, turns: Sequence[Turn]) -> FunctionAgent:
        def respond(messages: Sequence[ChatMessage], **_: Any) -> ChatMessage:
            asked = sum(1 for m in messages if m.role == MessageRole.ASSISTANT)
            if asked < len(turns):
                calls = [
                    ToolCallBlock(tool_call_id=f"call-{asked}-{i}", tool_name=tool, tool_kwargs=args)
                    for i, (tool, args) in enumerate(turns[asked])
                ]
                return ChatMessage(role=MessageRole.ASSISTANT, blocks=list(calls))
            return ChatMessage(role=MessageRole.ASSISTANT, content=told_text(told(messages)))

        with (
            warnings.catch_warnings()
        ):  # LlamaIndex's workflow inspects the agent, a pydantic model, touching `__fields__`
            warnings.simplefilter("ignore", PydanticDeprecationWarning)
            return FunctionAgent(
                name=name,
                tools=[FunctionTool.from_defaults(lookup_order), requires_approval(refund)],
                llm=MockFunctionCallingLLM(response_generator=respond),
                system_prompt=TOOLS_INSTRUCTIONS,
            )
