"""The real Codex and Gemini CLIs ask our real server, through our fail-closed command hook, before a shell command.

Each test serves the app (`tests/live_server.py`, on SQLite and PostgreSQL), installs the hook
the way users do (`approvals.hook_install.install_hook`, which runs `python -m approvals hook
codex|gemini --wait S --url URL`), scripts a model that runs one shell command
(`touch <marker>`) and then answers, and runs the CLI in a thread. The CLI blocks while the
hook waits; the test plays the reviewer from its own thread: it polls the store for the
pending call and decides through the JSON API with a person's token (`rita`). Whether the
command ran is whether the marker exists; what the model was told is in the scripted server's
recorded requests. Skipped unless `APPROVALS_CLIS_DIR` names the folder tests/clis/install.sh
prints.

How the hook gets installed:

- Codex: `install_hook("codex", ...)` with `CODEX_HOME` set to the harness's home writes
  `$CODEX_HOME/hooks.json` (the harness's `make_codex_home` writes config.toml only here).
- Gemini: `install_hook("gemini", ..., user=True)` with `HOME` set to the harness's home merges
  the hook into `$HOME/.gemini/settings.json`, next to the harness's settings (which it keeps).
- The token reaches the hook through the CLI's environment (`APPROVALS_TOKEN`): Codex and
  Gemini pass their environment to hooks. Gemini would strip it (its name matches `/TOKEN/`)
  with `security.environmentVariableRedaction.enabled`, or always in GitHub Actions
  (`GITHUB_SHA` set), unless listed in `security.environmentVariableRedaction.allowed`. The
  harness sets neither; the last test shows a stripped token failing closed (the hook exits
  2) and `allowed` letting it through.
- "Our server is down" needs `--grace 1` on the installed command (the installer writes no
  `--grace`; the default would keep asking for 10 s more).
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from approvals.calls.canonical import canonical_json
from approvals.hook_install import install_hook
from approvals.store import SYSTEM
from approvals.store.models import ToolCallRow
from approvals.worker.resumer import AgentRegistry

from ..live_server import LiveServer, serving
from ..store.conftest import db_url, postgres_url, sqlite_template  # noqa: F401 - fixtures shared with the store tests
from . import codex, gemini
from . import scripted_gemini as sg
from . import scripted_responses as sr
from .codex import CliRun

REVIEWER = "rita"
REASON = "not on the production box"
WAIT = 20.0
"""How long the hook waits for a person in the tests where one decides (they decide at once)."""
CALL_ID = "call_touch"
"""The scripted model's id for its shell call (Codex hands it to the hook as `tool_use_id`)."""

Reviewer = Callable[["Approvals", "Future[CliRun]"], None]
"""What the reviewer does while the CLI runs (in the test's thread; the CLI runs in another)."""


# -- our server and the reviewer ---------------------------------------------------------------


@dataclass
class Approvals:
    """Our server, a token the hook asks with, and a reviewer's token to decide with."""

    server: LiveServer
    agent_token: str
    reviewer_token: str

    @property
    def url(self) -> str:
        return self.server.url

    def calls(self, status: str | None = None) -> list[ToolCallRow]:
        """The stored calls (pending ones by default, every one with `status=None`), oldest first."""
        return self.server.call(self.server.store.list_calls(status=status)).items

    def only_call(self) -> ToolCallRow:
        calls = self.calls(status=None)
        assert len(calls) == 1, [(c.tool_name, c.args, c.status) for c in calls]
        return calls[0]

    def next_pending(self, cli: Future[CliRun], timeout: float = 30) -> ToolCallRow:
        """The call the CLI's hook waits on; fails if the CLI ends without asking."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pending = self.calls()
            if pending:
                assert len(pending) == 1, [(c.tool_name, c.args) for c in pending]
                return pending[0]
            if cli.done():
                pytest.fail(f"the CLI ended without a call waiting for approval:\n{cli.result().describe()}")
            time.sleep(0.1)
        pytest.fail(f"no call waited for approval within {timeout:g} s")

    def decide(self, call_id: str, body: dict[str, Any]) -> dict[str, Any]:
        """Decide as the reviewer, through the JSON API."""
        response = httpx.post(
            f"{self.url}/api/calls/{call_id}/decision",
            json=body,
            headers={"Authorization": f"Bearer {self.reviewer_token}"},
            timeout=10,
        )
        assert response.status_code == 200, response.text
        decided: dict[str, Any] = response.json()
        return decided


def tokens(server: LiveServer) -> tuple[str, str]:
    """A token that may only ask (for the hook), and the reviewer's own token."""
    store = server.store
    agent = server.call(store.create_token("agent", role="reviewer", actor=SYSTEM, scopes=["calls:ask"]))
    server.call(store.create_user(REVIEWER, "pw-123456789", role="reviewer", actor=SYSTEM))
    reviewer = server.call(store.create_token(f"{REVIEWER}-token", role="reviewer", actor=SYSTEM, user=REVIEWER))
    return agent, reviewer


