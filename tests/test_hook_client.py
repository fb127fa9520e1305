"""`approvals hook <cli>` (the fail-closed command hook) against a real server, and `approvals hook install`.

The hook runs as the CLIs run it: a process of its own, the hook input on stdin. It must block
the tool (exit 2) whenever it has no decision it can trust, and ask again, about the same call,
when the server restarts while it waits.
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from approvals.calls.verdicts import Approve
from approvals.cli import app
from approvals.hook_install import InstallError, install_hook
from approvals.store import SYSTEM, Actor
from approvals.worker.resumer import AgentRegistry

from .databases import DATABASES
from .live_server import LiveServer, serving
from .processes import free_port

REVIEWER = Actor("rita", "reviewer")


def claude_input(tool_use_id: str = "toolu_1", command: str = "rm -rf build") -> bytes:
    return json.dumps(
        {
            "session_id": "cc-1",
            "cwd": "/home/dev/project",
            "hook_event_name": "PreToolUse",
            "tool_name": "Bash",
            "tool_input": {"command": command},
            "tool_use_id": tool_use_id,
        }
    ).encode()


def run_hook(
    cli: str, hook_input: bytes, *, url: str, token: str | None, args: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[bytes]:
    env = {key: value for key, value in os.environ.items() if key != "APPROVALS_TOKEN"}
    if token is not None:
        env["APPROVALS_TOKEN"] = token
    return subprocess.run(
        [sys.executable, "-m", "approvals", "hook", cli, "--url", url, *args],
        input=hook_input,
        env=env,
        capture_output=True,
        timeout=120,
    )


def start_hook(hook_input: bytes, *, url: str, token: str, args: tuple[str, ...]) -> subprocess.Popen[bytes]:
    env = {**os.environ, "APPROVALS_TOKEN": token}
    process = subprocess.Popen(
        [sys.executable, "-m", "approvals", "hook", "claude-code", "--url", url, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert process.stdin is not None
    process.stdin.write(hook_input)
    process.stdin.close()
    process.stdin = None  # sent; communicate() must not flush it again
    return process


@pytest.fixture
def database(tmp_path: Path) -> str:
    """A migrated SQLite file of the test's own: a copy of the process's template (tests/databases.py)."""
    return DATABASES.fresh("sqlite", tmp_path)[0]


def asking_token(server: LiveServer) -> str:
    return server.call(server.store.people.create_token("claude", role="reviewer", actor=SYSTEM, scopes=["calls:ask"]))


def pending_calls(server: LiveServer) -> list[Any]:
    return server.call(server.store.calls.list_calls(status=None)).items


def test_the_hook_answers_in_claude_codes_format_and_retries_find_the_same_call(database: str, tmp_path: Path) -> None:
    with serving(database, tmp_path, AgentRegistry(), users=False) as server:
        token = asking_token(server)
        waiting = run_hook("claude-code", claude_input(), url=server.url, token=token, args=("--wait", "0"))
        assert waiting.returncode == 0, waiting.stderr
        output = json.loads(waiting.stdout)["hookSpecificOutput"]
        assert output["permissionDecision"] == "deny" and "/calls/" in output["permissionDecisionReason"]

        [call] = pending_calls(server)
        server.call(server.store.calls.decide(call.id, Approve(), actor=REVIEWER))
        allowed = run_hook("claude-code", claude_input(), url=server.url, token=token, args=("--wait", "0"))
        assert json.loads(allowed.stdout) == {
            "hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow"}
        }
        assert len(pending_calls(server)) == 1


def test_no_server_no_token_or_a_bad_answer_blocks_the_tool(database: str, tmp_path: Path) -> None:
    down = f"http://127.0.0.1:{free_port()}"
    refused = run_hook("codex", claude_input(), url=down, token="apv_x", args=("--wait", "0", "--grace", "0.25"))
    assert refused.returncode == 2 and b"cannot reach" in refused.stderr and refused.stdout == b""

    no_token = run_hook("codex", claude_input(), url=down, token=None)
    assert no_token.returncode == 2 and b"APPROVALS_TOKEN" in no_token.stderr

    with answering({"decision": "allow"}) as url:  # not a shape Codex reads: it would run the tool
        odd = run_hook("codex", claude_input(), url=url, token="apv_x", args=("--wait", "0"))
    assert odd.returncode == 2 and b"would not read" in odd.stderr
    with answering({"oops": True}, status=500) as url:
        failing = run_hook("gemini", claude_input(), url=url, token="apv_x", args=("--wait", "0", "--grace", "0.25"))
    assert failing.returncode == 2 and b"HTTP 500" in failing.stderr


def test_a_server_restarted_while_the_hook_waits_is_asked_again_about_the_same_call(
    database: str, tmp_path: Path
) -> None:
    port = free_port()
    # the hook's request is still open when the server goes: cancel it at once, not after uvicorn's 2 s
    with serving(database, tmp_path, AgentRegistry(), port=port, users=False, graceful_shutdown=0) as server:
        token = asking_token(server)
        hook = start_hook(claude_input(), url=server.url, token=token, args=("--wait", "30", "--grace", "30"))
        deadline = time.monotonic() + 20
        while not pending_calls(server):
            assert time.monotonic() < deadline, "the hook never asked"
            time.sleep(0.1)
    # the server is gone while the hook waits; a new one on the same database and port takes over
    with serving(database, tmp_path, AgentRegistry(), port=port, users=False) as restarted:
        [call] = pending_calls(restarted)
        time.sleep(1.5)  # the hook reaches the new server and waits there
        restarted.call(restarted.store.calls.decide(call.id, Approve(), actor=REVIEWER))
        out, err = hook.communicate(timeout=60)
        assert hook.returncode == 0, err
        assert json.loads(out)["hookSpecificOutput"]["permissionDecision"] == "allow"
        assert len(pending_calls(restarted)) == 1


class _Answering(http.server.BaseHTTPRequestHandler):
    answer: bytes = b"{}"
    status = 200

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(self.status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(self.answer)))
        self.end_headers()
        self.wfile.write(self.answer)

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def answering(answer: Any, status: int = 200) -> Iterator[str]:
    """A server that answers every POST with `answer`: a stand-in for a broken or hostile approvals."""
    handler = type("Handler", (_Answering,), {"answer": json.dumps(answer).encode(), "status": status})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


# approvals hook install


def test_install_merges_into_claude_codes_settings_and_keeps_the_rest(tmp_path: Path) -> None:
    settings = tmp_path / ".claude" / "settings.json"
    settings.parent.mkdir()
    theirs = {"type": "command", "command": "./lint.sh"}
    settings.write_text(
        json.dumps(
            {
                "model": "opus",
                "permissions": {"allow": ["Bash(npm test)"]},
                "hooks": {"PreToolUse": [{"matcher": "Edit", "hooks": [theirs]}], "Stop": [{"hooks": [theirs]}]},
            }
        )
    )
    first = install_hook("claude-code", url="http://approvals.test", wait=50, fallback="ask", project=tmp_path)
    assert first.path == settings and not first.replaced
    again = install_hook("claude-code", url="http://approvals.test:9000", wait=20, project=tmp_path)
    assert again.replaced
    merged = json.loads(settings.read_text())
    assert merged["model"] == "opus" and merged["permissions"] == {"allow": ["Bash(npm test)"]}
    assert merged["hooks"]["Stop"] == [{"hooks": [theirs]}]
    [edit, ours] = merged["hooks"]["PreToolUse"]
    assert edit == {"matcher": "Edit", "hooks": [theirs]}
    assert ours["matcher"] == "Bash"
    [hook] = ours["hooks"]
    assert hook["type"] == "http" and hook["url"] == "http://approvals.test:9000/api/hooks/claude-code?wait=20"
    assert hook["headers"] == {"Authorization": "Bearer $APPROVALS_TOKEN"} and hook["allowedEnvVars"] == [
        "APPROVALS_TOKEN"
    ]
    assert hook["onFailure"] == "block" and hook["timeout"] == 50
    [after] = merged["hooks"]["PostToolUse"]  # reports how the command went, which settles its call
    assert after["matcher"] == "Bash" and after["hooks"] == [hook]


def test_install_asks_about_the_tools_a_matcher_names(tmp_path: Path) -> None:
    install_hook("claude-code", url="http://a", wait=10, project=tmp_path, matcher="Bash|Write|Edit|mcp__.*")
    hooks = json.loads((tmp_path / ".claude" / "settings.json").read_text())["hooks"]
    assert [group["matcher"] for group in hooks["PreToolUse"] + hooks["PostToolUse"]] == ["Bash|Write|Edit|mcp__.*"] * 2
    with pytest.raises(InstallError, match="takes no --matcher"):
        install_hook("cursor", url="http://a", wait=10, project=tmp_path, matcher="Shell")


def test_install_refuses_settings_it_cannot_read_and_writes_nothing(tmp_path: Path) -> None:
    settings = tmp_path / ".gemini" / "settings.json"
    settings.parent.mkdir()
    settings.write_text("{not json")
    with pytest.raises(InstallError, match="not JSON"):
        install_hook("gemini", url="http://a", wait=10, project=tmp_path)
    assert settings.read_text() == "{not json"
    settings.write_text('{"hooks": []}')
    with pytest.raises(InstallError, match="'hooks' is not an object"):
        install_hook("gemini", url="http://a", wait=10, project=tmp_path)
    assert settings.read_text() == '{"hooks": []}'


def test_install_writes_each_clis_own_shape(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex-home"))
    codex = install_hook("codex", url="http://a", wait=10, project=tmp_path)
    assert codex.path == tmp_path / "codex-home" / "hooks.json"
    [group] = json.loads(codex.path.read_text())["hooks"]["PreToolUse"]
    assert " hook codex " in group["hooks"][0]["command"] and group["hooks"][0]["type"] == "command"
    assert any("trust" in step for step in codex.next_steps)

    cursor = install_hook("cursor", url="http://a", wait=10, fallback="ask", project=tmp_path)
    document = json.loads(cursor.path.read_text())
    assert document["version"] == 1
    [entry] = document["hooks"]["preToolUse"]
    assert entry["failClosed"] is True and entry["command"].endswith("--fallback ask")

    gemini_settings = tmp_path / ".gemini" / "settings.json"
    gemini_settings.parent.mkdir()
    gemini_settings.write_text('{"security": {"environmentVariableRedaction": {"allowed": ["CI_JOB_ID"]}}}')
    gemini = install_hook("gemini", url="http://a", wait=10, project=tmp_path)
    written = json.loads(gemini.path.read_text())
    [group] = written["hooks"]["BeforeTool"]
    assert group["matcher"] == "run_shell_command" and group["hooks"][0]["timeout"] == 40_000
    # Gemini CLI's redaction (on under GitHub Actions) would keep the token from the hook
    assert written["security"]["environmentVariableRedaction"]["allowed"] == ["CI_JOB_ID", "APPROVALS_TOKEN"]


def test_the_install_command_says_what_is_left_to_do_and_refuses_bad_options(tmp_path: Path) -> None:
    runner = CliRunner()
    done = runner.invoke(app, ["hook", "install", "claude-code", "--project", str(tmp_path), "--command"])
    assert done.exit_code == 0, done.output
    assert "APPROVALS_TOKEN" in done.output
    [group] = json.loads((tmp_path / ".claude" / "settings.json").read_text())["hooks"]["PreToolUse"]
    assert group["hooks"][0]["type"] == "command" and group["hooks"][0]["onFailure"] == "block"
    wrong = runner.invoke(app, ["hook", "install", "codex", "--fallback", "ask", "--project", str(tmp_path)])
    assert wrong.exit_code == 1 and "deny" in wrong.output
    unknown = runner.invoke(app, ["hook", "install", "vim", "--project", str(tmp_path)])
    assert unknown.exit_code == 1 and "claude-code" in unknown.output
