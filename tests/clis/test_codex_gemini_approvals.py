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
from collections.abc import Callable, Iterator, Mapping
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
from .cli_process import CliRun, make_project

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
        return self.server.call(self.server.store.calls.list_calls(status=status)).items

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
    agent = server.call(store.people.create_token("agent", role="reviewer", actor=SYSTEM, scopes=["calls:ask"]))
    server.call(store.people.create_user(REVIEWER, "pw-123456789", role="reviewer", actor=SYSTEM))
    reviewer = server.call(store.people.create_token(f"{REVIEWER}-token", role="reviewer", actor=SYSTEM, user=REVIEWER))
    return agent, reviewer


@pytest.fixture
def approvals(db_url: str, tmp_path: Path) -> Iterator[Approvals]:  # noqa: F811 - db_url is the shared fixture
    with serving(db_url, tmp_path / "server", AgentRegistry(), users=False) as server:
        yield Approvals(server, *tokens(server))


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


def with_grace(settings: Path, event: str, grace: float) -> None:
    """Add `--grace` to the command of the hook installed for `event` (the installer writes none)."""
    content = json.loads(settings.read_text())
    [group] = content["hooks"][event]
    [hook] = group["hooks"]
    hook["command"] += f" --grace {grace:g}"
    settings.write_text(json.dumps(content, indent=2))


def touch(marker: Path) -> str:
    return f"touch {shlex.quote(str(marker))}"


# -- the CLIs -----------------------------------------------------------------------------------

Api = sr.ScriptedResponses | sg.ScriptedGemini


@dataclass
class Setup:
    """The hook's: our server's URL, the token it asks with, how it is installed."""

    url: str
    token: str
    wait: float = WAIT
    grace: float | None = None
    settings: dict[str, Any] | None = None
    """More Gemini settings (merged one level deep)."""
    token_redacted: bool = False
    """Take APPROVALS_TOKEN off the list the installer lets through Gemini's redaction."""


Launch = Callable[[Path, Path, str, Mapping[str, str]], CliRun]
"""Runs the installed CLI: binary, project, prompt, more environment."""


class Cli:
    """What differs between the CLIs: how the hook is installed and the CLI run, what the model and our store see."""

    name: str
    event: str
    """The event the hook that asks is installed under."""
    tool_name: str
    """The tool name the hook reports (and the store keeps) for the shell call."""

    def binary(self) -> Path:
        raise NotImplementedError

    def scripted(self, command: str) -> Api:
        """The scripted model: it runs `command` (a call with id CALL_ID), then says it is done."""
        raise NotImplementedError

    def install(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, base_url: str, setup: Setup
    ) -> tuple[Path, Launch]:
        """Install the hook the way users do, for the model at `base_url`: the file it went into, and how to run."""
        raise NotImplementedError

    def args(self, command: str) -> dict[str, Any]:
        """The arguments stored for the shell call of `command`."""
        raise NotImplementedError

    def edited(self, command: str) -> dict[str, Any]:
        """Arguments a reviewer edits the call to, running `command` instead."""
        return self.args(command)

    def ran(self, session: Session) -> None:
        """Check the model read the command's successful run."""
        raise NotImplementedError

    def blocked(self, session: Session) -> str:
        """The reason the CLI gave the model for blocking the command (checked to be its block message)."""
        raise NotImplementedError

    def check_asked(self, call: ToolCallRow) -> None:
        """Check what else the hook told our server about the call."""


class Codex(Cli):
    name, event, tool_name = "codex", "PreToolUse", "Bash"

    def binary(self) -> Path:
        return codex.codex_binary()

    def scripted(self, command: str) -> Api:
        return sr.ScriptedResponses([sr.shell(command, call_id=CALL_ID), sr.text("Done.")])

    def install(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, base_url: str, setup: Setup
    ) -> tuple[Path, Launch]:
        assert setup.settings is None and not setup.token_redacted, "Gemini only"
        home = codex.make_codex_home(tmp_path, base_url)
        monkeypatch.setenv("CODEX_HOME", str(home))
        installed = install_hook("codex", url=setup.url, wait=setup.wait)
        assert installed.path == home / "hooks.json"

        def launch(binary: Path, project: Path, prompt: str, env: Mapping[str, str]) -> CliRun:
            return codex.run_codex(binary, project, prompt, codex_home=home, env=env)

        return installed.path, launch

    def args(self, command: str) -> dict[str, Any]:
        return {"command": command}

    def output(self, session: Session) -> str:
        """What the model read as the shell call's output."""
        assert isinstance(session.api, sr.ScriptedResponses)
        sent = [item for item in session.turns[1]["input"] if item.get("type") == "function_call_output"]
        assert [item["call_id"] for item in sent] == [CALL_ID], sent
        output = session.api.output_for(CALL_ID)
        assert output is not None
        return output

    def ran(self, session: Session) -> None:
        assert "Process exited with code 0" in self.output(session)

    def blocked(self, session: Session) -> str:
        output = self.output(session)
        prefix, suffix = "Command blocked by PreToolUse hook: ", f". Command: {session.command}"
        assert output.startswith(prefix) and output.endswith(suffix), output
        assert "hook: PreToolUse Blocked" in session.run.stderr, session.run.describe()
        return output[len(prefix) : -len(suffix)]

    def check_asked(self, call: ToolCallRow) -> None:
        assert call.tool_call_id == CALL_ID
        assert call.context["model"] == sr.MODEL_ID


