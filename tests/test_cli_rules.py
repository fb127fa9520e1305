"""`approvals rules ...` and `approvals users groups`, run in-process against real SQLite files.

Rules files go in as a CI job would apply them: the diff printed, idempotent, a broken file
refused whole with every problem named, `--check` for drift, `export` read back unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from typer.testing import CliRunner

from approvals.calls import CallRequest, validate_request
from approvals.cli import app, with_store
from approvals.store import Actor, Store
from approvals.store.models import PolicyRuleRow

from .databases import DATABASES
from .store.conftest import BACKENDS

runner = CliRunner()
EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "rules"
SUPPORT = (EXAMPLES / "support.yaml").read_text()
SMALL = "when: double(args.amount) < 50.0"


@pytest.fixture
def db(tmp_path: Path) -> str:
    """A migrated SQLite file of the test's own: a copy of the process's template (tests/databases.py), not
    a migration per test (~0.5 s); test_cli.py's test_db_upgrade_and_current runs `approvals db upgrade`."""
    return DATABASES.fresh("sqlite", tmp_path)[0]


@pytest.fixture(params=BACKENDS)
def any_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A migrated database of each backend: SQLite, and a throwaway PostgreSQL database (a copy of the
    session's migrated template)."""
    if request.param == "sqlite":
        yield request.getfixturevalue("db")
        return
    url, _ = DATABASES.fresh("postgresql", tmp_path)
    yield url
    DATABASES.release(url)


def run(db: str, *args: str, stdin: str | None = None) -> tuple[int, str]:
    result = runner.invoke(app, [*args, "--database-url", db], input=stdin)
    return result.exit_code, result.output


def rules_file(tmp_path: Path, text: str, name: str = "rules.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def stored_versions(db: str) -> int:
    async def count(store: Store) -> int:
        async with store.db.read() as session:
            return int(await session.scalar(select(func.count()).select_from(PolicyRuleRow)) or 0)

    return with_store(db, count)


def test_apply_prints_the_diff_and_applying_again_changes_nothing(db: str, tmp_path: Path) -> None:
    path = rules_file(tmp_path, SUPPORT)
    code, out = run(db, "rules", "apply", path)
    assert code == 0, out
    assert out.splitlines() == [
        "+ small-refunds (allow)",
        "+ big-refunds (ask)",
        "+ no-deleting-customers (deny)",
        "+ outside-email (ask)",
    ]
    code, out = run(db, "rules", "apply", path)
    assert (code, out) == (0, "no changes\n")
    assert stored_versions(db) == 4


def test_a_changed_condition_is_one_changed_rule_at_version_2(db: str, tmp_path: Path) -> None:
    assert run(db, "rules", "apply", rules_file(tmp_path, SUPPORT))[0] == 0
    changed = rules_file(tmp_path, SUPPORT.replace(SMALL, "when: double(args.amount) < 80.0"), "changed.yaml")
    code, out = run(db, "rules", "apply", changed)
    assert code == 0, out
    assert out.splitlines() == [
        "~ small-refunds",
        "    when: 'double(args.amount) < 50.0' -> 'double(args.amount) < 80.0'",
    ]
    assert [line[0] for line in out.splitlines() if not line.startswith(" ")] == ["~"]
    assert with_store(db, lambda store: store.rules.get_rule("small-refunds")).version == 2
    code, out = run(db, "rules", "history", "small-refunds")
    assert code == 0, out
    newest, oldest = out.splitlines()
    assert (
        newest.startswith("v2 ")
        and "changed when: 'double(args.amount) < 50.0' -> 'double(args.amount) < 80.0'" in newest
    )
    assert oldest.startswith("v1 ") and "system" in oldest and "created (standing)" in oldest


def test_a_broken_file_lists_every_problem_and_changes_nothing(db: str, tmp_path: Path) -> None:
    assert run(db, "rules", "apply", rules_file(tmp_path, SUPPORT))[0] == 0
    broken = (
        SUPPORT.replace(SMALL, "when: double(args.amount) <")
        .replace("approvals: 2", "approvals: 0")
        .replace("effect: deny\n", "effect: deny\n    colour: red\n")
        + "\n  - name: Bad Name\n    effect: allow\n  - name: big-refunds\n    effect: allow\n"
    )
    path = rules_file(tmp_path, broken, "broken.yaml")
    code, out = run(db, "rules", "apply", path, "--prune")
    assert code == 2, out
    lines = out.splitlines()
    assert lines[0] == f"error: {path} has errors, so nothing was changed:"
    problems = [line for line in lines if line.startswith("  - ")]
    assert len(problems) == 5, out
    for expected in (
        "rule 1 (small-refunds): when: Syntax error",
        "rule 2 (big-refunds): approvals: Input should be greater than or equal to 1",
        "rule 3 (no-deleting-customers): colour: unknown key",
        "rule 5 (Bad Name): name: use 1 to 100 lowercase letters",
        "rule 6 (big-refunds): the name 'big-refunds' is used by rule 2 too",
    ):
        assert any(problem.startswith(f"  - {expected}") for problem in problems), (expected, out)
    assert stored_versions(db) == 4  # not a row more
    assert run(db, "rules", "apply", rules_file(tmp_path, SUPPORT))[1] == "no changes\n"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("rules:\n  - name: a\n   effect: allow\n", "not valid YAML at line 3, column"),
        ("rules:\n  - name: a\n    effect: allow\n    effect: deny\n", "the key 'effect' is written twice"),
        ("rules: 7\n", "'rules' must be a list of rules"),
    ],
)
def test_a_file_that_is_no_rules_file_is_refused(db: str, tmp_path: Path, text: str, problem: str) -> None:
    code, out = run(db, "rules", "apply", rules_file(tmp_path, text))
    assert code == 2 and problem in out, out
    assert stored_versions(db) == 0


