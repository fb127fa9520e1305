"""`RuleSet.decide`: precedence, the strictest ask, remembered rules, failures and the index by tool."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from approvals.policy import (
    NO_RULE,
    Effect,
    Kind,
    Remember,
    RememberScope,
    RuleSet,
    StoredRule,
    evaluation,
    remembered_rule,
)

from .rulesets import NOW, asked, decide, stored

ALLOW = stored(name="allow-refunds", tool="refund", effect="allow")
ASK = stored(name="ask-big", tool="refund", when="args.amount >= 500", effect="ask", groups=["finance"])
DENY = stored(name="deny-huge", tool="refund", when="args.amount >= 10000", effect="deny", reason="Too much.")


@pytest.mark.parametrize(
    ("amount", "effect", "rule"),
    [(20, Effect.ALLOW, "allow-refunds"), (900, Effect.ASK, "ask-big"), (20000, Effect.DENY, "deny-huge")],
)
def test_deny_beats_ask_beats_allow(amount: int, effect: Effect, rule: str) -> None:
    outcome = decide([ALLOW, ASK, DENY], asked(args={"amount": amount}))
    assert (outcome.effect, outcome.rule, outcome.version) == (effect, rule, 1)
    assert set(outcome.matched) <= {"allow-refunds", "ask-big", "deny-huge"} and rule in outcome.matched
    assert outcome.actor == f"rule:{rule}"
    assert outcome.decided is (effect is not Effect.ASK)


def test_a_deny_gives_its_reason_and_names_every_rule_that_matched() -> None:
    outcome = decide([DENY, ASK, ALLOW], asked(args={"amount": 20000}))
    assert outcome.reason == "Too much."
    assert outcome.matched == ("allow-refunds", "ask-big", "deny-huge")
    assert outcome.details() == {"effect": Effect.DENY, "rule": "deny-huge", "version": 1}


def test_among_denies_and_among_allows_the_first_name_decides() -> None:
    rules = [
        stored(name="b-deny", tool="wire", effect="deny", reason="b"),
        stored(name="a-deny", tool="wire", effect="deny", reason="a"),
        stored(name="z-allow", tool="email", effect="allow"),
        stored(name="m-allow", tool="email", effect="allow"),
    ]
    assert decide(rules, asked("wire")).rule == "a-deny"
    assert decide(rules, asked("email")).rule == "m-allow"


def test_the_strictest_ask_decides_most_approvals_then_shortest_time_then_first_name() -> None:
    one_fast = stored(name="a-one-fast", tool="wire", effect="ask", ttl="10m", groups=["ops"])
    two_slow = stored(name="b-two-slow", tool="wire", effect="ask", approvals=2, ttl="4h", groups=["finance"])
    two_fast = stored(name="c-two-fast", tool="wire", effect="ask", approvals=2, ttl="1h", groups=["legal"])
    two_fast_too = stored(name="d-two-fast", tool="wire", effect="ask", approvals=2, ttl="1h")
    outcome = decide([one_fast, two_slow, two_fast, two_fast_too], asked("wire"))
    assert (outcome.rule, outcome.approvals, outcome.ttl, outcome.groups) == ("c-two-fast", 2, 3600.0, ("legal",))
    assert decide([one_fast, two_slow], asked("wire")).rule == "b-two-slow"  # approvals first, time second
    no_time = stored(name="a-no-time", tool="wire", effect="ask", approvals=2)
    assert decide([no_time, two_slow], asked("wire")).rule == "b-two-slow"  # some time is stricter than none


def test_no_rule_matching_leaves_the_call_to_its_tool() -> None:
    assert decide([ALLOW, ASK], asked("send_email")) is NO_RULE
    assert NO_RULE.details() == {} and not NO_RULE.decided and NO_RULE.actor is None
    assert decide([], asked()) is NO_RULE


def test_expired_disabled_and_removed_rules_are_skipped() -> None:
    expired = stored(name="expired", tool="refund", effect="deny", reason="x", expires_at=NOW - dt.timedelta(seconds=1))
    disabled = stored(name="disabled", tool="refund", effect="deny", reason="x", enabled=False)
    removed = stored(name="removed", tool="refund", effect="deny", reason="x", deleted=True)
    later = stored(name="later", tool="refund", effect="ask", expires_at=NOW + dt.timedelta(seconds=1))
    rule_set = RuleSet([expired, disabled, removed, later, ALLOW])
    assert len(rule_set) == 4
    outcome = rule_set.decide(asked(args={"amount": 1}))
    assert (outcome.effect, outcome.rule) == (Effect.ASK, "later")
    assert "expired" not in outcome.matched and "disabled" not in outcome.matched
    at_expiry = rule_set.decide(asked(args={"amount": 1}, now=NOW + dt.timedelta(seconds=1)))
    assert (at_expiry.effect, at_expiry.rule) == (Effect.ALLOW, "allow-refunds")  # expired at its instant


def test_a_condition_that_cannot_be_evaluated_asks_one_person_naming_the_rule() -> None:
    by_region = stored(name="by-region", version=3, tool="refund", when="args.region == 'eu'", effect="allow")
    outcome = decide([by_region], asked(args={"amount": 1}))
    assert (outcome.effect, outcome.rule, outcome.version, outcome.approvals, outcome.groups) == (
        Effect.ASK,
        "by-region",
        3,
        1,
        (),
    )
    assert outcome.reason.startswith("rule by-region could not be evaluated: no field 'region'")
    [failure] = outcome.failures
    assert (failure.rule, failure.version) == ("by-region", 3) and "region" in failure.message
    assert outcome.details()["failures"] == [{"rule": "by-region", "version": 3, "error": failure.message}]


def test_a_failure_never_weakens_a_deny_or_a_stricter_ask_but_is_still_reported() -> None:
    broken = stored(name="broken", tool="refund", when="args.region == 'eu'", effect="allow")
    denied = decide([broken, DENY], asked(args={"amount": 20000}))
    assert (denied.effect, denied.rule) == (Effect.DENY, "deny-huge") and denied.failures[0].rule == "broken"
    two = stored(name="two", tool="refund", effect="ask", approvals=2)
    routed = decide([broken, two], asked(args={"amount": 1}))
    assert (routed.rule, routed.approvals) == ("two", 2) and len(routed.failures) == 1


def test_a_rule_for_another_tool_is_never_evaluated() -> None:
    """Rules are indexed by tool: a condition that would fail on every call adds no failure to another tool's calls."""
    failing = [
        stored(name=f"failing-{n}", tool=f"x{n}", when="args.nothing.here == 1", effect="deny", reason="x")
        for n in range(50)
    ]
    rule_set = RuleSet([*failing, ALLOW])
    outcome = rule_set.decide(asked("refund", {"amount": 1}))
    assert (outcome.effect, outcome.rule, outcome.failures) == (Effect.ALLOW, "allow-refunds", ())
    assert rule_set.decide(asked("y", {"amount": 1})) is NO_RULE
    on_its_tool = rule_set.decide(asked("x7", {"amount": 1}))
    assert [f.rule for f in on_its_tool.failures] == ["failing-7"]


