"""Rules files: read back what they wrote, every problem reported at once, and a diff to print."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from approvals.policy import InvalidRule, dump_rules, load_rules, parse_duration, parse_rule, plan_apply

EVERY_FIELD = """
rules:
  - name: big-refunds
    description: "Refunds of 500 or more: two people from finance, within four hours. \u00e9\u00e8 \u2713"
    engine: [gate, pydantic_ai]
    agent: support-*
    tool: [refund, refund_*]
    when: |
      has(args.amount) &&
      args.amount >= 500
    effect: ask
    reason: 'Big: "quoted" and it''s fine'
    approvals: 2
    groups: [treasury, finance, finance]
    ttl: 4h
    expires_at: 2031-01-01T00:00:00+02:00
    enabled: false
  - name: session-only
    session: "s-\u00fc"
    tool: send_email
    effect: allow
  - name: no-deleting
    tool: delete_*
    effect: deny
    reason: Customers are deleted by the data team.
"""


def test_dump_then_load_gives_the_same_rules() -> None:
    specs = load_rules(EVERY_FIELD)
    assert specs[0].groups == ["finance", "treasury"] and specs[0].ttl == 14400.0
    assert specs[0].when == "has(args.amount) &&\nargs.amount >= 500"
    text = dump_rules(specs)
    assert load_rules(text) == specs
    assert dump_rules(load_rules(text)) == text  # and the text is stable
    assert "engine" not in text.split("session-only")[1]  # defaults are left out


def test_a_json_document_or_a_bare_list_is_a_rules_file_too() -> None:
    as_json = json.dumps({"rules": [{"name": "a", "effect": "allow", "tool": "x"}]})
    bare = "- name: a\n  effect: allow\n  tool: x\n"
    assert load_rules(as_json) == load_rules(bare) == [parse_rule({"name": "a", "effect": "allow", "tool": "x"})]
    assert load_rules("rules: []") == load_rules("[]") == []


@pytest.mark.parametrize("text", ["", "rules:\n", "rules: 0\n", "# nothing yet\n"])
def test_a_file_that_does_not_say_rules_is_refused_not_read_as_no_rules(text: str) -> None:
    """Applied with `--prune`, a file read as "no rules" would remove every rule: only `rules: []` says that."""
    with pytest.raises(InvalidRule, match=r"rules: \[\]"):
        load_rules(text)


def problems(text: str) -> list[str]:
    with pytest.raises(InvalidRule) as raised:
        load_rules(text, source="rules.yaml")
    assert str(raised.value).startswith("Invalid rules.yaml: ")
    return raised.value.problems


def test_a_yaml_error_names_its_line_and_column() -> None:
    assert problems("rules:\n  - name: a\n    effect: allow\n   - name: b\n") == [
        "not valid YAML at line 4, column 4: expected <block end>, but found '<block sequence start>'"
    ]
    [found] = problems("rules:\n  - name: a\n    when: 'args.x\n")
    assert found.startswith("not valid YAML at line 4, column 1")


def test_every_problem_is_reported_at_once_with_its_rule() -> None:
    text = """
rules:
  - name: ok
    effect: allow
  - name: bad-condition
    effect: allow
    when: args.amount >=
  - name: Bad Name
    effect: maybe
  - effect: deny
  - name: ok
    effect: allow
  - just a string