def test_a_missing_file_is_a_usage_error(db: str, tmp_path: Path) -> None:
    code, out = run(db, "rules", "apply", str(tmp_path / "nope.yaml"))
    assert code == 2 and "cannot read" in out


def test_check_exits_1_when_the_database_differs_from_the_file(db: str, tmp_path: Path) -> None:
    path = rules_file(tmp_path, SUPPORT)
    code, out = run(db, "rules", "apply", path, "--check")
    assert code == 1, out
    assert "+ small-refunds (allow)" in out and f"the standing rules differ from {path}" in out
    assert stored_versions(db) == 0  # a check writes nothing
    assert run(db, "rules", "apply", path)[0] == 0
    assert run(db, "rules", "apply", path, "--check") == (0, "no changes\n")
    fewer = rules_file(tmp_path, SUPPORT.split("  - name: outside-email")[0], "fewer.yaml")
    assert run(db, "rules", "apply", fewer, "--check")[0] == 0  # without --prune, extra rules are no drift
    code, out = run(db, "rules", "apply", fewer, "--check", "--prune")
    assert code == 1 and "- outside-email" in out
    code, out = run(
        db, "rules", "apply", rules_file(tmp_path, "rules: [{name: Bad, effect: allow}]", "bad.yaml"), "--check"
    )
    assert code == 2, out  # a broken file is not drift


def test_dry_run_prints_the_diff_and_changes_nothing(db: str, tmp_path: Path) -> None:
    code, out = run(db, "rules", "apply", rules_file(tmp_path, SUPPORT), "--dry-run")
    assert code == 0
    assert out.splitlines()[0] == "+ small-refunds (allow)" and out.splitlines()[-1] == "(dry run: nothing was changed)"
    assert stored_versions(db) == 0


def test_prune_removes_what_the_file_no_longer_holds(db: str, tmp_path: Path) -> None:
    assert run(db, "rules", "apply", rules_file(tmp_path, SUPPORT))[0] == 0
    fewer = rules_file(tmp_path, SUPPORT.split("  - name: no-deleting-customers")[0], "fewer.yaml")
    assert run(db, "rules", "apply", fewer) == (0, "no changes\n")
    code, out = run(db, "rules", "apply", fewer, "--prune")
    assert code == 0 and out.splitlines() == ["- no-deleting-customers", "- outside-email"]
    assert [rule.name for rule in with_store(db, lambda store: store.rules.list_rules())] == [
        "big-refunds",
        "small-refunds",
    ]


def test_a_file_from_standard_input(db: str) -> None:
    code, out = run(db, "rules", "apply", "-", stdin=SUPPORT)
    assert code == 0 and "+ outside-email (ask)" in out
    code, out = run(db, "rules", "apply", "-", "--check", stdin=SUPPORT)
    assert (code, out) == (0, "no changes\n")


