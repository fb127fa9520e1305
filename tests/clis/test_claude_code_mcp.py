"""The real Claude Code CLI reaches a real MCP server only through `approvals mcp`, end to end.

Claude Code starts the gateway over stdio from `--mcp-config` (as a user's `.mcp.json` would);
the gateway stands in front of the real `@modelcontextprotocol/server-filesystem` (allowed the
project folder) and asks our live server about each call with a `calls:ask` token. The model is
scripted (scripted_anthropic.py): it calls the MCP tool, which Claude Code names
`mcp__<server>__<tool>`, then answers in text. `--allowedTools` lets Claude Code run the tool
unprompted, so only the gateway stands between the model and the disk; a reviewer decides
through the JSON API while Claude Code waits in the tool call (it runs in a thread): approved,
the file lands; denied, it does not and the model reads why; edited, the reviewer's arguments
reach the upstream. A read-only tool that a rule on the upstream's annotations allows runs unasked.

Needs the CLI and the filesystem server from tests/clis/install.sh (`APPROVALS_CLIS_DIR`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ..mcp_gateway.harness import (
    RAN,
    REVIEWER,
    Approvals,
    Gateway,
    approvals_on,
    filesystem_server,
    filesystem_upstream,
    named,
)
from ..store.conftest import db_url, postgres_url, sqlite_template  # noqa: F401 - fixtures shared with the store tests
from .claude_code import ClaudeRun, claude_binary, make_project, run_claude
from .scripted_anthropic import Reply, ScriptedAnthropic, text, tool_use

SERVER = "approvals"
"""The gateway's name in Claude Code's MCP config: its tools are `mcp__approvals__<tool>`."""


@dataclass
class Setup:
    """A project whose files the upstream may touch, and Claude Code's MCP config naming the gateway."""

    project: Path
    mcp_config: Path
    gateway: Gateway

    def tool(self, upstream_tool: str) -> str:
        """What Claude Code calls the gateway's tool for `upstream_tool`."""
        return f"mcp__{SERVER}__{named(self.gateway.tool_names(), upstream_tool)}"

    def claude(self, api: ScriptedAnthropic, *tools: str) -> ClaudeRun:
        args = ["--output-format", "json", "--mcp-config", str(self.mcp_config), "--strict-mcp-config"]
        args += ["--allowedTools", ",".join(tools)]
        return run_claude(claude_binary(), self.project, "Do it.", base_url=api.base_url, args=args, timeout=120)


@pytest.fixture
def approvals(db_url: str, tmp_path: Path) -> Iterator[Approvals]:  # noqa: F811 - the shared fixture
    claude_binary()  # skip before starting anything when the CLI or the upstream is not installed
    filesystem_server()
    with approvals_on(db_url, tmp_path) as served:
        yield served


@pytest.fixture
def setup(approvals: Approvals, tmp_path: Path) -> Setup:
    project = make_project(tmp_path)
    # the project folder itself: Claude Code offers it as the MCP root, which the filesystem server then allows
    gateway = Gateway.over(filesystem_upstream(project), tmp_path, approvals)
    config = tmp_path / "claude-mcp.json"
    config.write_text(json.dumps({"mcpServers": {SERVER: gateway.server_entry()}}, indent=2))
    return Setup(project, config, gateway)


def tool_use_id(reply: Reply) -> str:
    [block] = [b for b in reply.content if b["type"] == "tool_use"]
    return str(block["id"])


def the_result(api: ScriptedAnthropic, reply: Reply) -> dict[str, Any]:
    """The one `tool_result` Claude Code sent back for the model's call in `reply`."""
    [found] = [result for result in api.tool_results() if result["tool_use_id"] == tool_use_id(reply)]
    return found


def content_text(result: dict[str, Any]) -> str:
    content = result["content"]
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if isinstance(part, dict))


def finished(running: Future[ClaudeRun], *, seconds: float = 90) -> ClaudeRun:
    run = running.result(timeout=seconds)
    assert run.returncode == 0, run.describe()
    return run