def test_a_rule_on_several_tools_is_evaluated_once_per_call() -> None:
    both = stored(name="both", tool=["refund", "ref*", "refund"], when="args.region == 'eu'", effect="allow")
    outcome = decide([both], asked("refund", {}))
    assert len(outcome.failures) == 1


@pytest.mark.parametrize(
    ("patterns", "tool", "matches"),
    [
        ("delete_*", "delete_customer", True),
        ("delete_*", "undelete_customer", False),
        ("delete_*", "Delete_customer", False),  # case counts
        (["refund", "wire_*"], "wire_eu", True),
        ("refund_?", "refund_a", True),
        ("refund_?", "refund_ab", False),
        ("mcp__[gs]*", "mcp__github", True),
        ("mcp__[gs]*", "mcp__jira", False),
        ("*", "anything.at/all", True),
        ("a.b", "a.b", True),
        ("a.b", "axb", False),  # a dot is a dot, not a regular expression
    ],
)
def test_tool_patterns_are_globs(patterns: str | list[str], tool: str, matches: bool) -> None:
    rule = stored(name="r", tool=patterns, effect="allow")
    assert (decide([rule], asked(tool)).effect is Effect.ALLOW) is matches


def test_engine_and_agent_patterns_are_globs_too() -> None:
    rule = stored(name="claude-shell", engine="claude_*", agent=["claude-code", "cursor"], tool="Bash", effect="allow")
    assert decide([rule], asked("Bash", engine="claude_code", agent="claude-code")).effect is Effect.ALLOW
    assert decide([rule], asked("Bash", engine="gate", agent="claude-code")) is NO_RULE
    assert decide([rule], asked("Bash", engine="claude_code", agent="codex")) is NO_RULE


def test_a_session_rule_takes_only_its_session() -> None:
    rule = stored(name="this-session", tool="refund", session="s1", effect="allow")
    assert decide([rule], asked(session="s1")).effect is Effect.ALLOW
    assert decide([rule], asked(session="s2")) is NO_RULE
    by_condition = stored(name="cond-session", tool="refund", when="session == 's2'", effect="allow")
    assert decide([by_condition], asked(session="s2")).effect is Effect.ALLOW


def remembered(author: str = "finn", groups: frozenset[str] = frozenset({"finance"}), **definition: Any) -> StoredRule:
    fields = {"name": "remembered-1", "tool": "refund", "effect": "allow", "when": "args.amount == 120"} | definition
    return stored(kind=Kind.REMEMBERED, author=author, author_groups=groups, **fields)