EVERY_FIELD = """
rules:
  - name: wires
    description: "Wires: two people, \u00e9 and \u2713, 'quoted'"
    engine: [gate, native]
    agent: [billing-*]
    tool: [wire, wire_*]
    when: |
      has(args.amount) &&
      double(args.amount) > 1000.0
    effect: ask
    reason: Wires move real money.
    approvals: 2
    groups: [treasury, finance]
    ttl: 90m
    expires_at: 2031-06-01T12:00:00+02:00
  - name: this-session
    session: nightly-42
    tool: send_email
    effect: allow
  - name: off
    tool: x
    effect: deny
    reason: not yet
    enabled: false
"""


def test_export_is_read_back_with_no_changes(db: str, tmp_path: Path) -> None:
    assert run(db, "rules", "apply", rules_file(tmp_path, SUPPORT + EVERY_FIELD.replace("rules:\n", "")))[0] == 0
    assert run(db, "rules", "disable", "small-refunds")[0] == 0
    exported = tmp_path / "exported.yaml"
    code, out = run(db, "rules", "export", str(exported))
    assert code == 0 and "wrote 7 rules" in out
    code, printed = run(db, "rules", "export")
    assert code == 0 and printed == exported.read_text()
    assert run(db, "rules", "apply", str(exported), "--prune", "--check") == (0, "no changes\n")
    assert run(db, "rules", "apply", str(exported), "--prune") == (0, "no changes\n")
    fresh = f"sqlite:///{tmp_path / 'fresh.db'}"
    assert runner.invoke(app, ["db", "upgrade", "--database-url", fresh]).exit_code == 0
    assert run(fresh, "rules", "apply", str(exported))[0] == 0
    assert run(fresh, "rules", "export")[1] == printed  # another database, the same rules


def test_export_of_no_rules_is_an_empty_rules_file(db: str) -> None:
    code, out = run(db, "rules", "export")
    assert (code, out) == (0, "rules: []\n")


def test_list_shows_each_rule_with_its_flags(db: str, tmp_path: Path) -> None:
    code, out = run(db, "rules", "list")
    assert (code, out) == (0, "no rules\n")
    shadowed = "  - name: all-refunds-ask\n    tool: refund\n    effect: ask\n    approvals: 3\n"
    assert run(db, "rules", "apply", rules_file(tmp_path, SUPPORT + shadowed))[0] == 0
    assert run(db, "rules", "disable", "outside-email")[0] == 0
    code, out = run(db, "rules", "list")
    assert code == 0, out
    header, *rows = out.splitlines()
    assert header.split() == [
        "name", "effect", "tool", "condition", "version", "enabled", "kind", "author", "expires", "flags"
    ]  # fmt: skip
    by_name = {row.split()[0]: row for row in rows}
    assert list(by_name) == [
        "all-refunds-ask",
        "big-refunds",
        "no-deleting-customers",
        "outside-email",
        "small-refunds",
    ]
    assert "ask 2 finance 4h" in by_name["big-refunds"] and "double(args.amount) >= 500.0" in by_name["big-refunds"]
    assert "nobody can approve: no user is in finance" in by_name["big-refunds"]
    assert "shadowed by all-refunds-ask (ask)" in by_name["big-refunds"]
    assert "shadowed by all-refunds-ask (ask)" in by_name["small-refunds"]
    assert " always " in by_name["no-deleting-customers"] and by_name["no-deleting-customers"].endswith(" -")
    assert " no " in by_name["outside-email"] and " 2 " in by_name["outside-email"]  # disabled: version 2
    assert all(" standing " in row and " system " in row for row in rows)
    assert run(db, "users", "add", "finn", "--group", "finance")[0] == 0
    assert "nobody can approve" not in run(db, "rules", "list")[1]
    code, out = run(db, "rules", "list", "--kind", "remembered")
    assert (code, out) == (0, "no rules\n")


