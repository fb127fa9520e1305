"""A pydantic-ai agent on the real model reaches a real MCP server only through `approvals mcp`.

The agent's toolset is pydantic-ai's `MCPToolset` over stdio, which starts `approvals mcp
--config mcp.json` as any user's config would; the gateway stands in front of the real
`@modelcontextprotocol/server-filesystem` and asks our live server about every call. The model
is Gemma 3 270M on llama.cpp's server (tests/llm_server): it is made to call `write_file`
(named in `tool_choice`, as llama-cpp-python's handler needs to force a tool), and once the
tool answered, to end with pydantic-ai's output tool, so a 270M model's turns stay reliable.
A reviewer decides through the JSON API while the agent run waits inside the tool call.

Needs the local model server (`make llm-server`) and the filesystem server (`make clis`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
from fastmcp import Client
from pydantic import BaseModel
from pydantic_ai import Agent, AgentRunResult, RunContext
from pydantic_ai.capabilities import PrepareTools
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import ModelMessage, ToolReturnPart
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import ToolDefinition

from ..llm_server import MODEL_ALIAS, LocalModelServer
from ..real_model.pydantic_ai_agents import NullContentAsEmpty
from ..store.conftest import db_url, postgres_url, sqlite_template  # noqa: F401 - fixtures shared with the store tests
from .harness import RAN, REVIEWER, Approvals, Gateway, approvals_on, filesystem_server, filesystem_upstream

PROMPT = "Write the text 'approved by rita' to the file note.txt"
"""A relative path: the 270M model drops a leading slash, and the filesystem server resolves it in its folder."""
WRITE = "write_file"
OUTPUT_TOOL = "final_result"
_BASE: ModelSettings = {"temperature": 0.0, "seed": 7, "max_tokens": 128}


class Said(BaseModel):
    """The agent's last word (pydantic-ai's output tool, forced once the file tool answered)."""

    message: str


class RecordingTransport(NullContentAsEmpty):
    """Keeps every chat request the model server received, as sent."""

    def __init__(self) -> None:
        super().__init__()
        self.bodies: list[dict[str, Any]] = []

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.method == "POST" and request.url.path.endswith("/chat/completions"):
            self.bodies.append(json.loads(request.content))
        return await super().handle_async_request(request)

    def tool_messages(self) -> list[str]:
        """The `tool` messages of the last request: what the model read of its tool calls."""
        return [str(m.get("content")) for m in self.bodies[-1]["messages"] if m.get("role") == "tool"]


def _answered(ctx: RunContext[Any]) -> bool:
    return any(isinstance(part, ToolReturnPart) for message in ctx.messages for part in message.parts)


def _forced(ctx: RunContext[Any]) -> ModelSettings:
    """Name the file tool until it answered, then the output tool: the grammar makes the small model call it."""
    tool = OUTPUT_TOOL if _answered(ctx) else WRITE
    return {**_BASE, "extra_body": {"tool_choice": {"type": "function", "function": {"name": tool}}}}


async def _write_file_until_answered(ctx: RunContext[Any], definitions: list[ToolDefinition]) -> list[ToolDefinition]:
    return [] if _answered(ctx) else [d for d in definitions if d.name == WRITE]


@dataclass
class FileWriter:
    """An agent whose only tools are the gateway's, and what its model server received."""

    agent: Agent[None, Said]
    model_server_got: RecordingTransport
    http: httpx2.AsyncClient

    async def run(self) -> AgentRunResult[Said]:
        try:
            return await self.agent.run(PROMPT)
        finally:
            await self.http.aclose()