"""
    found = problems(text)
    assert found[0].startswith("rule 2 (bad-condition): when: Syntax error") and "line 1, column 15" in found[0]
    assert found[1].startswith("rule 3 (Bad Name): name: use 1 to 100 lowercase letters")
    assert found[2].startswith("rule 3 (Bad Name): effect: Input should be 'allow', 'deny' or 'ask'")
    assert found[3] == "rule 4: name: Field required"  # the checks across fields wait for the fields
    assert found[4] == "rule 5 (ok): the name 'ok' is used by rule 1 too"
    assert found[5] == "rule 6: a rule is a mapping of name, effect, ..., not 'just a string'"
    assert len(found) == 6


def test_an_unknown_key_is_refused_naming_the_keys_a_rule_takes() -> None:
    [found] = problems("rules:\n  - name: a\n    effect: allow\n    tools: refund\n")
    assert found.startswith("rule 1 (a): tools: unknown key: a rule takes name, description, engine, agent, tool,")


def test_a_key_written_twice_is_refused_rather_than_the_first_one_dropped() -> None:
    [found] = problems("rules:\n  - name: a\n    effect: deny\n    reason: x\n    effect: allow\n")
    assert found == "not valid YAML at line 5, column 5: the key 'effect' is written twice"


def test_yaml_merge_keys_work_and_what_they_bring_may_be_overridden() -> None:
    text = "rules:\n  - &base {name: a, effect: allow, tool: t}\n  - <<: *base\n    name: b\n    tool: u\n"
    assert [(spec.name, spec.tool) for spec in load_rules(text)] == [("a", ["t"]), ("b", ["u"])]


@pytest.mark.parametrize(
    "text", ["other: 1", "rules: [1]\nextra: 2", "42", "'text'"], ids=["other-key", "extra-key", "number", "string"]
)
def test_a_file_that_is_not_a_mapping_of_rules_is_refused(text: str) -> None:
    [found] = problems(text)
    assert "'rules'" in found or "rule 1" in found


def test_rules_must_be_a_list() -> None:
    assert problems("rules: 3") == ["'rules' must be a list of rules (`rules: []` for none)"]


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (None, None),
        ("", None),
        (90, 90.0),
        (1.5, 1.5),
        ("90", 90.0),
        ("45s", 45.0),
        ("30m", 1800.0),
        ("4h", 14400.0),
        (" 1.5h ", 5400.0),
        ("2d", 172800.0),
        ("1w", 604800.0),
    ],
)
def test_parse_duration(value: object, seconds: float | None) -> None:
    assert parse_duration(value) == seconds


@pytest.mark.parametrize("value", [True, "4 hours", "-1h", "1e3", "h", "4y", "4H"])
def test_parse_duration_refuses_what_is_not_a_duration(value: object) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(value)


@pytest.mark.parametrize("ttl", ["0", -5, "367d", float("inf"), float("nan"), "99999999w"])
def test_a_time_to_decide_is_positive_and_at_most_a_year(ttl: object) -> None:
    """Past a year, the call's expiry would overflow the calendar when the rule asks."""
    with pytest.raises(InvalidRule, match="ttl: give people a positive time to decide, at most 366d"):
        parse_rule({"name": "a", "effect": "ask", "ttl": ttl})
    assert parse_rule({"name": "a", "effect": "ask", "ttl": "366d"}).ttl == 366 * 86400


def test_plan_apply_creates_changes_removes_and_prints_each() -> None:
    current = {spec.name: spec for spec in load_rules(EVERY_FIELD)}
    wanted = load_rules(EVERY_FIELD.replace("approvals: 2", "approvals: 3").replace("ttl: 4h", "ttl: 1h"))[:2]
    wanted.append(parse_rule({"name": "new-one", "tool": "x", "effect": "allow"}))
    diff = plan_apply(current, wanted, prune=False)
    assert diff.lines() == [
        "+ new-one (allow)",
        "~ big-refunds",
        "    approvals: 2 -> 3",
        "    ttl: 14400.0 -> 3600.0",
    ]
    assert diff.unchanged == ["session-only"] and not diff.empty
    pruned = plan_apply(current, wanted, prune=True)
    assert pruned.lines()[-1] == "- no-deleting" and pruned.removed == ["no-deleting"]
    same = plan_apply(current, list(current.values()), prune=True)
    assert same.empty and same.lines() == ["no changes"]
    assert pruned.summary()["changed"] == [
        {"name": "big-refunds", "fields": {"approvals": [2, 3], "ttl": [14400.0, 3600.0]}}
    ]


def test_an_aware_expiry_in_another_zone_is_the_same_moment() -> None:
    [spec] = load_rules("rules:\n  - {name: a, effect: allow, expires_at: '2031-01-01T02:00:00+02:00'}\n")
    assert spec.expires_at == dt.datetime(2031, 1, 1, tzinfo=dt.UTC)
    [naive] = load_rules("rules:\n  - {name: a, effect: allow, expires_at: '2031-01-01T00:00:00'}\n")
    assert naive.expires_at == dt.datetime(2031, 1, 1, tzinfo=dt.UTC)  # no zone: UTC


def test_a_name_used_twice_is_reported_even_when_the_first_rule_has_other_problems() -> None:
    found = problems("rules:\n  - {name: a, effect: maybe}\n  - {name: ' a', effect: allow}\n")
    assert found == [
        "rule 1 (a): effect: Input should be 'allow', 'deny' or 'ask'",
        "rule 2 ( a): the name 'a' is used by rule 1 too",
    ]


def test_only_true_and_false_are_booleans_so_a_rule_named_off_is_text() -> None:
    """YAML 1.1 reads `off`, `no`, `yes`, `on` as booleans; a rule named `off` would be refused as no text."""
    text = (
        "rules:\n  - {name: off, effect: deny, reason: No, enabled: no}\n  - {name: on, effect: allow, session: yes}\n"
    )
    off, on = load_rules(text)
    assert (off.name, off.reason, off.enabled) == ("off", "No", False)
    assert (on.name, on.session, on.enabled) == ("on", "yes", True)
    assert load_rules(dump_rules([off, on])) == [off, on]
    [flag] = load_rules("rules:\n  - {name: a, effect: allow, enabled: FALSE}\n")
    assert flag.enabled is False
