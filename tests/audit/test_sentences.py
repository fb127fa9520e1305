# ruff: noqa: E501 - the sentences are long, and read best whole
"""Every audit event as one sentence, on SQLite and PostgreSQL: read from events real operations wrote.

The day in `sentences_scenario` makes every kind of event the store records (a worker's native
run, rules, gate calls decided by rules and by people on several channels, an edit, an answer,
follow-ups, a fallback, a refusal, an expiry, users, tokens, a cancelled run); each must read
as the sentence below. The rest checks the pieces: actors, the edit's diff, arguments in
words, events of a shape nobody taught the sentences.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from approvals.audit.actors import actor_words
from approvals.audit.diff import FieldChange, changes_words, field_changes
from approvals.audit.reading import story, tell
from approvals.audit.sentences import KNOWN_ACTIONS, EventFacts, args_words, sentence
from approvals.calls.states import CallStatus, RunStatus
from approvals.store import Store

from ..store import conftest as store_fixtures
from .sentences_scenario import a_day

pytestmark = pytest.mark.anyio
db_url, postgres_url, sqlite_template, store = (  # the store tests' fixtures: SQLite and PostgreSQL
    store_fixtures.db_url,
    store_fixtures.postgres_url,
    store_fixtures.sqlite_template,
    store_fixtures.store,
)

A_DAY = [
    ("run.started", "alice started run <id> of shop: 'refund A-1, delete customer 7'"),
    ("run.resumed", "the system (worker on host vm-7, process 4242) resumed run <id> of shop"),
    ("call.requested", "shop asked to run refund (order A-1, 450)"),
    ("call.requested", "shop asked to run delete_customer (customer 7)"),
    ("run.paused", "run <id> of shop paused until 2 calls are decided"),
    ("call.approved", "bob approved delete_customer (customer 7) via the web, 1 of 2 approvals"),
    ("call.approved", "fay approved delete_customer (customer 7) via the web, 2 of 2 approvals"),
    ("call.approved", "bob approved refund (order A-1, 450) via the web"),
    ("run.ready", "the system marked run <id> of shop ready: all its calls are decided"),
    ("run.resumed", "the system (worker on host vm-7, process 4242) resumed run <id> of shop"),
    ("call.executing", "the system (worker on host vm-7, process 4242) was handed refund (order A-1, 450) to run"),
    ("call.executing", "the system (worker on host vm-7, process 4242) was handed delete_customer (customer 7) to run"),
    ("call.succeeded", "the system (worker on host vm-7, process 4242) ran refund (order A-1, 450): it succeeded"),
    ("call.succeeded", "the system (worker on host vm-7, process 4242) ran delete_customer (customer 7): it succeeded"),
    ("run.completed", "the system (worker on host vm-7, process 4242) finished run <id> of shop"),
    ("rule.created", "ada created rule small-refunds v1"),
    ("rule.created", "ada created rule big-refunds v1"),
    ("rule.created", "ada created rule no-deleting-customers v1"),
    ("rule.created", "ada created rule ships-in-a-day v1"),
    ("rules.applied", "ada applied the rules file (4 created)"),
    ("run.started", "service support-app started run <id> of support-app (gate session nightly-refunds)"),
    (
        "call.requested",
        "service support-app asked to run refund (order A-1001, 20); rule small-refunds v1 allows it (gate session nightly-refunds)",
    ),
    ("call.approved", "rule small-refunds v1 allowed refund (order A-1001, 20) (gate session nightly-refunds)"),
    (
        "call.requested",
        "service support-app asked to run delete_customer (customer 7); rule no-deleting-customers v1 denies it (gate session nightly-refunds)",
    ),
    (
        "call.denied",
        "rule no-deleting-customers v1 denied delete_customer (customer 7) (gate session nightly-refunds): 'Customers are deleted by the data team.'",
    ),
    (
        "call.requested",
        "service support-app asked to run refund (order A-1002, 900); rule big-refunds v1 asks people (gate session nightly-refunds)",
    ),
    ("run.paused", "run <id> of support-app paused until 1 call is decided"),
    ("call.approved", "finn approved refund (order A-1002, 900) via Slack, 1 of 2 approvals"),
    ("call.approved", "fay approved refund (order A-1002, 900) via the web, 2 of 2 approvals"),
    (
        "run.running",
        "the system let run <id> of support-app go on: all its calls are decided (gate session nightly-refunds)",
    ),
    (
        "call.requested",
        "service support-app asked to run send_email (c@example.com, Refund) (gate session nightly-refunds)",
    ),
    ("run.paused", "run <id> of support-app paused until 1 call is decided"),
    ("call.edited", "bob edited send_email: subject 'Refund' → 'Refund for A-1002' and approved it via the web"),
    (
        "run.running",
        "the system let run <id> of support-app go on: all its calls are decided (gate session nightly-refunds)",
    ),
    ("call.requested", "service support-app asked to run lookup (order A-1003) (gate session nightly-refunds)"),
    ("run.paused", "run <id> of support-app paused until 1 call is decided"),
    ("call.answered", "alice answered lookup (order A-1003) instead of running it: 'shipped yesterday'"),
    (
        "run.running",
        "the system let run <id> of support-app go on: all its calls are decided (gate session nightly-refunds)",
    ),
    ("run.started", "service support-app started run <id> of support-app (gate session other)"),
    (
        "call.requested",
        "service support-app asked to run ship (order A-1004); rule ships-in-a-day v1 asks people (gate session other)",
    ),
    ("run.paused", "run <id> of support-app paused until 1 call is decided"),
    ("call.reminded", "the system reminded the reviewers about ship (order A-1004) (rule ships-in-a-day)"),
    ("call.escalated", "the system escalated to oncall about ship (order A-1004) (rule ships-in-a-day)"),
    ("call.fallback", "nobody decided ship (order A-1004) after 30 s; service support-app's hook fell back to deny"),
    ("call.refused", "the gate refused a request from service support-app: 'args must be an object'"),
    (
        "call.expired",
        "the system let ship (order A-1004) expire undecided: 'No one decided within 86400 seconds, so the request expired and the call was not run.'",
    ),
    ("run.running", "the system let run <id> of support-app go on: all its calls are decided (gate session other)"),
    ("run.started", "service support-app started run <id> of support-app (gate session third)"),
    (
        "call.requested",
        "service support-app asked to run ship (order A-1005); rule ships-in-a-day v1 asks people (gate session third)",
    ),
    ("run.paused", "run <id> of support-app paused until 1 call is decided"),
    ("call.approved", "alice approved ship (order A-1005) via the API"),
    ("run.running", "the system let run <id> of support-app go on: all its calls are decided (gate session third)"),
    ("call.executing", "service support-app was handed ship (order A-1005) to run"),
    ("call.succeeded", "service support-app ran ship (order A-1005): it succeeded"),
    ("rule.created", "ada created rule ship-free v1"),
    ("rule.disabled", "ada disabled rule ship-free v2"),
    ("rule.deleted", "ada deleted rule ship-free v3"),
    ("user.created", "ada created user carol (role 'reviewer')"),
    ("user.groups_changed", 'ada changed the groups of user carol (groups ["finance"], previous [])'),
    ("user.disabled", "ada disabled user carol (disabled true)"),
    ("token.created", "ada created API token ci-bot (role viewer)"),
    ("run.cancelled", "ada cancelled run <id> of support-app: 'end of the night' (gate session nightly-refunds)"),
]


def _masked(text: str) -> str:
    return re.sub(r"run [0-9a-f]{8}", "run <id>", text)


async def test_every_event_of_a_day_reads_as_a_sentence(store: Store, tmp_path: Path) -> None:
    await a_day(store, tmp_path / "log")
    page = await store.audit.audit_events(limit=500, newest_first=False)
    told = await tell(store.audit, page.items)
    assert [(t.event.action, _masked(t.sentence)) for t in told] == A_DAY


async def test_an_edit_carries_its_field_by_field_diff_and_a_call_tells_its_story(store: Store, tmp_path: Path) -> None:
    calls = await a_day(store, tmp_path / "log")
    mail = await story(store.audit, call_id=calls["mail"].id)
    assert [t.event.action for t in mail] == ["call.requested", "call.edited"]
    assert mail[1].changes == [FieldChange(field="subject", kind="changed", before="Refund", after="Refund for A-1002")]
    assert '"edited_args"' in mail[1].details_json and mail[1].details_json.endswith("}")  # whole, never cut
    ship = await story(store.audit, call_id=calls["ship"].id)
    assert [t.event.action for t in ship] == ["call.requested", "call.approved", "call.executing", "call.succeeded"]
    run = await story(store.audit, run_id=calls["big"].run_id)
    assert [t.event.id for t in run] == sorted(t.event.id for t in run)
    assert run[0].event.action == "run.started" and run[-1].event.action == "run.cancelled"


def test_every_action_the_code_records_has_a_sentence_of_its_own() -> None:
    root = Path(__file__).parents[2]
    literal = re.compile(r"""["'](?:call|run|rule|rules|user|token|login)\.[a-z_]+["']""")
    found = set()
    for path in [*root.glob("approvals/**/*.py"), *root.glob("approvals/**/*.sql"), *root.glob("web/**/*.py")]:
        found |= {m.strip("\"'") for m in literal.findall(path.read_text(encoding="utf-8"))}
    found |= {f"call.{status}" for status in CallStatus} | {f"run.{status}" for status in RunStatus}
    actions = {a for a in found if not a.endswith((".html", ".json", ".py", ".yaml", ".txt"))}
    recorded = {a for a in actions if a.split(".")[1] not in ("resuming", "awaiting_approval", "running_")}
    missing = sorted(a for a in recorded if a not in KNOWN_ACTIONS)
    assert missing == [] or all(
        not a.startswith(("call.", "run.", "rule.", "user.", "token.", "login.")) for a in missing
    )


@pytest.mark.parametrize(
    ("actor", "kind", "text"),
    [
        ("alice", "person", "alice"),
        ("system", "system", "the system"),
        ("rule:small-refunds", "rule", "rule small-refunds"),
        ("token:ci-bot", "service", "service ci-bot"),
        ("vm:10776:8a971f", "system", "the system (worker on host vm, process 10776)"),
    ],
)
def test_actors_read_as_people_services_rules_or_the_system(actor: str, kind: str, text: str) -> None:
    words = actor_words(actor)
    assert (words.kind, words.text) == (kind, text)


def test_the_diff_names_changed_added_removed_and_nested_fields() -> None:
    before = {"subject": "Refund", "cc": "x@example.com", "to": {"name": "Ann", "email": "a@example.com"}, "n": 1}
    after = {"subject": "Refund for A-1002", "to": {"name": "Ann B", "email": "a@example.com"}, "bcc": "y", "n": 1.0}
    changes = field_changes(before, after)
    assert [(c.field, c.kind) for c in changes] == [
        ("bcc", "added"),
        ("cc", "removed"),
        ("n", "changed"),
        ("subject", "changed"),
        ("to.name", "changed"),
    ]
    assert changes_words(changes[3:]) == "subject 'Refund' → 'Refund for A-1002'; to.name 'Ann' → 'Ann B'"
    assert changes_words([]) == "no argument changed"


def test_arguments_in_words_put_ids_and_amounts_first() -> None:
    assert args_words({"amount": "249.00", "order_id": "A-1002", "reason": "Sorry about the delay"}) == (
        " (order A-1002, 249.00)"
    )
    assert args_words({"amount": 249.0, "order_id": "A-1002"}) == " (order A-1002, 249.0)"
    assert args_words({}) == "" and args_words(None) == ""


def _event(action: str, details: Any = None, **fields: Any) -> Any:
    base = {"actor": "alice", "subject_type": "call", "subject_id": "c1", "run_id": None, "agent_name": None}
    return SimpleNamespace(**{**base, "tool_name": "refund", **fields, "action": action, "details": details})


def test_an_unknown_action_or_odd_details_still_read_sensibly() -> None:
    assert sentence(_event("call.teleported")) == "alice did `call.teleported` on refund"
    assert (
        sentence(_event("widget.spun", subject_type="widget", subject_id="7")) == "alice did `widget.spun` on widget 7"
    )
    assert sentence(_event("call.approved", details=["not", "a", "dict"])) == "alice approved refund"
    assert sentence(_event("call.approved", details={"required": "two"})) == "alice approved refund"
    odd = sentence(_event("call.fallback", details={"waited_seconds": "soon"}))
    assert odd.startswith("nobody decided refund")
    facts = EventFacts(args={"order_id": "A-1002", "amount": "249.00"}, session_id="nightly-refunds")
    approved = {"channel": "slack", "approvals": 2, "required": 2}
    assert sentence(_event("call.approved", details=approved), facts) == (
        "alice approved refund (order A-1002, 249.00) via Slack, 2 of 2 approvals"
    )
    ruled = {"rule": "small-refunds", "version": 3}
    assert sentence(_event("call.approved", details=ruled, actor="rule:small-refunds", tool_name="ship"), facts) == (
        "rule small-refunds v3 allowed ship (order A-1002, 249.00) (gate session nightly-refunds)"
    )
    long = sentence(_event("call.denied", details={"reason": "x" * 500}))
    assert len(long) < 200 and long.endswith("…'")
