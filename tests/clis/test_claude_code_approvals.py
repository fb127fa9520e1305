"""The real Claude Code CLI asks our real approvals server before each Bash command, end to end.

The model is scripted (scripted_anthropic.py): it calls Bash (`touch <file>`), then answers in
text. The hook is the one `approvals hook install claude-code` writes (`install_hook`): the HTTP
hook to `POST /api/hooks/claude-code`, or the fail-closed command hook `python -m approvals
hook claude-code`. A reviewer decides through the JSON API (`POST /api/calls/{id}/decision`)
with a token of their own, while the CLI waits on the hook (it runs in a thread) or after a
`defer` ended the run (then `claude -p "" --resume` asks again). Without a hook that answers
`allow`, `-p` mode refuses the command, so a file exists only when approvals let it run.

Needs the CLI from tests/clis/install.sh (`APPROVALS_CLIS_DIR`); every test skips without it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from approvals.hook_install import install_hook
from approvals.worker.resumer import AgentRegistry

from ..live_approvals import REVIEWER, Approvals, accounts
from ..live_server import serving
from ..processes import free_port
from ..store.conftest import db_url, postgres_url, sqlite_template  # noqa: F401 - fixtures shared with the store tests
from .claude_code import ClaudeRun, claude_binary, make_project, resume_args, run_claude
from .scripted_anthropic import Reply, ScriptedAnthropic, bash, text

RAN = ["call.requested", "call.approved", "call.executing", "call.succeeded"]
"""A call approved, handed to Claude Code, run, and reported by its PostToolUse hook."""
ASKING = 30.0
"""Seconds the hook waits for a person while the CLI runs: far more than a test needs to decide."""
ALLOW_BASH = ("--output-format", "json", "--allowedTools", "Bash")
"""Permission rules that let Bash run unasked: only the hook stands in the way."""


@pytest.fixture
def approvals(db_url: str, tmp_path: Path) -> Iterator[Approvals]:  # noqa: F811 - the shared fixture
    claude_binary()  # skip before starting anything when the CLI is not installed
    with serving(db_url, tmp_path, AgentRegistry(), users=False) as server:
        yield accounts(server, "claude", Approvals)


def hooked_project(tmp_path: Path, url: str, *, wait: float, fallback: str | None = None, http: bool = True) -> Path:
    """A project with our hook, written by the installer users run."""
    project = make_project(tmp_path)
    installed = install_hook("claude-code", url=url, wait=wait, fallback=fallback, project=project, http=http)
    assert installed.path == project / ".claude" / "settings.json"
    return project


def touch(path: Path) -> Reply:
    """The model's turn: Bash `touch <path>`."""
    return bash(f"touch {path}", "Create a file")


def tool_use_id(reply: Reply) -> str:
    [block] = [b for b in reply.content if b["type"] == "tool_use"]
    return str(block["id"])


def claude(
    project: Path, api: ScriptedAnthropic, token: str, prompt: str = "Create the file.", **more: Any
) -> ClaudeRun:
    return run_claude(claude_binary(), project, prompt, base_url=api.base_url, env={"APPROVALS_TOKEN": token}, **more)


def finished(running: Future[ClaudeRun], *, seconds: float = 60) -> ClaudeRun:
    run = running.result(timeout=seconds)
    assert run.returncode == 0, run.describe()
    return run


def result_in_next_turn(api: ScriptedAnthropic, tool_use: str) -> dict[str, Any]:
    """The `tool_result` for the model's call `tool_use`, in the model turn right after the one that made it."""
    turns = api.turns()
    assert len(turns) >= 2, turns
    last_message = turns[1]["messages"][-1]
    [found] = [
        {k: v for k, v in block.items() if k != "cache_control"}
        for block in last_message["content"]
        if isinstance(block, dict) and block.get("type") == "tool_result" and block.get("tool_use_id") == tool_use
    ]
    return found


def content_text(result: dict[str, Any]) -> str:
    content = result["content"]
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if isinstance(part, dict))


# -- a reviewer decides while the hook waits ---------------------------------------------------------