def test_enable_disable_and_delete_keep_the_history(db: str, tmp_path: Path) -> None:
    assert run(db, "rules", "apply", rules_file(tmp_path, SUPPORT))[0] == 0
    assert run(db, "rules", "disable", "small-refunds") == (0, "disabled small-refunds (version 2)\n")
    assert run(db, "rules", "disable", "small-refunds") == (0, "disabled small-refunds (version 2)\n")  # already
    assert run(db, "rules", "enable", "small-refunds") == (0, "enabled small-refunds (version 3)\n")
    assert run(db, "rules", "delete", "small-refunds") == (0, "deleted small-refunds (version 4)\n")
    code, out = run(db, "rules", "history", "small-refunds")
    assert code == 0
    assert [line.split()[0] for line in out.splitlines()] == ["v4", "v3", "v2", "v1"]
    assert [line.split()[4] for line in out.splitlines()] == ["deleted", "enabled", "disabled", "created"]
    for command in ("delete", "enable", "disable"):
        code, out = run(db, "rules", command, "small-refunds")
        assert code == 1 and "No rule 'small-refunds'" in out
    code, out = run(db, "rules", "history", "nothing")
    assert code == 1 and "No rule 'nothing'" in out
    code, out = run(db, "rules", "apply", rules_file(tmp_path, SUPPORT))
    assert code == 0 and out.splitlines() == ["+ small-refunds (allow)"]  # back, as version 5
    assert with_store(db, lambda store: store.rules.get_rule("small-refunds")).version == 5


async def ask_calls(store: Store) -> None:
    service = Actor("support-app", "reviewer", person=False)
    for tool, args in (("refund", {"amount": 20}), ("refund", {"amount": 900}), ("send_email", {"to": "a@b.example"})):
        request = CallRequest(engine="gate", source="support-app", session_id="s1", tool_name=tool, args=args)
        await store.calls.request_call(validate_request(request), actor=service)


def test_dry_run_shows_what_a_rule_would_have_decided_beside_what_happened(db: str, tmp_path: Path) -> None:
    with_store(db, ask_calls)  # no rules yet: every call asked a person
    proposal = rules_file(tmp_path, SUPPORT.split("  - name: big-refunds")[0], "small.yaml")
    code, out = run(db, "rules", "dry-run", proposal, "--limit", "10")
    assert code == 0, out
    summary, header, *rows = out.splitlines()
    assert summary == "small-refunds: 3 calls, 1 matched, 0 could not be evaluated"
    assert cells(header) == ["when", "call", "agent", "tool", "args", "happened", "rule alone", "with the rules"]
    by_args = {cells(row)[4]: cells(row)[3:] for row in rows}
    assert by_args == {
        '{"amount": 20}': ["refund", '{"amount": 20}', "pending", "allow", "allow by small-refunds"],
        '{"amount": 900}': ["refund", '{"amount": 900}', "pending", "-", "asks as its tool says"],
        '{"to": "a@b.example"}': ["send_email", '{"to": "a@b.example"}', "pending", "-", "asks as its tool says"],
    }
    assert stored_versions(db) == 0  # nothing saved

    assert run(db, "rules", "apply", rules_file(tmp_path, SUPPORT))[0] == 0
    assert run(db, "rules", "disable", "big-refunds")[0] == 0
    code, out = run(db, "rules", "dry-run", "big-refunds", "--limit", "2")
    assert code == 0, out
    summary, _, *rows = out.splitlines()
    assert summary == "big-refunds: 2 calls, 1 matched, 0 could not be evaluated"  # tried as if enabled
    assert [cells(row)[-2:] for row in rows] == [
        ["-", "ask by outside-email"],
        ["ask 2 from finance", "ask 2 from finance by big-refunds"],
    ]
    code, out = run(db, "rules", "dry-run", "no-such-rule")
    assert code == 1 and "No rule 'no-such-rule'" in out
    code, out = run(db, "rules", "dry-run", "big-refunds", "--limit", "0")
    assert code == 2


def test_a_condition_that_fails_shows_in_the_dry_run(db: str, tmp_path: Path) -> None:
    with_store(db, ask_calls)
    proposal = rules_file(
        tmp_path, "rules:\n  - {name: eu, tool: refund, when: \"args.region == 'eu'\", effect: allow}\n"
    )
    code, out = run(db, "rules", "dry-run", proposal)
    assert code == 0, out
    assert out.splitlines()[0] == "eu: 3 calls, 2 matched, 2 could not be evaluated"
    assert [cells(row)[-2:] for row in out.splitlines()[2:]] == [
        ["-", "asks as its tool says"],
        ["ask (cannot evaluate)", "ask (cannot evaluate) by eu"],
        ["ask (cannot evaluate)", "ask (cannot evaluate) by eu"],
    ]