def file_writer(model_url: str, gateway: Gateway) -> FileWriter:
    recording = RecordingTransport()
    http = httpx2.AsyncClient(transport=recording, timeout=60)
    provider = OpenAIProvider(base_url=model_url, api_key="local", http_client=http)
    # "failed": a tool error (a denial) is a failed tool result the model reads, not a retry of the same call
    toolset: MCPToolset[None] = MCPToolset(Client(gateway.transport()), tool_error_behavior="failed")
    agent: Agent[None, Said] = Agent(
        OpenAIChatModel(MODEL_ALIAS, provider=provider),
        instructions="You write files with the write_file tool.",
        model_settings=_forced,
        output_type=Said,
        toolsets=[toolset],
        capabilities=[PrepareTools(_write_file_until_answered)],
    )
    return FileWriter(agent, recording, http)


@pytest.fixture
def approvals(db_url: str, tmp_path: Path) -> Iterator[Approvals]:  # noqa: F811 - the shared fixture
    filesystem_server()  # skip before starting anything when the upstream is not installed
    with approvals_on(db_url, tmp_path) as served:
        yield served


@pytest.fixture
def background() -> Iterator[Callable[[FileWriter], Future[AgentRunResult[Said]]]]:
    """Run an agent (`background(writer)`) in a thread of its own while the test decides."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agent")
    try:
        yield lambda writer: pool.submit(lambda: asyncio.run(writer.run()))
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def file_tool_returns(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    """What the file tool returned, as the agent's history has it (not the output tool's return)."""
    parts = [part for message in messages for part in message.parts]
    return [part for part in parts if isinstance(part, ToolReturnPart) and part.tool_name == WRITE]


def test_an_approved_write_lands_on_disk_and_the_agent_run_finishes(
    llm_server: LocalModelServer,
    approvals: Approvals,
    tmp_path: Path,
    background: Callable[[FileWriter], Future[AgentRunResult[Said]]],
) -> None:
    folder = tmp_path / "files"
    gateway = Gateway.over(filesystem_upstream(folder), tmp_path, approvals)
    running = background(file_writer(llm_server.base_url, gateway))
    call = approvals.wait_for_pending(running)
    assert call.tool_name == WRITE
    assert set(call.args) == {"path", "content"}
    assert list(folder.iterdir()) == []  # the call waits in the gateway: nothing ran
    assert not running.done()
    approvals.decide(call.id, {"verdict": "approve"})
    result = running.result(timeout=120)

    written = folder / call.args["path"]
    assert written.read_text() == call.args["content"], gateway.stderr()
    assert isinstance(result.output, Said)
    [returned] = file_tool_returns(result.all_messages())
    assert returned.outcome == "success"
    assert "Successfully wrote" in returned.model_response_str()
    stored = approvals.wait_for_status(call.id, "succeeded")
    assert stored.decided_by == REVIEWER
    assert stored.context["mcp_server"] == "files"
    assert approvals.call_actions(stored.run_id) == RAN
    assert approvals.audit_verifies()


def test_a_denied_write_does_not_run_and_the_model_reads_the_reason(
    llm_server: LocalModelServer,
    approvals: Approvals,
    tmp_path: Path,
    background: Callable[[FileWriter], Future[AgentRunResult[Said]]],
) -> None:
    folder = tmp_path / "files"
    gateway = Gateway.over(filesystem_upstream(folder), tmp_path, approvals)
    writer = file_writer(llm_server.base_url, gateway)
    reason = "Notes go to the team wiki, not to disk."

    running = background(writer)
    call = approvals.wait_for_pending(running)
    approvals.decide(call.id, {"verdict": "deny", "reason": reason})
    result = running.result(timeout=120)

    assert list(folder.iterdir()) == [], gateway.stderr()
    assert isinstance(result.output, Said)
    [returned] = file_tool_returns(result.all_messages())
    assert returned.outcome == "failed"
    assert reason in returned.model_response_str()
    [read] = writer.model_server_got.tool_messages()  # the request after the denial carries it to the model
    assert reason in read
    stored = approvals.calls()
    assert [(c.id, c.status, c.denial_reason) for c in stored] == [(call.id, "denied", reason)]
    assert approvals.audit_verifies()
