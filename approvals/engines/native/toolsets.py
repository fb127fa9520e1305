"""Toolsets: named groups of tools, checked together so two tools never share a name.

An agent takes several toolsets; `collect_tools` merges them and reports every duplicate
at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Generic, overload

from ...exceptions import ToolDefinitionError
from ._run_context import AgentDepsT
from .tools import Tool

__all__ = ("FunctionToolset", "collect_tools")


class FunctionToolset(Generic[AgentDepsT]):
    """A group of tools built from functions; names are unique within it."""

    def __init__(self, tools: Sequence[Tool[Any] | Callable[..., Any]] = (), *, id: str | None = None) -> None:
        self.id = id
        self.tools: dict[str, Tool[Any]] = {}
        wrapped = [t if isinstance(t, Tool) else Tool(t) for t in tools]
        _raise_on_duplicates(wrapped, f"toolset {id!r}" if id else "toolset")
        for item in wrapped:
            self.tools[item.name] = item

    def add_tool(self, tool: Tool[Any]) -> Tool[Any]:
        """Add a tool; a name already present is an error."""
        if tool.name in self.tools:
            raise ToolDefinitionError(
                f"toolset {self.id!r}" if self.id else "toolset", [f"duplicate tool name {tool.name!r}"]
            )
        self.tools[tool.name] = tool
        return tool

    def add_function(self, function: Callable[..., Any], **options: Any) -> Tool[Any]:
        """Wrap `function` as a `Tool` with `options` and add it."""
        return self.add_tool(Tool(function, **options))

    @overload
    def tool(self, function: Callable[..., Any], /) -> Callable[..., Any]: ...
    @overload
    def tool(self, /, **options: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]: ...
    def tool(
        self, function: Callable[..., Any] | None = None, /, **options: Any
    ) -> Callable[..., Any] | Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator registering a function as a tool; the function is returned unchanged."""

        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            self.add_function(fn, **options)
            return fn

        return register(function) if function is not None else register


def collect_tools(groups: Iterable[Iterable[Tool[Any]]], subject: str = "agent") -> dict[str, Tool[Any]]:
    """Merge tools from several groups by name, failing on every duplicate."""
    tools = [t for group in groups for t in group]
    _raise_on_duplicates(tools, subject)
    return {t.name: t for t in tools}


def _raise_on_duplicates(tools: Sequence[Tool[Any]], subject: str) -> None:
    seen: set[str] = set()
    duplicates: list[str] = []
    for item in tools:
        if item.name in seen and item.name not in duplicates:
            duplicates.append(item.name)
        seen.add(item.name)
    if duplicates:
        raise ToolDefinitionError(subject, [f"duplicate tool name {name!r}" for name in duplicates])