class Gemini(Cli):
    name, event, tool_name = "gemini", "BeforeTool", sg.SHELL_TOOL

    def binary(self) -> Path:
        return gemini.gemini_binary()

    def scripted(self, command: str) -> Api:
        return sg.ScriptedGemini([sg.shell(command, "Make the marker", id=CALL_ID), sg.text("Done.")])

    def install(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, base_url: str, setup: Setup
    ) -> tuple[Path, Launch]:
        home = gemini.make_gemini_home(tmp_path, settings=setup.settings)
        before = json.loads((home / ".gemini" / "settings.json").read_text())
        monkeypatch.setenv("HOME", str(home))
        installed = install_hook("gemini", url=setup.url, wait=setup.wait, user=True)
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
        if setup.token_redacted:  # as if the user took the token off the list
            settings_now = json.loads(installed.path.read_text())
            settings_now["security"]["environmentVariableRedaction"]["allowed"].remove("APPROVALS_TOKEN")
            installed.path.write_text(json.dumps(settings_now))

        def launch(binary: Path, project: Path, prompt: str, env: Mapping[str, str]) -> CliRun:
            return gemini.run_gemini(binary, project, prompt, home=home, base_url=base_url, env=env)

        return installed.path, launch

    def args(self, command: str) -> dict[str, Any]:
        return {"command": command, "description": "Make the marker"}

    def edited(self, command: str) -> dict[str, Any]:
        return {"command": command, "description": "Make the edited marker"}

    def response(self, session: Session) -> dict[str, Any]:
        """The shell call's `functionResponse.response` the model read."""
        assert isinstance(session.api, sg.ScriptedGemini)
        [response] = session.api.function_responses()
        assert (response["name"], response["id"]) == (sg.SHELL_TOOL, CALL_ID)
        assert {"functionResponse": response} in session.turns[1]["contents"][-1]["parts"]
        result: dict[str, Any] = response["response"]
        return result

    def ran(self, session: Session) -> None:
        assert "error" not in self.response(session)

    def blocked(self, session: Session) -> str:
        response = self.response(session)
        assert set(response) == {"error"}, response
        prefix = "Tool execution blocked: "
        assert response["error"].startswith(prefix), response
        return str(response["error"][len(prefix) :])


CODEX, GEMINI = Codex(), Gemini()


@dataclass
class Session:
    cli: Cli
    run: CliRun
    api: Api
    command: str
    hook_command: str

    @property
    def turns(self) -> list[dict[str, Any]]:
        """The model's two turns (before and after the shell call), checked to be all it got."""
        assert self.api.errors == [], self.api.errors
        turns = self.api.turns()
        assert len(turns) == 2, (self.api.paths(), self.run.describe())
        return turns

    def ran(self) -> None:
        self.cli.ran(self)

    def blocked(self) -> str:
        return self.cli.blocked(self)


def run_cli(
    cli: Cli,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    binary: Path,
    setup: Setup,
    *,
    approvals: Approvals | None = None,
    reviewer: Reviewer = nobody,
) -> Session:
    """Install the hook, run the CLI on a model that touches `tmp_path/project/marker`, and let `reviewer` act."""
    project = make_project(tmp_path)
    command = touch(project / "marker")
    with cli.scripted(command) as api:
        path, launch = cli.install(tmp_path, monkeypatch, api.base_url, setup)
        if setup.grace is not None:
            with_grace(path, cli.event, setup.grace)
        [group] = json.loads(path.read_text())["hooks"][cli.event]
        run = run_in_thread(
            lambda: launch(binary, project, "Make the marker file.", {"APPROVALS_TOKEN": setup.token}),
            approvals,
            reviewer,
        )
    assert run.returncode == 0, run.describe()
    return Session(cli, run, api, command, group["hooks"][0]["command"])


@pytest.fixture(params=[CODEX, GEMINI], ids=lambda cli: cli.name)
def cli(request: pytest.FixtureRequest) -> Cli:
    chosen: Cli = request.param
    return chosen


@pytest.fixture
def binary(cli: Cli) -> Path:
    return cli.binary()  # first, so a missing CLI skips before the server starts


Ask = Callable[..., Session]
"""Runs the CLI, its hook asking `approvals`, while a reviewer acts: `ask(reviewer, **more_setup)`."""


