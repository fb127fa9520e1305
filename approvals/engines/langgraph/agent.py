"""A compiled LangGraph graph (a `langchain.agents.create_agent` agent) as the worker holds it.

`LangGraphAgent` names the graph and finds what the core needs in it, LangGraph's own way:
its tools are the `ToolNode`s' tools (validators of pending calls and of reviewers' edits),
and the tools that need a person are the ones its `HumanInTheLoopMiddleware` interrupts on.
The graph itself is run unchanged, with a checkpointer of ours per turn (`_snapshot`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents.middleware import HumanInTheLoopMiddleware
from langgraph.channels.delta import DeltaChannel
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt.tool_node import ToolNode

from ...exceptions import UserError
from ..native.tools import Tool
from ._tools import as_tool

__all__ = ("DepsFactory", "LangGraphAgent")

DepsFactory = Callable[[Any], Any | Awaitable[Any]]


class LangGraphAgent:
    """A compiled LangGraph graph whose `interrupt`s wait in our inbox and resume on our workers.

    The run's deps reach the graph as its LangGraph `context` (`Runtime.context`; a tool reads
    it as `runtime.context` through a `ToolRuntime` argument).
    """

    def __init__(
        self,
        graph: CompiledStateGraph[Any, Any, Any, Any],
        *,
        name: str | None = None,
        deps_factory: DepsFactory | None = None,
    ) -> None:
        if not isinstance(graph, CompiledStateGraph):
            raise UserError(f"LangGraphAgent wraps a compiled LangGraph graph, not {type(graph).__name__}")
        deltas = [key for key, channel in graph.channels.items() if isinstance(channel, DeltaChannel)]
        if deltas:
            raise UserError(
                f"LangGraph graph {graph.name!r} keeps {', '.join(deltas)} as a DeltaChannel, whose value spans "
                "checkpoints; this engine keeps a run's latest checkpoint only"
            )
        self.graph = graph
        self.name = name or graph.name or "agent"
        self.deps_factory = deps_factory
        self.tools: dict[str, Tool[Any]] = {name: as_tool(tool) for name, tool in _tool_nodes_tools(graph).items()}
        self.gated: frozenset[str] = frozenset(
            tool for middleware in _middlewares(graph) for tool in middleware.interrupt_on
        )
        """The tools whose calls wait for a person: the `interrupt_on` of the graph's `HumanInTheLoopMiddleware`."""

    def __repr__(self) -> str:
        return f"LangGraphAgent(name={self.name!r})"


def _tool_nodes_tools(graph: CompiledStateGraph[Any, Any, Any, Any]) -> dict[str, Any]:
    tools: dict[str, Any] = {}
    for node in graph.nodes.values():
        if isinstance(node.bound, ToolNode):
            tools.update(node.bound.tools_by_name)
    return tools


def _middlewares(graph: CompiledStateGraph[Any, Any, Any, Any]) -> list[HumanInTheLoopMiddleware[Any, Any, Any]]:
    """The graph's HITL middleware instances, found through the nodes `create_agent` makes of their hooks."""
    found: dict[int, HumanInTheLoopMiddleware[Any, Any, Any]] = {}
    for node in graph.nodes.values():
        for attribute in ("func", "afunc"):
            owner = getattr(getattr(node.bound, attribute, None), "__self__", None)
            if isinstance(owner, HumanInTheLoopMiddleware):
                found[id(owner)] = owner
        wrapped = getattr(getattr(node.bound, "_wrap_tool_call", None), "__self__", None)
        if isinstance(wrapped, HumanInTheLoopMiddleware):
            found[id(wrapped)] = wrapped
    return list(found.values())
