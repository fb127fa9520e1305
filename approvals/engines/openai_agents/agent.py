"""An OpenAI Agents SDK agent, as our registry, worker and web app hold it.

`OpenAIAgentsAgent` wraps an `agents.Agent` whose risky tools are `@function_tool(needs_approval=
True)` (or an approval predicate): it gives the agent the name runs are registered under, its
function tools as our validators (which check a reviewer's answer and the model's calls the
SDK's own way, `_tools`), the deps factory of its runs and the `RunConfig` its turns run with.
The run itself is the SDK's (`engine`).

Tools reach the run's deps the SDK's way: they are the run context, `RunContextWrapper.context`
(`ctx.context` in a tool that takes `RunContextWrapper` first).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import agents
from agents import FunctionTool, RunConfig

from ...exceptions import UserError
from ..native.tools import Tool
from ._tools import AgentsTool, agents_tool

__all__ = ("OpenAIAgentsAgent",)

DepsFactory = Callable[[Any], Any | Awaitable[Any]]
_POLICIES = ("approvals_required", "approval_ttl", "idempotent")


class OpenAIAgentsAgent:
    """An `agents.Agent` whose approval-needing calls wait in our inbox and resume on our workers."""

    def __init__(
        self,
        agent: agents.Agent[Any],
        *,
        name: str | None = None,
        deps_factory: DepsFactory | None = None,
        run_config: RunConfig | None = None,
        policies: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        """Wrap `agent`; `name` (else the agent's own) is how runs and workers find it.

        `run_config` is what every turn runs with (default: the SDK's, with tracing off, so
        nothing is sent to OpenAI's trace exporter unless you ask). `policies` gives a tool
        our policies by its name, e.g. `{"refund": {"approvals_required": 2}}`.
        """
        if not isinstance(agent, agents.Agent):
            raise UserError(f"OpenAIAgentsAgent wraps an agents.Agent, not {type(agent).__name__}")
        self.agent = agent
        self.name = name or agent.name
        self.deps_factory = deps_factory
        self.run_config = run_config if run_config is not None else RunConfig(tracing_disabled=True)
        given = dict(policies or {})
        for tool_name, chosen in given.items():
            if set(chosen) - set(_POLICIES):
                raise UserError(f"tool {tool_name!r}: policies take only {', '.join(_POLICIES)}, not {dict(chosen)!r}")
        self.function_tools: dict[str, AgentsTool] = {
            tool.name: agents_tool(tool, given.get(tool.name)) for tool in agent.tools if isinstance(tool, FunctionTool)
        }
        unknown = set(given) - set(self.function_tools)
        if unknown:
            raise UserError(f"policies name tools agent {self.name!r} does not have: {', '.join(sorted(unknown))}")

    def __repr__(self) -> str:
        return f"OpenAIAgentsAgent(name={self.name!r})"

    @property
    def tools(self) -> dict[str, Tool[Any]]:
        """The agent's function tools as ours, by name: they validate pending calls and reviewers' edits."""
        return {name: tool.tool for name, tool in self.function_tools.items()}
