"""The harness drives the real Claude Code CLI: a PreToolUse hook's decision controls a Bash command.

The model is scripted (scripted_anthropic.py): its first turn calls Bash with `touch <marker>`,
its second answers in text. The hook is a small stdlib HTTP server in this module, not our app.
`touch` in the project needs approval in Claude Code's default permission mode, and in `-p`
mode no one can give it, so the marker exists only when the hook said `allow`.

Needs the CLI from tests/clis/install.sh (`APPROVALS_CLIS_DIR`); the tests of the scripted
server alone need only the `anthropic` SDK (the project's `anthropic` extra).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from .claude_code import (
    CLAUDE_VERSION,
    ClaudeRun,
    claude_binary,
    http_hook,
    make_project,
    matcher,
    resume_args,
    run_claude,
)
from .scripted_anthropic import ScriptedAnthropic, bash, text, tool_use

TOKEN = "hook-token-for-tests"


@dataclass
class HookServer:
    """Answers each PreToolUse POST with `decisions[i]` (the last one repeats) and records it."""

    decisions: list[str]
    reason: str = "not today"
    calls: list[tuple[str, dict[str, str], dict[str, Any]]] = field(default_factory=list)
    url: str = ""

    def answer(self) -> dict[str, Any]:
        decision = self.decisions[min(len(self.calls), len(self.decisions)) - 1]
        return {
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": decision,
                "permissionDecisionReason": self.reason,
            }
        }


@pytest.fixture
def hooks() -> Iterator[HookServer]:
    state = HookServer(decisions=["allow"])
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            with lock:
                state.calls.append((self.path, dict(self.headers.items()), body))
                data = json.dumps(state.answer()).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/hooks/pre-tool-use"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def bash_hook_project(tmp_path: Path, url: str, **hook: Any) -> Path:
    """A project whose PreToolUse hook on Bash POSTs to `url` with the bearer token from the environment."""
    settings = http_hook(
        url,
        timeout=10,
        headers={"Authorization": "Bearer $APPROVALS_TOKEN"},
        allowed_env_vars=["APPROVALS_TOKEN"],
    )
    return make_project(tmp_path, hooks={"PreToolUse": [matcher("Bash", {**settings, **hook})]})


def touch_marker(project: Path, tmp_path: Path, **run: Any) -> tuple[ClaudeRun, ScriptedAnthropic, Path]:
    marker = project / "marker"
    with ScriptedAnthropic([bash(f"touch {marker}", "Create the marker file"), text("All done.")]) as api:
        result = run_claude(
            claude_binary(),
            project,
            "Create the marker file.",
            base_url=api.base_url,
            env={"APPROVALS_TOKEN": TOKEN},
            **run,
        )
    assert result.returncode == 0, result.describe()
    return result, api, marker


def test_the_pinned_claude_code_runs() -> None:
    import subprocess

    done = subprocess.run([claude_binary(), "--version"], capture_output=True, text=True, timeout=30, check=True)
    assert done.stdout.startswith(CLAUDE_VERSION), done.stdout


def test_without_a_hook_print_mode_refuses_the_command(tmp_path: Path) -> None:
    project = make_project(tmp_path, hooks={})
    result, api, marker = touch_marker(project, tmp_path)

    assert not marker.exists()
    assert [d["tool_name"] for d in result.result["permission_denials"]] == ["Bash"]
    [refusal] = api.tool_results()
    assert refusal["is_error"] is True
    assert "needs approval" in refusal["content"]


def test_a_hook_that_allows_runs_the_command(tmp_path: Path, hooks: HookServer) -> None:
    hooks.decisions = ["allow"]
    project = bash_hook_project(tmp_path, hooks.url)
    result, api, marker = touch_marker(project, tmp_path)

    assert marker.exists(), result.describe()
    [(path, headers, body)] = hooks.calls
    assert path == "/hooks/pre-tool-use"
    assert headers["Authorization"] == f"Bearer {TOKEN}"
    assert body["hook_event_name"] == "PreToolUse"
    assert body["tool_name"] == "Bash"
    assert body["tool_input"]["command"] == f"touch {marker}"
    assert body["cwd"] == str(project)
    assert body["permission_mode"] == "default"
    [outcome] = api.tool_results()
    assert outcome["tool_use_id"] == body["tool_use_id"]
    assert outcome["is_error"] is False
    assert result.result["result"] == "All done."
    assert result.result["permission_denials"] == []
    assert api.unscripted_turns == 0
    assert api.paths() == ["POST /v1/messages", "POST /v1/messages"]


@pytest.mark.parametrize("decision", ["deny", "ask"])
def test_a_hook_that_refuses_blocks_the_command_and_the_model_reads_why(
    tmp_path: Path, hooks: HookServer, decision: str
) -> None:
    """`deny` refuses; `ask` would prompt, and with no one to answer in `-p` mode it refuses too."""
    hooks.decisions = [decision]
    project = bash_hook_project(tmp_path, hooks.url)
    result, api, marker = touch_marker(project, tmp_path)

    assert not marker.exists()
    assert len(hooks.calls) == 1
    [refusal] = api.tool_results()
    assert refusal["tool_use_id"] == hooks.calls[0][2]["tool_use_id"]
    assert refusal["is_error"] is True
    assert "not today" in refusal["content"]
    # The refusal went back in the very next model turn, after the scripted tool call.
    _, second = api.turns()
    assert refusal in [
        {k: v for k, v in block.items() if k != "cache_control"}
        for block in second["messages"][-1]["content"]
        if isinstance(block, dict)
    ]
    assert [d["tool_use_id"] for d in result.result["permission_denials"]] == [refusal["tool_use_id"]]


def test_a_deferred_call_waits_for_a_resume_that_asks_the_hook_again(tmp_path: Path, hooks: HookServer) -> None:
    hooks.decisions = ["defer", "allow"]
    project = bash_hook_project(tmp_path, hooks.url)
    marker = project / "marker"
    binary = claude_binary()
    with ScriptedAnthropic([bash(f"touch {marker}"), text("All done.")]) as api:
        env = {"APPROVALS_TOKEN": TOKEN}
        paused = run_claude(binary, project, "Create the marker file.", base_url=api.base_url, env=env)
        assert paused.returncode == 0, paused.describe()
        assert paused.result["stop_reason"] == "tool_deferred"
        deferred = paused.result["deferred_tool_use"]
        assert deferred["name"] == "Bash"
        assert deferred["input"]["command"] == f"touch {marker}"
        assert not marker.exists()
        assert len(api.turns()) == 1

        resumed = run_claude(
            binary,
            project,
            "",
            base_url=api.base_url,
            args=resume_args(paused.result["session_id"]),
            env=env,
        )
    assert resumed.returncode == 0, resumed.describe()
    assert marker.exists()
    assert [call[2]["tool_use_id"] for call in hooks.calls] == [deferred["id"], deferred["id"]]
    assert resumed.result["result"] == "All done."
    [outcome] = api.tool_results()
    assert outcome["tool_use_id"] == deferred["id"]
    assert outcome["is_error"] is False


@pytest.mark.parametrize(("on_failure", "runs"), [(None, True), ("block", False)])
def test_an_unreachable_hook_fails_open_unless_told_to_block(
    tmp_path: Path, on_failure: str | None, runs: bool
) -> None:
    """With Bash allowed by the rules, a hook that cannot be reached lets the call through by default."""
    extra = {"onFailure": on_failure} if on_failure else {}
    project = bash_hook_project(tmp_path, "http://127.0.0.1:9/unreachable", **extra)
    result, api, marker = touch_marker(project, tmp_path, args=["--output-format", "json", "--allowedTools", "Bash"])

    assert marker.exists() is runs, result.describe()
    [outcome] = api.tool_results()
    assert outcome["is_error"] is not runs


# -- the scripted server alone, read by Anthropic's own SDK ---------------------------------------


def test_the_scripted_server_speaks_the_messages_wire_format() -> None:
    anthropic = pytest.importorskip("anthropic")
    script = [
        tool_use("Bash", {"command": "touch x", "description": "d"}, id="toolu_1", say="Let me."),
        text("Done."),
        text("Not streamed."),
    ]
    with ScriptedAnthropic(script) as api, anthropic.Anthropic(base_url=api.base_url, api_key="k") as client:
        tools = [{"name": "Bash", "description": "shell", "input_schema": {"type": "object"}}]
        ask = {"model": "claude-test", "max_tokens": 100, "tools": tools}
        with client.messages.stream(messages=[{"role": "user", "content": "go"}], **ask) as stream:
            kinds = [event.type for event in stream]
            first = stream.get_final_message()
        assert first.stop_reason == "tool_use"
        assert [block.type for block in first.content] == ["text", "tool_use"]
        assert first.content[0].text == "Let me."
        assert first.content[1].id == "toolu_1"
        assert first.content[1].input == {"command": "touch x", "description": "d"}
        assert kinds[0] == "message_start"
        assert "input_json" in kinds
        assert kinds[-1] == "message_stop"

        history = [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [b.model_dump() for b in first.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "no"}]},
        ]
        with client.messages.stream(messages=history, **ask) as stream:
            second = stream.get_final_message()
        assert (second.stop_reason, second.content[0].text) == ("end_turn", "Done.")

        third = client.messages.create(messages=history, **ask)
        assert (third.stop_reason, third.content[0].text) == ("end_turn", "Not streamed.")
        assert client.messages.count_tokens(model="claude-test", messages=history).input_tokens > 0
        assert [m.id for m in client.models.list()]

    assert api.tool_results() == [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "no"}]
    assert api.unscripted_turns == 0
