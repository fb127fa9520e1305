"""The real Codex and Gemini CLIs, driven by scripted models: a pre-tool command hook decides
whether the model's shell command runs.

Each test scripts one shell call (`touch <marker>`) then a final answer, installs a tiny hook
(a Python script that records its stdin and prints a fixed answer, or exits with a code), and
checks whether the marker exists and what the model was told. Skipped unless
`APPROVALS_CLIS_DIR` names the folder tests/clis/install.sh prints.

What these tests pin down, per CLI (see tests/clis/codex.py and gemini.py for the details):

| hook does                          | Codex 0.169.0               | Gemini CLI 0.61.0          |
| ---------------------------------- | --------------------------- | -------------------------- |
| prints `{}`                        | runs                        | runs                       |
| prints its deny JSON, reason R     | blocked, model reads R      | blocked, model reads R     |
| exits 2, R on stderr               | blocked, model reads R      | blocked, model reads R     |
| exits 2, prints nothing            | runs (hook "Failed")        | runs                       |
| prints malformed JSON              | runs (hook "Failed")        | runs (text = a message)    |
| outlives its timeout               | runs                        | runs                       |
"""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from . import codex, gemini
from . import scripted_gemini as sg
from . import scripted_responses as sr

REASON = "not today"


@dataclass
class Hook:
    """A hook script in tmp: what it prints and how it exits; it appends each stdin to `log`."""

    command: str
    log: Path

    def inputs(self) -> list[dict[str, Any]]:
        """The JSON each run of the hook got on stdin."""
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]


def write_hook(root: Path, *, stdout: str = "", stderr: str = "", exit_code: int = 0, sleep: float = 0) -> Hook:
    script, log = root / "hook.py", root / "hook-input.jsonl"
    script.write_text(
        "import sys, time\n"
        "data = sys.stdin.read()\n"
        f"with open({str(log)!r}, 'a') as f:\n"
        "    f.write(data.strip() + '\\n')\n"
        f"time.sleep({sleep!r})\n"
        f"sys.stdout.write({stdout!r})\n"
        f"sys.stderr.write({stderr!r})\n"
        f"sys.exit({exit_code!r})\n"
    )
    return Hook(f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}", log)


@dataclass(frozen=True)
class Case:
    """A hook behaviour and what it should lead to."""

    stdout: str = ""
    stderr: str = ""
    exit_code: int = 0
    sleep: float = 0
    runs: bool = True
    reason: str | None = None
    """Text the model must read in the call's output when the call is blocked."""