@pytest.fixture
def approvals(db_url: str, tmp_path: Path) -> Iterator[Approvals]:  # noqa: F811 - db_url is the shared fixture
    with serving(db_url, tmp_path / "server", AgentRegistry(), users=False) as server:
        yield Approvals(server, *tokens(server))


@pytest.fixture
def codex_cli() -> Path:
    return codex.codex_binary()  # first, so a missing CLI skips before the server starts


@pytest.fixture
def gemini_cli() -> Path:
    return gemini.gemini_binary()


def decide_with(body: dict[str, Any]) -> Reviewer:
    """A reviewer who waits for the call, checks the command did not run yet, and decides `body`."""

    def review(approvals: Approvals, cli: Future[CliRun]) -> None:
        call = approvals.next_pending(cli)
        assert not any(p.name.endswith("marker") for p in Path(call.context["cwd"]).iterdir())  # still blocked
        approvals.decide(call.id, body)

    return review


def nobody(approvals: Approvals, cli: Future[CliRun]) -> None:
    """Nobody decides."""


def run_in_thread(cli: Callable[[], CliRun], approvals: Approvals | None, reviewer: Reviewer) -> CliRun:
    """Run the CLI in a thread while `reviewer` acts in this one; the CLI's run."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="cli") as pool:
        future = pool.submit(cli)
        if approvals is not None:
            reviewer(approvals, future)
        return future.result(timeout=120)


def with_grace(settings: Path, grace: float) -> None:
    """Add `--grace` to the installed hook's command (the installer writes none)."""
    content = json.loads(settings.read_text())
    [group] = next(iter(content["hooks"].values()))
    [hook] = group["hooks"]
    hook["command"] += f" --grace {grace:g}"
    settings.write_text(json.dumps(content, indent=2))


def touch(marker: Path) -> str:
    return f"touch {shlex.quote(str(marker))}"


# -- Codex --------------------------------------------------------------------------------------


@dataclass
class CodexSession:
    run: CliRun
    api: sr.ScriptedResponses
    hook_command: str

    def output(self) -> str:
        """What the model read as the shell call's output, checked to be in the turn after the call."""
        assert self.api.errors == [], self.api.errors
        turns = self.api.turns()
        assert len(turns) == 2, (self.api.paths(), self.run.describe())
        sent = [item for item in turns[1]["input"] if item.get("type") == "function_call_output"]
        assert [item["call_id"] for item in sent] == [CALL_ID], sent
        output = self.api.output_for(CALL_ID)
        assert output is not None
        return output


def run_codex(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    binary: Path,
    *,
    url: str,
    token: str,
    command: str,
    wait: float = WAIT,
    grace: float | None = None,
    approvals: Approvals | None = None,
    reviewer: Reviewer = nobody,
) -> CodexSession:
    project = codex.make_project(tmp_path)
    with sr.ScriptedResponses([sr.shell(command, call_id=CALL_ID), sr.text("Done.")]) as api:
        home = codex.make_codex_home(tmp_path, api.base_url)
        monkeypatch.setenv("CODEX_HOME", str(home))
        installed = install_hook("codex", url=url, wait=wait)
        assert installed.path == home / "hooks.json"
        if grace is not None:
            with_grace(installed.path, grace)
        [group] = json.loads(installed.path.read_text())["hooks"]["PreToolUse"]
        run = run_in_thread(
            lambda: codex.run_codex(
                binary, project, "Make the marker file.", codex_home=home, env={"APPROVALS_TOKEN": token}
            ),
            approvals,
            reviewer,
        )
    assert run.returncode == 0, run.describe()
    return CodexSession(run, api, group["hooks"][0]["command"])