def test_a_remembered_rule_stands_in_for_its_authors_one_approval() -> None:
    rule = remembered()
    outcome = decide([rule], asked(args={"amount": 120}, requester="alice"))
    assert (outcome.effect, outcome.rule, outcome.remembered) == (Effect.ALLOW, "remembered-1", True)
    assert outcome.details()["remembered"] is True
    assert decide([rule], asked(args={"amount": 130}, requester="alice")) is NO_RULE


def test_a_remembered_rule_never_decides_its_authors_own_calls() -> None:
    outcome = decide([remembered()], asked(args={"amount": 120}, requester="finn"))
    assert outcome is NO_RULE


def test_a_remembered_rule_never_stands_in_for_a_quorum() -> None:
    rule = remembered()
    quorum = stored(name="two-for-refunds", tool="refund", effect="ask", approvals=2, groups=["finance"])
    by_rule = decide([rule, quorum], asked(args={"amount": 120}))
    assert (by_rule.effect, by_rule.rule, by_rule.approvals) == (Effect.ASK, "two-for-refunds", 2)
    by_tool = decide([rule], asked(args={"amount": 120}, approvals_required=2))
    assert by_tool is NO_RULE  # the call asks as its tool says: two people


def test_a_remembered_rule_allows_only_what_its_author_could_approve_among_the_routed_groups() -> None:
    routed = stored(name="finance-refunds", tool="refund", effect="ask", groups=["finance", "ops"])
    mine = decide([remembered(groups=frozenset({"ops"})), routed], asked(args={"amount": 120}))
    assert (mine.effect, mine.remembered) == (Effect.ALLOW, True)
    outsider = decide([remembered(groups=frozenset({"support"})), routed], asked(args={"amount": 120}))
    assert (outsider.effect, outsider.rule) == (Effect.ASK, "finance-refunds")
    anyone = stored(name="anyone", tool="refund", effect="ask")
    ungrouped = decide([remembered(groups=frozenset()), anyone], asked(args={"amount": 120}))
    assert ungrouped.effect is Effect.ALLOW  # no group asked: any reviewer could approve


def test_a_remembered_rule_never_beats_a_deny() -> None:
    deny = stored(name="no-refunds", tool="refund", effect="deny", reason="closed")
    assert decide([remembered(), deny], asked(args={"amount": 120})).effect is Effect.DENY


@pytest.mark.parametrize(
    ("engine", "agent", "tool"),
    [("gate", "support-app", "refund"), ("gate", "bot[1]", "tool*?"), ("claude_code", "a?b*", "mcp__x[y]")],
)
def test_a_remembered_rule_matches_its_own_call_and_no_lookalike(engine: str, agent: str, tool: str) -> None:
    spec = remembered_rule(
        engine=engine,
        agent=agent,
        tool=tool,
        session="s1",
        args={"to": "a@example.com"},
        author="finn",
        call_id="c1",
        remember=Remember(RememberScope.AGENT, dt.timedelta(hours=1)),
        now=NOW,
    )
    rule = stored(kind=Kind.REMEMBERED, author="finn", **spec.definition())
    call = asked(tool, {"to": "a@example.com"}, engine=engine, agent=agent, session="s2")
    assert decide([rule], call).effect is Effect.ALLOW
    for lookalike in (agent + "x", "x" + agent, agent.replace("[", "").replace("]", "")):
        if lookalike != agent:
            assert decide([rule], asked(tool, {"to": "a@example.com"}, engine=engine, agent=lookalike)) is NO_RULE
    assert decide([rule], asked(tool + "x", {"to": "a@example.com"}, engine=engine, agent=agent)) is NO_RULE
    assert (
        decide(
            [rule], asked(tool, {"to": "a@example.com"}, engine=engine, agent=agent, now=NOW + dt.timedelta(hours=2))
        )
        is NO_RULE
    )


def test_the_rules_matching_a_call_are_worked_out_once_per_names_and_kept_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(evaluation, "MATCHING_CACHE", 8)
    rule_set = RuleSet(
        [
            stored(name="deletes", tool="delete_*", effect="deny", reason="no"),
            stored(name="claude-only", engine="claude_code", tool="*", effect="ask"),
            ALLOW,
        ]
    )
    for n in range(30):  # tools the callers make up: the kept matches stay few
        assert rule_set.decide(asked(f"delete_{n}")).rule == "deletes"
        assert rule_set.decide(asked(f"other_{n}")) is NO_RULE
        assert rule_set.decide(asked(f"other_{n}", engine="claude_code")).rule == "claude-only"
        assert len(rule_set._matching) <= 8
    assert rule_set.decide(asked("refund")).rule == "allow-refunds"
    assert rule_set.decide(asked("refund", engine="claude_code")).rule == "claude-only"  # ask beats allow