def cells(row: str) -> list[str]:
    """A table row's cells: columns are two spaces apart at least."""
    return re.split(r"\s{2,}", row.strip())


def groups_of(db: str, username: str) -> Any:
    return with_store(db, lambda store: store.people.get_user(username)).groups


def test_users_groups_shown_set_added_and_removed(db: str) -> None:
    code, out = run(db, "users", "add", "finn", "--group", "finance", "--group", "ops")
    assert code == 0 and out.startswith("added finn (reviewer, groups finance, ops); password: ")
    assert run(db, "users", "groups", "finn") == (0, "finn: finance, ops\n")
    assert run(db, "users", "groups", "finn", "--add", "treasury", "--remove", "ops") == (
        0,
        "finn: finance, treasury\n",
    )
    assert run(db, "users", "groups", "finn", "--add", "finance") == (0, "finn: finance, treasury\n")  # already in
    assert run(db, "users", "groups", "finn", "--set", "support, legal") == (0, "finn: legal, support\n")
    assert groups_of(db, "finn") == ["legal", "support"]
    assert run(db, "users", "groups", "finn", "--set", "") == (0, "finn: no groups\n")
    assert not groups_of(db, "finn")
    code, out = run(db, "users", "list")
    assert code == 0 and out.split() == ["finn", "reviewer", "active", "-", "-"]
    assert run(db, "users", "groups", "finn", "--add", "a", "--add", "b")[0] == 0
    code, out = run(db, "users", "list")
    assert out.split() == ["finn", "reviewer", "active", "a,b", "-"]


def test_users_groups_errors_are_clear_and_change_nothing(db: str) -> None:
    assert run(db, "users", "add", "finn", "--group", "finance")[0] == 0
    code, out = run(db, "users", "groups", "finn", "--remove", "ops")
    assert code == 1 and "finn is not in 'ops'; their groups: finance" in out
    code, out = run(db, "users", "groups", "finn", "--set", "a", "--add", "b")
    assert code == 2 and "--set" in out
    code, out = run(db, "users", "groups", "finn", "--add", "not a group!")
    assert code == 1 and "is not a group name" in out
    code, out = run(db, "users", "groups", "nobody", "--add", "x")
    assert code == 1 and "No user 'nobody'" in out
    code, out = run(db, "users", "add", "gia", "--group", "bad group")
    assert code == 1 and "is not a group name" in out
    assert groups_of(db, "finn") == ["finance"]


def test_a_file_of_many_rules_applies_in_one_go_on_each_database(any_db: str, tmp_path: Path) -> None:
    """Each rule's version is audited in the same transaction: 300 of them at once, then all removed at once."""
    many = "rules:\n" + "".join(f"  - {{name: rule-{n}, tool: tool_{n}, effect: allow}}\n" for n in range(300))
    code, out = run(any_db, "rules", "apply", rules_file(tmp_path, many))
    assert code == 0, out[-2000:]
    assert len(out.splitlines()) == 300
    assert run(any_db, "rules", "apply", rules_file(tmp_path, many)) == (0, "no changes\n")
    code, out = run(any_db, "rules", "apply", rules_file(tmp_path, "rules: []", "none.yaml"), "--prune")
    assert code == 0 and len(out.splitlines()) == 300
    code, out = run(any_db, "audit", "verify")
    assert code == 0 and out.startswith("audit log intact: 602 events"), out


def test_rules_list_shows_an_ask_rules_reminder_and_escalation(db: str, tmp_path: Path) -> None:
    rules = """
rules:
  - {name: paged, tool: refund, effect: ask, groups: [finance], remind_before: 30m, escalate_after: 2h,
     escalate_to: [oncall]}
  - {name: quiet, tool: delete_customer, effect: ask, remind_before: 0, escalate_after: 0}
  - {name: plain, tool: send_email, effect: ask}
"""
    assert run(db, "rules", "apply", rules_file(tmp_path, rules))[0] == 0
    code, out = run(db, "rules", "list")
    assert code == 0, out
    by_name = {row.split()[0]: row for row in out.splitlines()[1:]}
    assert "ask 1 finance remind 30m escalate 2h oncall" in by_name["paged"]
    assert "ask no-reminder no-escalation" in by_name["quiet"]
    assert by_name["plain"].split()[1:3] == ["ask", "send_email"]