def test_an_approved_command_runs_and_is_stored_as_approved(
    approvals: Approvals, tmp_path: Path, background: Callable[..., Future[ClaudeRun]]
) -> None:
    project = hooked_project(tmp_path, approvals.url, wait=ASKING)
    marker = project / "approved"
    call_bash = touch(marker)
    with ScriptedAnthropic([call_bash, text("All done.")]) as api:
        running = background(claude, project, api, approvals.asking_token)
        call = approvals.wait_for_pending(running)
        assert not marker.exists()
        approvals.decide(call.id, {"verdict": "approve"})
        run = finished(running)

    assert marker.exists(), run.describe()
    assert run.result["result"] == "All done."
    assert run.result["permission_denials"] == []
    [outcome] = api.tool_results()
    assert outcome["tool_use_id"] == tool_use_id(call_bash)
    assert outcome["is_error"] is False

    [stored] = approvals.calls()
    assert stored.id == call.id
    assert stored.status == "succeeded"  # approved, handed to the CLI, which ran it and reported (PostToolUse)
    assert stored.result is not None and "stdout" in stored.result
    assert stored.decided_by == REVIEWER
    assert stored.tool_name == "Bash"
    assert stored.tool_call_id == tool_use_id(call_bash)
    assert stored.args["command"] == f"touch {marker}"
    assert stored.context["cwd"] == str(project)
    assert stored.context["hook_event_name"] == "PreToolUse"
    assert approvals.call_actions(stored.run_id) == RAN
    assert approvals.audit_verifies()


def test_a_denied_command_does_not_run_and_the_model_reads_the_reason(
    approvals: Approvals, tmp_path: Path, background: Callable[..., Future[ClaudeRun]]
) -> None:
    project = hooked_project(tmp_path, approvals.url, wait=ASKING)
    marker = project / "denied"
    call_bash = touch(marker)
    reason = "Not on a Friday; use the staging folder."
    with ScriptedAnthropic([call_bash, text("Understood.")]) as api:
        running = background(claude, project, api, approvals.asking_token)
        call = approvals.wait_for_pending(running)
        approvals.decide(call.id, {"verdict": "deny", "reason": reason})
        run = finished(running)

    assert not marker.exists()
    refusal = result_in_next_turn(api, tool_use_id(call_bash))
    assert refusal["is_error"] is True
    assert reason in content_text(refusal)
    assert [d["tool_use_id"] for d in run.result["permission_denials"]] == [tool_use_id(call_bash)]
    [stored] = approvals.calls()
    assert (stored.status, stored.denial_reason) == ("denied", reason)
    assert approvals.audit_verifies()


def test_an_edited_command_runs_as_the_reviewer_wrote_it(
    approvals: Approvals, tmp_path: Path, background: Callable[..., Future[ClaudeRun]]
) -> None:
    project = hooked_project(tmp_path, approvals.url, wait=ASKING)
    asked, edited = project / "asked-for", project / "edited-to"
    call_bash = touch(asked)
    with ScriptedAnthropic([call_bash, text("All done.")]) as api:
        running = background(claude, project, api, approvals.asking_token)
        call = approvals.wait_for_pending(running)
        approvals.decide(call.id, {"verdict": "edit", "args": {"command": f"touch {edited}"}})
        run = finished(running)

    assert edited.exists(), run.describe()
    assert not asked.exists()
    [outcome] = api.tool_results()
    assert (outcome["tool_use_id"], outcome["is_error"]) == (tool_use_id(call_bash), False)
    [stored] = approvals.calls()
    assert stored.status == "succeeded"
    assert stored.override_args == {"command": f"touch {edited}"}
    assert approvals.audit_verifies()


# -- nobody decides in time: the fallback ------------------------------------------------------------


def test_nobody_deciding_denies_by_default_and_the_model_reads_where_to_decide(
    approvals: Approvals, tmp_path: Path
) -> None:
    project = hooked_project(tmp_path, approvals.url, wait=0)  # no fallback named: deny
    marker = project / "waiting"
    call_bash = touch(marker)
    with ScriptedAnthropic([call_bash, text("I asked for approval.")]) as api:
        run = claude(project, api, approvals.asking_token)
    assert run.returncode == 0, run.describe()

    assert not marker.exists()
    [call] = approvals.pending()
    refusal = result_in_next_turn(api, tool_use_id(call_bash))
    assert refusal["is_error"] is True
    assert f"{approvals.url}/calls/{call.id}" in content_text(refusal)
    assert call.tool_call_id == tool_use_id(call_bash)
    assert approvals.call_actions(call.run_id) == ["call.requested", "call.fallback"]  # counted by /metrics


