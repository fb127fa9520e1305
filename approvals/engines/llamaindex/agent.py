"""A LlamaIndex agent as the worker holds it: its name, its tools as validators, its workflow.

The agent stays LlamaIndex's: a `FunctionAgent` (any `BaseWorkflowAgent`) or an `AgentWorkflow`
of them, whose tools that need a person are wrapped with `requires_approval`. This wrapper adds
only what a stored run needs: a name the registry finds it by, each tool as ours (validated by
its own `fn_schema`, so a reviewer's edit is checked exactly as the model's arguments are), and
an optional `deps_factory` that builds a run's deps from its stored data.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from llama_index.core.agent.workflow import AgentWorkflow, BaseWorkflowAgent
from llama_index.core.tools import BaseTool

from ...exceptions import UserError
from ..native.tools import Tool
from ._approval import ApprovalTool, as_our_tool

__all__ = ("LlamaIndexAgent", "LlamaIndexWorkflow")

LlamaIndexWorkflow = BaseWorkflowAgent | AgentWorkflow
DepsFactory = Callable[[Any], Any | Awaitable[Any]]


class LlamaIndexAgent:
    """A LlamaIndex agent whose `requires_approval` tools wait in our inbox and resume on our workers."""

    def __init__(
        self, workflow: LlamaIndexWorkflow, *, name: str | None = None, deps_factory: DepsFactory | None = None
    ) -> None:
        """Wrap `workflow`; `name` (else the agent's own, else its root agent's) is how runs and workers find it."""
        if not isinstance(workflow, BaseWorkflowAgent | AgentWorkflow):
            raise UserError(f"LlamaIndexAgent wraps a LlamaIndex FunctionAgent or AgentWorkflow, not {type(workflow)}")
        self.workflow = workflow
        own = workflow.name if isinstance(workflow, BaseWorkflowAgent) else workflow.root_agent
        self.name = name or own or "agent"
        self.deps_factory = deps_factory
        self.tools: dict[str, Tool[Any]] = {}
        """Every tool of its agents, as ours, by name: they validate waiting calls and reviewers' edits."""
        self.approval_tools: dict[str, ApprovalTool] = {}
        for tool in self._llamaindex_tools():
            name_of = tool.metadata.get_name()
            if name_of in self.tools:
                continue  # agents of one workflow may share a tool
            self.tools[name_of] = tool.validator if isinstance(tool, ApprovalTool) else as_our_tool(tool)
            if isinstance(tool, ApprovalTool):
                self.approval_tools[name_of] = tool

    def __repr__(self) -> str:
        return f"LlamaIndexAgent(name={self.name!r})"

    @property
    def agents(self) -> list[BaseWorkflowAgent]:
        workflow = self.workflow
        return list(workflow.agents.values()) if isinstance(workflow, AgentWorkflow) else [workflow]

    @property
    def system_prompt(self) -> str | None:
        """What the (root) agent's model is told first: shown at the top of a run's history."""
        workflow = self.workflow
        root = workflow.agents[workflow.root_agent] if isinstance(workflow, AgentWorkflow) else workflow
        return root.system_prompt

    def _llamaindex_tools(self) -> list[BaseTool]:
        tools: list[BaseTool] = []
        for agent in self.agents:
            tools.extend(tool for tool in agent.tools or [] if isinstance(tool, BaseTool))
        return tools
