"""The real Claude Code CLI under standing rules: a command the rules allow runs with nobody asked, one they deny
never runs and the model reads the rule's reason. The same hook and server as test_claude_code_approvals.py."""

from __future__ import annotations

from pathlib import Path

from approvals.policy import load_rules
from approvals.store import Actor

from ..live_approvals import Approvals
from ..store.conftest import db_url, postgres_url, sqlite_template  # noqa: F401 - fixtures shared with the store tests
from .scripted_anthropic import ScriptedAnthropic, text
from .test_claude_code_approvals import (  # noqa: F401 - a fixture and helpers shared with the approvals tests
    approvals,
    claude,
    content_text,
    hooked_project,
    result_in_next_turn,
    tool_use_id,
    touch,
)

ADMIN = Actor("ada", "admin")
RULES = """
rules:
  - name: touch-in-scratch
    engine: claude_code
    tool: Bash
    when: args.command.startsWith('touch ') && args.command.contains('/scratch-')
    effect: allow
  - name: no-touching-locked
    engine: claude_code
    tool: Bash
    when: args.command.contains('/locked-')
    effect: deny
    reason: Locked files are not to be touched.
"""


def test_a_command_the_rules_allow_runs_with_nobody_asked(approvals: Approvals, tmp_path: Path) -> None:  # noqa: F811
    approvals.server.call(approvals.server.store.rules.apply_rules(load_rules(RULES), actor=ADMIN))
    project = hooked_project(tmp_path, approvals.url, wait=30.0)
    marker = project / "scratch-file"
    with ScriptedAnthropic([touch(marker), text("Done.")]) as api:
        run = claude(project, api, approvals.asking_token)
    assert run.returncode == 0, run.describe()
    assert marker.exists(), run.describe()
    [stored] = approvals.calls()
    assert (stored.status, stored.decided_by, stored.rule_version) == ("succeeded", "rule:touch-in-scratch", 1)
    assert approvals.call_actions(stored.run_id) == [
        "call.requested",
        "call.approved",
        "call.executing",
        "call.succeeded",
    ]
    assert approvals.audit_verifies()


def test_a_command_the_rules_deny_never_runs_and_the_model_reads_why(
    approvals: Approvals,  # noqa: F811 - the shared fixture
    tmp_path: Path,
) -> None:
    approvals.server.call(approvals.server.store.rules.apply_rules(load_rules(RULES), actor=ADMIN))
    project = hooked_project(tmp_path, approvals.url, wait=30.0)
    marker = project / "locked-file"
    call_bash = touch(marker)
    with ScriptedAnthropic([call_bash, text("Understood.")]) as api:
        run = claude(project, api, approvals.asking_token)
    assert run.returncode == 0, run.describe()
    assert not marker.exists()
    refusal = result_in_next_turn(api, tool_use_id(call_bash))
    assert refusal["is_error"] is True and "Locked files are not to be touched." in content_text(refusal)
    [stored] = approvals.calls()
    assert (stored.status, stored.decided_by) == ("denied", "rule:no-touching-locked")