@pytest.fixture
def ask(cli: Cli, binary: Path, approvals: Approvals, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Ask:
    def run(reviewer: Reviewer, **more: Any) -> Session:
        setup = Setup(approvals.url, approvals.agent_token, **more)
        return run_cli(cli, tmp_path, monkeypatch, binary, setup, approvals=approvals, reviewer=reviewer)

    return run


@pytest.fixture
def gemini_binary() -> Path:
    return GEMINI.binary()


# -- each CLI -----------------------------------------------------------------------------------


def test_runs_the_command_a_reviewer_approves(cli: Cli, ask: Ask, approvals: Approvals, tmp_path: Path) -> None:
    marker = tmp_path / "project" / "marker"
    session = ask(decide_with({"verdict": "approve"}))
    assert marker.exists(), session.run.describe()
    session.ran()
    assert f" hook {cli.name} --wait 20 --url " in session.hook_command
    call = approvals.only_call()
    assert (call.tool_name, call.args) == (cli.tool_name, cli.args(touch(marker)))
    cli.check_asked(call)
    assert call.context["cwd"] == str(tmp_path / "project")
    assert call.context["hook_event_name"] == cli.event
    # Handed out, run, and reported by the after-tool hook the installer adds (PostToolUse, AfterTool).
    assert (call.status, call.verdict, call.decided_by) == ("succeeded", "approve", REVIEWER)


def test_blocks_a_denied_command_and_the_model_reads_why(
    cli: Cli, ask: Ask, approvals: Approvals, tmp_path: Path
) -> None:
    marker = tmp_path / "project" / "marker"
    session = ask(decide_with({"verdict": "deny", "reason": REASON}))
    assert not marker.exists(), session.run.describe()
    assert session.blocked() == f"A reviewer denied this call: {REASON}"
    call = approvals.only_call()
    assert (call.status, call.denial_reason, call.decided_by) == ("denied", REASON, REVIEWER)


def test_blocks_a_command_nobody_decided_and_names_where_it_waits(
    cli: Cli, ask: Ask, approvals: Approvals, tmp_path: Path
) -> None:
    marker = tmp_path / "project" / "marker"
    session = ask(nobody, wait=1)
    assert not marker.exists(), session.run.describe()
    call = approvals.only_call()
    assert call.status == "pending"  # still in the inbox
    reason = session.blocked()
    assert f"This call waits for a person's approval: {approvals.url}/calls/{call.id} ." in reason, reason


def test_blocks_the_command_when_our_server_is_down(
    cli: Cli,
    binary: Path,
    db_url: str,  # noqa: F811 - the shared fixture
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with serving(db_url, tmp_path / "server", AgentRegistry(), users=False) as server:
        token, _ = tokens(server)
        url = server.url
    # Stopped: nothing listens on its address now, but the hook has a real token for it.
    marker = tmp_path / "project" / "marker"
    session = run_cli(cli, tmp_path, monkeypatch, binary, Setup(url, token, wait=1, grace=1))
    assert not marker.exists(), session.run.describe()
    reason = session.blocked()
    # never reached: blocked after the grace (1 s), not the wait plus the grace
    told = f"Blocked by approvals: approvals could not be reached within 1 s (cannot reach {url}"
    assert reason.startswith(told), reason


def test_blocks_an_edited_command_and_the_model_reads_the_edit(
    cli: Cli, ask: Ask, approvals: Approvals, tmp_path: Path
) -> None:
    marker, edited_marker = tmp_path / "project" / "marker", tmp_path / "project" / "edited-marker"
    edited = cli.edited(touch(edited_marker))
    session = ask(decide_with({"verdict": "edit", "args": edited}))
    assert not marker.exists() and not edited_marker.exists(), session.run.describe()
    reason = session.blocked()
    assert reason.startswith(f"A reviewer approved this call only with other input: {canonical_json(edited)}. "), reason
    call = approvals.only_call()
    assert (call.verdict, call.override_args, call.args) == ("edit", edited, cli.args(touch(marker)))


# -- Gemini only --------------------------------------------------------------------------------


def test_gemini_blocks_the_command_when_it_redacts_the_token_unless_the_token_is_allowed(
    gemini_binary: Path, approvals: Approvals, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With environment redaction on, Gemini hands hooks no APPROVALS_TOKEN (its name matches /TOKEN/): the hook
    blocks. The installer lists the variable in `allowed`, which lets it through."""
    marker = tmp_path / "redacted" / "project" / "marker"
    redacting = {"security": {"environmentVariableRedaction": {"enabled": True}}}
    setup = Setup(approvals.url, approvals.agent_token, settings=redacting, token_redacted=True)
    session = run_cli(GEMINI, tmp_path / "redacted", monkeypatch, gemini_binary, setup)
    assert not marker.exists(), session.run.describe()
    assert session.blocked().startswith("Blocked by approvals: APPROVALS_TOKEN is not set"), session.blocked()
    assert approvals.calls(status=None) == []  # the hook asked nobody

    marker = tmp_path / "allowed" / "project" / "marker"
    setup = Setup(approvals.url, approvals.agent_token, settings=redacting)
    allowed = decide_with({"verdict": "approve"})
    session = run_cli(
        GEMINI, tmp_path / "allowed", monkeypatch, gemini_binary, setup, approvals=approvals, reviewer=allowed
    )
    assert marker.exists(), session.run.describe()
    assert approvals.only_call().context["cwd"] == str(marker.parent)