def blocked(session: CodexSession, command: str) -> str:
    """The reason Codex gave the model for blocking `command` (checked to be its block message)."""
    output = session.output()
    prefix, suffix = "Command blocked by PreToolUse hook: ", f". Command: {command}"
    assert output.startswith(prefix) and output.endswith(suffix), output
    assert "hook: PreToolUse Blocked" in session.run.stderr, session.run.describe()
    return output[len(prefix) : -len(suffix)]


def test_codex_runs_the_command_a_reviewer_approves(
    codex_cli: Path, approvals: Approvals, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "project" / "marker"
    session = run_codex(
        tmp_path,
        monkeypatch,
        codex_cli,
        url=approvals.url,
        token=approvals.agent_token,
        command=touch(marker),
        approvals=approvals,
        reviewer=decide_with({"verdict": "approve"}),
    )
    assert marker.exists(), session.run.describe()
    assert "Process exited with code 0" in session.output()
    assert " hook codex --wait 20 --url " in session.hook_command
    call = approvals.only_call()
    assert (call.tool_name, call.args, call.tool_call_id) == ("Bash", {"command": touch(marker)}, CALL_ID)
    assert call.context["cwd"] == str(tmp_path / "project")
    assert call.context["hook_event_name"] == "PreToolUse"
    assert call.context["model"] == sr.MODEL_ID
    # Handed out: the CLI was told to run it. Nothing reports how it went, so it stays executing.
    assert (call.status, call.verdict, call.decided_by) == ("executing", "approve", REVIEWER)


def test_codex_blocks_a_denied_command_and_the_model_reads_why(
    codex_cli: Path, approvals: Approvals, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "project" / "marker"
    session = run_codex(
        tmp_path,
        monkeypatch,
        codex_cli,
        url=approvals.url,
        token=approvals.agent_token,
        command=touch(marker),
        approvals=approvals,
        reviewer=decide_with({"verdict": "deny", "reason": REASON}),
    )
    assert not marker.exists(), session.run.describe()
    assert blocked(session, touch(marker)) == f"A reviewer denied this call: {REASON}"
    call = approvals.only_call()
    assert (call.status, call.denial_reason, call.decided_by) == ("denied", REASON, REVIEWER)


def test_codex_blocks_a_command_nobody_decided_and_names_where_it_waits(
    codex_cli: Path, approvals: Approvals, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "project" / "marker"
    session = run_codex(
        tmp_path,
        monkeypatch,
        codex_cli,
        url=approvals.url,
        token=approvals.agent_token,
        command=touch(marker),
        wait=1,
        approvals=approvals,
        reviewer=nobody,
    )
    assert not marker.exists(), session.run.describe()
    call = approvals.only_call()
    assert call.status == "pending"  # still in the inbox
    reason = blocked(session, touch(marker))
    assert f"This call waits for a person's approval: {approvals.url}/calls/{call.id} ." in reason, reason


def test_codex_blocks_the_command_when_our_server_is_down(
    codex_cli: Path,
    db_url: str,  # noqa: F811 - the shared fixture
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with serving(db_url, tmp_path / "server", AgentRegistry(), users=False) as server:
        token, _ = tokens(server)
        url = server.url
    # Stopped: nothing listens on its address now, but the hook has a real token for it.
    marker = tmp_path / "project" / "marker"
    session = run_codex(tmp_path, monkeypatch, codex_cli, url=url, token=token, command=touch(marker), wait=1, grace=1)
    assert not marker.exists(), session.run.describe()
    reason = blocked(session, touch(marker))
    assert reason.startswith(f"Blocked by approvals: approvals gave no decision in time (cannot reach {url}"), reason


def test_codex_blocks_an_edited_command_and_the_model_reads_the_edit(
    codex_cli: Path, approvals: Approvals, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker, edited_marker = tmp_path / "project" / "marker", tmp_path / "project" / "edited-marker"
    edited = {"command": touch(edited_marker)}
    session = run_codex(
        tmp_path,
        monkeypatch,
        codex_cli,
        url=approvals.url,
        token=approvals.agent_token,
        command=touch(marker),
        approvals=approvals,
        reviewer=decide_with({"verdict": "edit", "args": edited}),
    )
    assert not marker.exists() and not edited_marker.exists(), session.run.describe()
    reason = blocked(session, touch(marker))
    assert reason.startswith(f"A reviewer approved this call only with other input: {canonical_json(edited)}. "), reason
    call = approvals.only_call()
    assert (call.verdict, call.override_args, call.args) == ("edit", edited, {"command": touch(marker)})


# -- Gemini -------------------------------------------------------------------------------------


@dataclass
class GeminiSession:
    run: CliRun
    api: sg.ScriptedGemini
    hook_command: str

    def response(self) -> dict[str, Any]:
        """The shell call's `functionResponse.response` the model read, checked to be in the turn after the call."""
        assert self.api.errors == [], self.api.errors
        turns = self.api.turns()
        assert len(turns) == 2, (self.api.paths(), self.run.describe())
        [response] = self.api.function_responses()
        assert (response["name"], response["id"]) == (sg.SHELL_TOOL, CALL_ID)
        assert {"functionResponse": response} in turns[1]["contents"][-1]["parts"]
        result: dict[str, Any] = response["response"]
        return result

    def blocked(self) -> str:
        """The reason Gemini gave the model for blocking the command."""
        response = self.response()
        assert set(response) == {"error"}, response
        prefix = "Tool execution blocked: "
        assert response["error"].startswith(prefix), response
        return str(response["error"][len(prefix) :])


def run_gemini(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    binary: Path,
    *,
    url: str,
    token: str,
    command: str,
    wait: float = WAIT,
    grace: float | None = None,
    approvals: Approvals | None = None,
    reviewer: Reviewer = nobody,
    settings: dict[str, Any] | None = None,
    token_redacted: bool = False,
) -> GeminiSession:
    project = gemini.make_project(tmp_path)
    home = gemini.make_gemini_home(tmp_path, settings=settings)
    before = json.loads((home / ".gemini" / "settings.json").read_text())
    monkeypatch.setenv("HOME", str(home))
    installed = install_hook("gemini", url=url, wait=wait, user=True)
    assert installed.path == home / ".gemini" / "settings.json"
    merged = json.loads(installed.path.read_text())
    redaction = merged["security"]["environmentVariableRedaction"]
    assert redaction["allowed"][-1] == "APPROVALS_TOKEN"  # let through Gemini CLI's redaction
    redaction["allowed"].pop()
    if not redaction["allowed"]:
        del redaction["allowed"]
    if not redaction:
        del merged["security"]["environmentVariableRedaction"]
    assert {key: value for key, value in merged.items() if key != "hooks"} == before  # kept the harness's settings
    if token_redacted:  # as if the user took the token off the list
        settings_now = json.loads(installed.path.read_text())
        settings_now["security"]["environmentVariableRedaction"]["allowed"].remove("APPROVALS_TOKEN")
        installed.path.write_text(json.dumps(settings_now))
    if grace is not None:
        with_grace(installed.path, grace)
    [group] = json.loads(installed.path.read_text())["hooks"]["BeforeTool"]
    script = [sg.shell(command, "Make the marker", id=CALL_ID), sg.text("Done.")]
    with sg.ScriptedGemini(script) as api:
        run = run_in_thread(
            lambda: gemini.run_gemini(
                binary,
                project,
                "Make the marker file.",
                home=home,
                base_url=api.base_url,
                env={"APPROVALS_TOKEN": token},
            ),
            approvals,
            reviewer,
        )
    assert run.returncode == 0, run.describe()
    return GeminiSession(run, api, group["hooks"][0]["command"])


def test_gemini_runs_the_command_a_reviewer_approves(
    gemini_cli: Path, approvals: Approvals, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "project" / "marker"
    session = run_gemini(
        tmp_path,
        monkeypatch,
        gemini_cli,
        url=approvals.url,
        token=approvals.agent_token,
        command=touch(marker),
        approvals=approvals,
        reviewer=decide_with({"verdict": "approve"}),
    )
    assert marker.exists(), session.run.describe()
    assert "error" not in session.response()
    assert " hook gemini --wait 20 --url " in session.hook_command
    call = approvals.only_call()
    assert (call.tool_name, call.args) == (sg.SHELL_TOOL, {"command": touch(marker), "description": "Make the marker"})
    assert call.context["cwd"] == str(tmp_path / "project")
    assert call.context["hook_event_name"] == "BeforeTool"
    # Handed out: the CLI was told to run it. Nothing reports how it went, so it stays executing.
    assert (call.status, call.verdict, call.decided_by) == ("executing", "approve", REVIEWER)


def test_gemini_blocks_a_denied_command_and_the_model_reads_why(
    gemini_cli: Path, approvals: Approvals, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "project" / "marker"
    session = run_gemini(
        tmp_path,
        monkeypatch,
        gemini_cli,
        url=approvals.url,
        token=approvals.agent_token,
        command=touch(marker),
        approvals=approvals,
        reviewer=decide_with({"verdict": "deny", "reason": REASON}),
    )
    assert not marker.exists(), session.run.describe()
    assert session.blocked() == f"A reviewer denied this call: {REASON}"
    call = approvals.only_call()
    assert (call.status, call.denial_reason, call.decided_by) == ("denied", REASON, REVIEWER)


def test_gemini_blocks_a_command_nobody_decided_and_names_where_it_waits(
    gemini_cli: Path, approvals: Approvals, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "project" / "marker"
    session = run_gemini(
        tmp_path,
        monkeypatch,
        gemini_cli,
        url=approvals.url,
        token=approvals.agent_token,
        command=touch(marker),
        wait=1,
        approvals=approvals,
        reviewer=nobody,
    )
    assert not marker.exists(), session.run.describe()
    call = approvals.only_call()
    assert call.status == "pending"
    reason = session.blocked()
    assert f"This call waits for a person's approval: {approvals.url}/calls/{call.id} ." in reason, reason


def test_gemini_blocks_the_command_when_our_server_is_down(
    gemini_cli: Path,
    db_url: str,  # noqa: F811 - the shared fixture
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with serving(db_url, tmp_path / "server", AgentRegistry(), users=False) as server:
        token, _ = tokens(server)
        url = server.url
    marker = tmp_path / "project" / "marker"
    session = run_gemini(
        tmp_path, monkeypatch, gemini_cli, url=url, token=token, command=touch(marker), wait=1, grace=1
    )
    assert not marker.exists(), session.run.describe()
    reason = session.blocked()
    assert reason.startswith(f"Blocked by approvals: approvals gave no decision in time (cannot reach {url}"), reason


def test_gemini_blocks_an_edited_command_and_the_model_reads_the_edit(
    gemini_cli: Path, approvals: Approvals, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker, edited_marker = tmp_path / "project" / "marker", tmp_path / "project" / "edited-marker"
    edited = {"command": touch(edited_marker), "description": "Make the edited marker"}
    session = run_gemini(
        tmp_path,
        monkeypatch,
        gemini_cli,
        url=approvals.url,
        token=approvals.agent_token,
        command=touch(marker),
        approvals=approvals,
        reviewer=decide_with({"verdict": "edit", "args": edited}),
    )
    assert not marker.exists() and not edited_marker.exists(), session.run.describe()
    reason = session.blocked()
    assert reason.startswith(f"A reviewer approved this call only with other input: {canonical_json(edited)}. "), reason
    call = approvals.only_call()
    assert (call.verdict, call.override_args) == ("edit", edited)


def test_gemini_blocks_the_command_when_it_redacts_the_token_unless_the_token_is_allowed(
    gemini_cli: Path, approvals: Approvals, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With environment redaction on, Gemini hands hooks no APPROVALS_TOKEN (its name matches /TOKEN/): the hook
    blocks. The installer lists the variable in `allowed`, which lets it through."""
    marker = tmp_path / "redacted" / "project" / "marker"
    redacting = {"security": {"environmentVariableRedaction": {"enabled": True}}}
    session = run_gemini(
        tmp_path / "redacted",
        monkeypatch,
        gemini_cli,
        url=approvals.url,
        token=approvals.agent_token,
        command=touch(marker),
        settings=redacting,
        token_redacted=True,
    )
    assert not marker.exists(), session.run.describe()
    assert session.blocked().startswith("Blocked by approvals: APPROVALS_TOKEN is not set"), session.blocked()
    assert approvals.calls(status=None) == []  # the hook asked nobody

    marker = tmp_path / "allowed" / "project" / "marker"
    session = run_gemini(
        tmp_path / "allowed",
        monkeypatch,
        gemini_cli,
        url=approvals.url,
        token=approvals.agent_token,
        command=touch(marker),
        approvals=approvals,
        reviewer=decide_with({"verdict": "approve"}),
        settings=redacting,
    )
    assert marker.exists(), session.run.describe()
    assert approvals.only_call().context["cwd"] == str(marker.parent)
