"""LangGraph under the conformance suite: a real `create_agent` agent with `HumanInTheLoopMiddleware`, scripted.

The model is a LangChain chat model of our own (`ScriptedChatModel`): it makes the scenario's
tool calls, turn by turn, then answers with what it was told, read from the tool messages it
received with the engine's own reading of LangChain's marks (`_history.tool_outcome`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated, Any, Literal

from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain.tools import ToolRuntime, tool
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langgraph.graph.state import CompiledStateGraph
from pydantic import Field

from approvals.engines.langgraph._history import tool_outcome

from ..script import TOOLS_INSTRUCTIONS, Told, Turn, as_text, lookup_order_body, refund_body, told_text

_KINDS: dict[str, Literal["result", "denied", "retry"]] = {
    "result": "result",
    "answer": "result",
    "denied": "denied",
    "retry": "retry",
}


def told(messages: Sequence[BaseMessage]) -> list[Told]:
    """Everything the model received about calls, in the order of the calls.

    The middleware writes its messages for decisions before `ToolNode` writes the tools'
    results, so one step's tool messages are put back in the order the model made its calls.
    """
    said: list[Told] = []
    order: dict[str, int] = {}
    step: list[tuple[int, Told]] = []
    for message in [*messages, None]:
        if isinstance(message, ToolMessage):
            kind, content = tool_outcome(message)
            told = Told(_KINDS[kind], message.name or "", as_text(content))
            step.append((order.get(message.tool_call_id, len(order)), told))
            continue
        said.extend(told for _, told in sorted(step, key=lambda item: item[0]))
        step = []
        if isinstance(message, AIMessage):
            order = {call["id"] or "": i for i, call in enumerate(message.tool_calls)}
    return said


class ScriptedChatModel(BaseChatModel):
    """A chat model that makes `turns`' tool calls in order, then reports what it was told."""

    turns: list[Turn]

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        asked = sum(1 for m in messages if isinstance(m, AIMessage))
        if asked < len(self.turns):
            calls = [
                {"name": name, "args": args, "id": f"call-{asked}-{i}", "type": "tool_call"}
                for i, (name, args) in enumerate(self.turns[asked])
            ]
            message = AIMessage(content="", tool_calls=calls)
        else:
            message = AIMessage(content=told_text(told(messages)))
        return ChatResult(generations=[ChatGeneration(message=message)])

    def bind_tools(
        self, tools: Sequence[dict[str, Any] | type | Callable[..., Any] | Any], **kwargs: Any
    ) -> Runnable[LanguageModelInput, AIMessage]:
        return self


@tool
def lookup_order(order_id: str, runtime: ToolRuntime[dict[str, Any]]) -> str:
    """Look an order up."""
    return lookup_order_body(runtime.context, order_id)


@tool
def refund(order_id: str, amount: Annotated[int, Field(gt=0)], runtime: ToolRuntime[dict[str, Any]]) -> str:
    """Refund part or all of an order."""
    return refund_body(runtime.context, order_id, amount)


class LangGraphHarness:
    """The LangGraph engine (`approvals.engines.langgraph`): the registry adopts a compiled `create_agent` graph."""

    engine = "langgraph"

    def agent(self, name: str, turns: Sequence[Turn]) -> CompiledStateGraph[Any, Any, Any, Any]:
        return create_agent(
            ScriptedChatModel(turns=[list(turn) for turn in turns]),
            tools=[lookup_order, refund],
            system_prompt=TOOLS_INSTRUCTIONS,
            middleware=[HumanInTheLoopMiddleware(interrupt_on={"refund": True})],
            context_schema=dict,
            name=name,
        )