def test_a_deferred_run_resumed_after_the_approval_runs_the_command_once_asked(
    approvals: Approvals, tmp_path: Path
) -> None:
    project = hooked_project(tmp_path, approvals.url, wait=0, fallback="defer")
    marker = project / "deferred"
    call_bash = touch(marker)
    with ScriptedAnthropic([call_bash, text("All done.")]) as api:
        paused = claude(project, api, approvals.asking_token)
        assert paused.returncode == 0, paused.describe()
        assert paused.result["stop_reason"] == "tool_deferred", paused.describe()
        assert paused.result["deferred_tool_use"]["id"] == tool_use_id(call_bash)
        assert not marker.exists()
        [call] = approvals.pending()
        assert call.tool_call_id == tool_use_id(call_bash)

        assert approvals.decide(call.id, {"verdict": "approve"})["status"] == "approved"
        assert not marker.exists()
        resumed = claude(project, api, approvals.asking_token, "", args=resume_args(paused.result["session_id"]))

    assert resumed.returncode == 0, resumed.describe()
    assert marker.exists(), resumed.describe()
    assert resumed.result["result"] == "All done."
    [outcome] = api.tool_results()
    assert (outcome["tool_use_id"], outcome["is_error"]) == (tool_use_id(call_bash), False)
    [stored] = approvals.calls()  # the resumed run's ask found the same call
    assert (stored.id, stored.status) == (call.id, "succeeded")
    # nobody had decided within the hook's wait: its `defer` answer is on the record, then the call ran as usual
    assert approvals.call_actions(stored.run_id) == [RAN[0], "call.fallback", *RAN[1:]]
    assert approvals.audit_verifies()


# -- our server down or restarting -------------------------------------------------------------------


@pytest.mark.parametrize("http", [True, False], ids=["http-hook", "command-hook"])
def test_with_our_server_down_the_command_does_not_run(tmp_path: Path, http: bool) -> None:
    """The permission rules allow Bash (`--allowedTools Bash`): only the hook keeps the command from running.

    Nothing listens at the hook's URL: the command hook blocks (exit 2) once its retries run
    out, and the HTTP hook's `onFailure: block` blocks when Claude Code cannot reach us.
    """
    claude_binary()
    down = f"http://127.0.0.1:{free_port()}"
    project = hooked_project(tmp_path, down, wait=0, http=http)
    marker = project / "unasked"
    call_bash = touch(marker)
    with ScriptedAnthropic([call_bash, text("It was blocked.")]) as api:
        run = claude(project, api, "apv-nobody-checks-this", args=ALLOW_BASH)
    assert run.returncode == 0, run.describe()

    assert not marker.exists(), run.describe()
    refusal = result_in_next_turn(api, tool_use_id(call_bash))
    assert refusal["is_error"] is True
    # what Claude Code tells the model: the command client's reason, or its own for the HTTP hook
    said = 'blocking because onFailure is "block"' if http else "Blocked by approvals: approvals could not be reached"
    assert said in content_text(refusal), refusal


def test_a_server_restarted_while_the_command_hook_waits_is_asked_again(
    db_url: str,  # noqa: F811 - the shared fixture
    tmp_path: Path,
    background: Callable[..., Future[ClaudeRun]],
) -> None:
    claude_binary()
    port = free_port()
    project = hooked_project(tmp_path, f"http://127.0.0.1:{port}", wait=ASKING, http=False)
    marker = project / "after-restart"
    call_bash = touch(marker)
    with ScriptedAnthropic([call_bash, text("All done.")]) as api:
        with serving(db_url, tmp_path, AgentRegistry(), port=port, users=False) as first:
            before = accounts(first, "claude", Approvals)
            running = background(claude, project, api, before.asking_token)
            call = before.wait_for_pending(running)
        # server A is gone while the hook waits; B takes over on the same port and database
        with serving(db_url, tmp_path, AgentRegistry(), port=port, users=False) as second:
            after = Approvals(second, before.asking_token, before.reviewer_token)
            assert not running.done(), running.result().describe()
            assert [c.id for c in after.pending()] == [call.id]
            after.decide(call.id, {"verdict": "approve"})
            run = finished(running)
            stored = after.calls()
            actions = after.call_actions(call.run_id)
            assert after.audit_verifies()

    assert marker.exists(), run.describe()
    assert run.result["result"] == "All done."
    [outcome] = api.tool_results()
    assert (outcome["tool_use_id"], outcome["is_error"]) == (tool_use_id(call_bash), False)
    assert [(c.id, c.status) for c in stored] == [(call.id, "succeeded")]
    assert actions == ["call.requested", "call.approved", "call.executing", "call.succeeded"]
