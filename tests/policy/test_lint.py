"""`rule_flags`: rules that can never match, nobody can approve, or another rule always beats."""

from __future__ import annotations

import datetime as dt

from approvals.policy import rule_flags

from .rulesets import NOW, stored


def test_a_constant_false_condition_never_matches() -> None:
    flags = rule_flags(
        [
            stored(name="never", tool="refund", when="1 > 2", effect="allow"),
            stored(name="always", tool="email", when="true", effect="allow"),
            stored(name="sometimes", tool="wire", when="args.amount > 2", effect="allow"),
        ],
        now=NOW,
    )
    assert flags == {"never": ["never matches: its condition is always false"]}


def test_an_expired_rule_is_flagged_with_its_expiry() -> None:
    expired = stored(name="old", tool="refund", effect="allow", expires_at=dt.datetime(2029, 6, 1, tzinfo=dt.UTC))
    current = stored(name="new", tool="email", effect="allow", expires_at=NOW + dt.timedelta(days=1))
    assert rule_flags([expired, current], now=NOW) == {
        "old": ["never matches: it expired at 2029-06-01T00:00:00+00:00"]
    }


def test_an_ask_routed_to_groups_nobody_is_in_is_flagged_when_the_groups_are_known() -> None:
    rules = [
        stored(name="finance", tool="refund", effect="ask", groups=["finance", "treasury"]),
        stored(name="legal", tool="contract", effect="ask", groups=["legal"]),
        stored(name="anyone", tool="email", effect="ask"),
    ]
    assert rule_flags(rules, now=NOW, groups_with_members={"treasury", "support"}) == {
        "legal": ["nobody can approve: no user is in legal"]
    }
    assert rule_flags(rules, now=NOW) == {}  # groups unknown: nothing to say


def test_a_wider_rule_that_wins_by_precedence_shadows_a_narrower_one() -> None:
    deny_all = stored(name="no-deletes", tool="delete_*", effect="deny", reason="data team")
    allow_one = stored(name="delete-drafts", tool="delete_draft", effect="allow")
    ask_some = stored(name="ask-deletes", tool="delete_customer", when="args.id > 10", effect="ask")
    flags = rule_flags([deny_all, allow_one, ask_some], now=NOW)
    assert flags == {
        "delete-drafts": ["shadowed by no-deletes (deny): it takes every call this rule takes"],
        "ask-deletes": ["shadowed by no-deletes (deny): it takes every call this rule takes"],
    }


def test_a_rule_with_a_condition_shadows_only_rules_with_the_same_condition() -> None:
    some = stored(name="deny-some", tool="refund", when="args.amount > 5", effect="deny", reason="x")
    everything = stored(name="allow-refunds", tool="refund", effect="allow")
    same = stored(name="allow-same", tool="refund", when="args.amount > 5", effect="allow")
    flags = rule_flags([some, everything, same], now=NOW)
    assert list(flags) == ["allow-same"]


def test_a_narrower_or_weaker_rule_shadows_nothing() -> None:
    narrow_deny = stored(name="deny-one", tool="delete_draft", effect="deny", reason="x")
    wide_allow = stored(name="allow-deletes", tool="delete_*", effect="allow")
    other_agent = stored(name="deny-bot", agent="bot", tool="delete_*", effect="deny", reason="x")
    other_session = stored(name="deny-s1", session="s1", tool="delete_*", effect="deny", reason="x")
    assert rule_flags([narrow_deny, wide_allow, other_agent, other_session], now=NOW) == {}


def test_among_asks_the_strictest_shadows_and_among_equals_the_first_name() -> None:
    strict = stored(name="b-two", tool="wire", effect="ask", approvals=2)
    lax = stored(name="a-one", tool="wire", effect="ask")
    assert rule_flags([strict, lax], now=NOW) == {
        "a-one": ["shadowed by b-two (ask): it takes every call this rule takes"]
    }
    first = stored(name="a-finance", tool="email", effect="ask", groups=["finance"])
    second = stored(name="b-legal", tool="email", effect="ask", groups=["legal"])
    assert list(rule_flags([first, second], now=NOW)) == ["b-legal"]  # the same strictness: a-finance decides
    allow_a = stored(name="a-allow", tool="chat", effect="allow")
    allow_b = stored(name="b-allow", tool="chat", effect="allow")
    assert list(rule_flags([allow_b, allow_a], now=NOW)) == ["b-allow"]


def test_disabled_removed_and_expired_rules_shadow_nothing_and_are_not_judged() -> None:
    off = stored(name="deny-off", tool="refund", effect="deny", reason="x", enabled=False)
    gone = stored(name="deny-gone", tool="refund", effect="deny", reason="x", deleted=True)
    old = stored(name="deny-old", tool="refund", effect="deny", reason="x", expires_at=NOW - dt.timedelta(days=1))
    allow = stored(name="allow-refunds", tool="refund", effect="allow")
    flags = rule_flags([off, gone, old, allow], now=NOW)
    assert set(flags) == {"deny-old"}  # flagged for its expiry, shadowing nothing