CODEX_CASES = {
    "allow": Case(stdout="{}"),
    "deny": Case(stdout=json.dumps(codex.deny(REASON)), runs=False, reason=REASON),
    "legacy-block": Case(stdout=json.dumps({"decision": "block", "reason": REASON}), runs=False, reason=REASON),
    "exit-2-stderr": Case(stderr="no shell for you", exit_code=2, runs=False, reason="no shell for you"),
    "exit-2-silent": Case(exit_code=2),  # fails open: Codex wants a reason on stderr
    "exit-1-stderr": Case(stderr="oops", exit_code=1),
    "malformed-json": Case(stdout='{"hookSpecificOutput": '),
    "plain-text": Case(stdout="not JSON at all"),
    "unknown-field": Case(stdout=json.dumps({**codex.deny(REASON), "extra": 1})),  # fails open
    "explicit-allow": Case(
        stdout=json.dumps({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow"}})
    ),
}

GEMINI_CASES = {
    "allow": Case(stdout="{}"),
    "deny": Case(stdout=json.dumps(gemini.deny(REASON)), runs=False, reason=REASON),
    "block": Case(stdout=json.dumps({"decision": "block", "reason": REASON}), runs=False, reason=REASON),
    "exit-2-stderr": Case(stderr="no shell for you", exit_code=2, runs=False, reason="no shell for you"),
    "exit-3-stderr": Case(stderr="three", exit_code=3, runs=False, reason="three"),
    "exit-2-silent": Case(exit_code=2),
    "exit-2-json-allow": Case(stdout="{}", stderr="no", exit_code=2),  # JSON on stdout wins over the exit code
    "exit-1-stderr": Case(stderr="oops", exit_code=1),
    "malformed-json": Case(stdout='{"decision": '),
    "plain-text": Case(stdout="not JSON at all"),
    "claude-style-deny": Case(stdout=json.dumps(codex.deny(REASON))),  # not Gemini's format: ignored
}


# -- Codex --------------------------------------------------------------------------------------


def run_codex_case(tmp_path: Path, case: Case, *, timeout: float = 30, flags: tuple[str, ...] | None = None) -> None:
    binary = codex.codex_binary()
    hook = write_hook(tmp_path, stdout=case.stdout, stderr=case.stderr, exit_code=case.exit_code, sleep=case.sleep)
    project = codex.make_project(tmp_path)
    marker = project / "marker"
    command = f"touch {shlex.quote(str(marker))}"
    call_id = "call_scripted_touch"
    with sr.ScriptedResponses([sr.shell(command, call_id=call_id), sr.text("Done.")]) as api:
        home = codex.make_codex_home(
            tmp_path,
            api.base_url,
            hooks={"PreToolUse": [codex.matcher("Bash", codex.command_hook(hook.command, timeout=timeout))]},
        )
        if flags is None:
            run = codex.run_codex(binary, project, "Make the marker file.", codex_home=home)
        else:
            run = codex.run_process(
                [str(binary), "exec", *flags, "--", "Make the marker file."],
                cwd=project,
                env=codex.codex_env(home),
                timeout=codex.DEFAULT_TIMEOUT,
            )
    assert run.returncode == 0, run.describe()
    assert api.errors == [], api.errors
    turns = api.turns()
    assert len(turns) == 2, (api.paths(), run.describe())
    assert marker.exists() == case.runs, run.describe()
    if flags is None:
        [seen] = hook.inputs()
        assert seen["tool_use_id"] == call_id
    output = api.output_for(call_id)
    assert output is not None, run.describe()
    # The second turn carries the call's output back to the model.
    assert any(
        item.get("call_id") == call_id for item in turns[1]["input"] if item.get("type") == "function_call_output"
    )
    if case.runs:
        assert "Process exited with code 0" in output, output
    else:
        assert case.reason is not None
        assert output == f"Command blocked by PreToolUse hook: {case.reason}. Command: {command}", output
        assert "hook: PreToolUse Blocked" in run.stderr


@pytest.mark.parametrize("name", CODEX_CASES)
def test_codex_pre_tool_use_hook_decides_whether_the_command_runs(tmp_path: Path, name: str) -> None:
    run_codex_case(tmp_path, CODEX_CASES[name])


def test_codex_hook_input_names_the_bash_tool_and_the_call_id(tmp_path: Path) -> None:
    binary = codex.codex_binary()
    hook = write_hook(tmp_path, stdout="{}")
    project = codex.make_project(tmp_path)
    with sr.ScriptedResponses([sr.shell("echo hello", call_id="call_abc"), sr.text("Done.")]) as api:
        home = codex.make_codex_home(
            tmp_path, api.base_url, hooks={"PreToolUse": [codex.matcher("Bash", codex.command_hook(hook.command))]}
        )
        run = codex.run_codex(binary, project, "Say hello.", codex_home=home)
    assert run.returncode == 0, run.describe()
    assert "exec_command" in sr.offered_tools(api.turns()[0])  # the shell tool the model calls
    [seen] = hook.inputs()
    assert seen["hook_event_name"] == "PreToolUse"
    assert seen["tool_name"] == "Bash"
    assert seen["tool_input"] == {"command": "echo hello"}
    assert seen["tool_use_id"] == "call_abc"
    assert seen["cwd"] == str(project)
    assert seen["permission_mode"] == "bypassPermissions"
    assert seen["model"] == sr.MODEL_ID
    assert {"session_id", "turn_id", "transcript_path"} <= seen.keys()
    assert "hello" in (api.output_for("call_abc") or "")


def test_codex_hook_that_times_out_lets_the_command_run(tmp_path: Path) -> None:
    run_codex_case(tmp_path, Case(stdout=json.dumps(codex.deny(REASON)), sleep=4), timeout=1)


def test_codex_skips_untrusted_hooks_without_the_bypass_flag(tmp_path: Path) -> None:
    flags = ("--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox")
    run_codex_case(tmp_path, Case(stdout=json.dumps(codex.deny(REASON))), flags=flags)
    assert not (tmp_path / "hook-input.jsonl").exists()  # never ran


# -- Gemini -------------------------------------------------------------------------------------


def run_gemini_case(tmp_path: Path, case: Case, *, timeout_ms: int = 30_000) -> Hook:
    binary = gemini.gemini_binary()
    hook = write_hook(tmp_path, stdout=case.stdout, stderr=case.stderr, exit_code=case.exit_code, sleep=case.sleep)
    project = gemini.make_project(tmp_path)
    marker = project / "marker"
    command = f"touch {shlex.quote(str(marker))}"
    home = gemini.make_gemini_home(
        tmp_path,
        hooks={"BeforeTool": [gemini.matcher(sg.SHELL_TOOL, gemini.command_hook(hook.command, timeout_ms=timeout_ms))]},
    )
    with sg.ScriptedGemini([sg.shell(command, id="call_touch"), sg.text("Done.")]) as api:
        run = gemini.run_gemini(binary, project, "Make the marker file.", home=home, base_url=api.base_url)
    assert run.returncode == 0, run.describe()
    assert api.errors == [], api.errors
    turns = api.turns()
    assert len(turns) == 2, (api.paths(), run.describe())
    assert marker.exists() == case.runs, run.describe()
    [response] = api.function_responses()
    assert response["name"] == sg.SHELL_TOOL
    assert response["id"] == "call_touch"  # the CLI echoes the model's call id
    # The second turn carries the call's response back to the model.
    assert {"functionResponse": response} in turns[1]["contents"][-1]["parts"]
    if case.runs:
        assert "error" not in response["response"], response
    else:
        assert response["response"] == {"error": f"Tool execution blocked: {case.reason}"}, response
    return hook


@pytest.mark.parametrize("name", GEMINI_CASES)
def test_gemini_before_tool_hook_decides_whether_the_command_runs(tmp_path: Path, name: str) -> None:
    run_gemini_case(tmp_path, GEMINI_CASES[name])


def test_gemini_hook_input_names_the_shell_tool_but_no_call_id(tmp_path: Path) -> None:
    hook = run_gemini_case(tmp_path, GEMINI_CASES["allow"])
    [seen] = hook.inputs()
    assert seen["hook_event_name"] == "BeforeTool"
    assert seen["tool_name"] == "run_shell_command"
    assert seen["tool_input"]["command"].startswith("touch ")
    assert seen["cwd"] == str(tmp_path / "project")
    assert {"session_id", "transcript_path", "timestamp"} <= seen.keys()
    assert not any("id" in key for key in seen if key != "session_id")  # no tool-call id at all


def test_gemini_hook_that_times_out_lets_the_command_run(tmp_path: Path) -> None:
    run_gemini_case(tmp_path, Case(stdout=json.dumps(gemini.deny(REASON)), sleep=3), timeout_ms=1000)