def test_an_approved_write_lands_on_disk_and_claude_code_reads_the_result(
    approvals: Approvals, setup: Setup, background: Callable[..., Future[ClaudeRun]]
) -> None:
    write = setup.tool("write_file")
    target = setup.project / "approved.txt"
    call_tool = tool_use(write, {"path": str(target), "content": "written after approval"})
    with ScriptedAnthropic([call_tool, text("All done.")]) as api:
        running = background(setup.claude, api, write)
        call = approvals.wait_for_pending(running)
        assert not target.exists()
        assert call.args == {"path": str(target), "content": "written after approval"}
        approvals.decide(call.id, {"verdict": "approve"})
        run = finished(running)

    assert target.read_text() == "written after approval", run.describe() + setup.gateway.stderr()
    assert run.result["result"] == "All done."
    outcome = the_result(api, call_tool)
    assert not outcome.get("is_error"), outcome
    assert "Successfully wrote" in content_text(outcome)
    stored = approvals.wait_for_status(call.id, "succeeded")
    assert stored.decided_by == REVIEWER
    assert stored.tool_name.endswith("write_file")
    assert stored.agent_name == "claude-code"  # the MCP client's name, from its `initialize`
    assert stored.context["mcp_server"] == "files"
    assert stored.context["annotations"]["destructiveHint"] is True  # as the upstream annotated the tool
    assert approvals.call_actions(stored.run_id) == RAN
    assert approvals.audit_verifies()


def test_a_denied_write_does_not_run_and_the_model_reads_the_reason(
    approvals: Approvals, setup: Setup, background: Callable[..., Future[ClaudeRun]]
) -> None:
    write = setup.tool("write_file")
    target = setup.project / "denied.txt"
    reason = "Not in the project root; write under docs/ instead."
    call_tool = tool_use(write, {"path": str(target), "content": "never written"})
    with ScriptedAnthropic([call_tool, text("Understood.")]) as api:
        running = background(setup.claude, api, write)
        call = approvals.wait_for_pending(running)
        approvals.decide(call.id, {"verdict": "deny", "reason": reason})
        run = finished(running)

    assert not target.exists()
    assert run.result["result"] == "Understood."
    refusal = the_result(api, call_tool)
    assert refusal["is_error"] is True
    assert reason in content_text(refusal)
    assert [(c.id, c.status, c.denial_reason) for c in approvals.calls()] == [(call.id, "denied", reason)]
    assert approvals.audit_verifies()


def test_an_edited_write_reaches_the_upstream_as_the_reviewer_wrote_it(
    approvals: Approvals, setup: Setup, background: Callable[..., Future[ClaudeRun]]
) -> None:
    write = setup.tool("write_file")
    asked, edited = setup.project / "asked-for.txt", setup.project / "edited-to.txt"
    call_tool = tool_use(write, {"path": str(asked), "content": "as the model wrote it"})
    with ScriptedAnthropic([call_tool, text("All done.")]) as api:
        running = background(setup.claude, api, write)
        call = approvals.wait_for_pending(running)
        approvals.decide(call.id, {"verdict": "edit", "args": {"path": str(edited), "content": "as rita wrote it"}})
        run = finished(running)

    assert edited.read_text() == "as rita wrote it", run.describe() + setup.gateway.stderr()
    assert not asked.exists()
    outcome = the_result(api, call_tool)
    assert not outcome.get("is_error"), outcome
    assert str(edited) in content_text(outcome)  # the upstream's own answer, naming the file it wrote
    stored = approvals.wait_for_status(call.id, "succeeded")
    assert stored.override_args == {"path": str(edited), "content": "as rita wrote it"}
    assert approvals.audit_verifies()


def test_a_read_only_tool_allowed_by_a_rule_on_its_annotations_runs_unasked(approvals: Approvals, setup: Setup) -> None:
    approvals.allow("read-only-tools", when="has(context.annotations.readOnlyHint) && context.annotations.readOnlyHint")
    read = setup.tool("read_text_file")
    source = setup.project / "notes.txt"
    source.write_text("the meeting moved to Thursday")
    call_tool = tool_use(read, {"path": str(source)})
    with ScriptedAnthropic([call_tool, text("It moved.")]) as api:
        run = setup.claude(api, read)
    assert run.returncode == 0, run.describe()

    outcome = the_result(api, call_tool)
    assert not outcome.get("is_error"), outcome
    assert "the meeting moved to Thursday" in content_text(outcome)
    [stored] = approvals.calls()  # stored as the rule decided it, never pending
    assert stored.tool_name.endswith("read_text_file")
    assert stored.decided_by == "rule:read-only-tools"
    assert stored.context["annotations"]["readOnlyHint"] is True
    approvals.wait_for_status(stored.id, "succeeded")  # run by the gateway, its outcome reported
