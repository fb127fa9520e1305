"""Questions asked of the audit log through the store, on SQLite and PostgreSQL: every filter, the saved
questions, keyset pages and bad input, over the events real operations wrote (`sentences_scenario`)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from urllib.parse import parse_qsl

import pytest

from approvals.audit.reading import tell
from approvals.audit.search import QUESTIONS, parse_query, parse_time, questions_for
from approvals.calls import clock
from approvals.calls.verdicts import Approve
from approvals.exceptions import UserError
from approvals.store import Store
from approvals.store.audit_log import AuditQuery
from approvals.store.models import AuditEventRow

from ..store import conftest as store_fixtures
from .sentences_scenario import ALICE, a_day, ask

pytestmark = pytest.mark.anyio
db_url, postgres_url, sqlite_template, store = (  # the store tests' fixtures: SQLite and PostgreSQL
    store_fixtures.db_url,
    store_fixtures.postgres_url,
    store_fixtures.sqlite_template,
    store_fixtures.store,
)


async def found(store: Store, **params: str) -> list[AuditEventRow]:
    """Every event answering the question, newest first, through the query-string parser."""
    page = await store.audit.audit_events(query=parse_query(params), limit=1_000)
    return page.items


def actions(events: list[AuditEventRow]) -> list[tuple[str, str]]:
    return [(e.action, e.actor) for e in events]


@pytest.fixture
async def day(store: Store, tmp_path: Path) -> dict[str, str]:
    """A day of events, and ten days before it, alice's approval of an old refund; call ids by name."""
    with clock.using(clock.SkippingClock()) as skipping:
        old = await ask(store, "refund", {"order_id": "A-0999", "amount": 120}, session="last-month")
        await store.calls.decide(old.id, Approve(), actor=ALICE)
        skipping.advance(dt.timedelta(days=10).total_seconds())
        calls = await a_day(store, tmp_path / "log")
        return {"old": old.id, **{name: call.id for name, call in calls.items()}}


async def test_what_did_alice_approve_last_week(store: Store, day: dict[str, str]) -> None:
    with clock.using(clock.SkippingClock()) as skipping:
        skipping.advance(dt.timedelta(days=10).total_seconds())
        last_week = await found(store, actor="alice", verdict="approved", since="7d")
        ever = await found(store, actor="alice", verdict="approved")
    assert [(e.action, e.subject_id) for e in last_week] == [("call.approved", day["ship"])]
    assert [e.subject_id for e in ever] == [day["ship"], day["old"]]
    (told,) = await tell(store.audit, last_week)
    assert told.sentence == "alice approved ship (order A-1005) via the API"


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"by": "rule", "verdict": "approved"}, [("call.approved", "rule:small-refunds")]),
        ({"by": "rule", "verdict": "approved", "tool": "ship"}, []),
        ({"by": "rule", "verdict": "denied"}, [("call.denied", "rule:no-deleting-customers")]),
        ({"verdict": "edited"}, [("call.edited", "bob")]),
        ({"verdict": "answered"}, [("call.answered", "alice")]),
        ({"verdict": "expired"}, [("call.expired", "system")]),
        ({"channel": "slack"}, [("call.approved", "finn")]),
        ({"channel": "api", "verdict": "approved"}, [("call.approved", "alice")] * 2),
        ({"action": "call.reminded,call.escalated"}, [("call.escalated", "system"), ("call.reminded", "system")]),
        ({"rule": "ship-free"}, [("rule.deleted", "ada"), ("rule.disabled", "ada"), ("rule.created", "ada")]),
        ({"by": "service", "action": "call.fallback"}, [("call.fallback", "token:support-app")]),
        ({"by": "system", "tool": "refund", "verdict": "approved"}, []),
        ({"agent": "shop", "action": "run.completed"}, [("run.completed", "vm-7:4242:8a971f")]),
        ({"engine": "native", "action": "run.started"}, [("run.started", "alice")]),
        ({"text": "Refund for A-1002"}, [("call.edited", "bob")]),
        ({"text": "a-1003", "action": "call.answered"}, [("call.answered", "alice")]),
        ({"text": "100%_"}, []),
        ({"actor": "finn", "tool": "refund"}, [("call.approved", "finn")]),
    ],
)
async def test_each_filter_answers_its_question(
    store: Store, day: dict[str, str], params: dict[str, str], expected: list[tuple[str, str]]
) -> None:
    assert actions(await found(store, **params)) == expected


async def test_text_finds_every_event_of_a_call_whose_arguments_hold_it(store: Store, day: dict[str, str]) -> None:
    story = await found(store, text="A-1004")
    assert {e.subject_id for e in story} == {day["waits"]}
    assert [e.action for e in reversed(story)][:3] == ["call.requested", "call.reminded", "call.escalated"]


async def test_person_filter_leaves_out_rules_services_and_the_system(store: Store, day: dict[str, str]) -> None:
    people = {e.actor for e in await found(store, by="person")}
    assert people == {"alice", "bob", "fay", "finn", "ada"}
    system = {e.actor for e in await found(store, by="system")}
    assert system == {"system", "vm-7:4242:8a971f"}


async def test_keyset_pages_cover_every_event_once_newest_first(store: Store, day: dict[str, str]) -> None:
    everything = (await store.audit.audit_events(limit=1_000)).items
    seen: list[int] = []
    after = None
    while True:
        page = await store.audit.audit_events(query=AuditQuery(), after=after, limit=7)
        seen += [e.id for e in page.items]
        if page.next_cursor is None:
            break
        after = page.next_cursor
    assert seen == [e.id for e in everything] and len(seen) > 30
    asked = AuditQuery(subject_type="call", actions=("call.requested",))
    first = await store.audit.audit_events(query=asked, limit=3)
    second = await store.audit.audit_events(query=asked, after=first.next_cursor, limit=3)
    assert all(e.action == "call.requested" for e in [*first.items, *second.items])
    assert first.items[-1].id > second.items[0].id


async def test_saved_questions_are_query_strings_that_parse(store: Store, day: dict[str, str]) -> None:
    asked = questions_for(person="alice", tool="refund")
    assert asked[0].title == "What did alice approve last week?"
    assert asked[0].query_string == "actor=alice&verdict=approved&since=7d"
    assert [q.title for q in asked[2:4]] == ["Every call a rule allowed on refund", "Every edit of refund"]
    for question in [*asked, *QUESTIONS]:
        await found(store, **dict(parse_qsl(question.query_string)))  # each one runs
    rule_allowed = dict(parse_qsl(asked[2].query_string))
    assert actions(await found(store, **rule_allowed)) == [("call.approved", "rule:small-refunds")]


@pytest.mark.parametrize(
    ("params", "problem"),
    [
        ({"since": "yesterday"}, "since must be a date and time"),
        ({"until": "2026-13-01"}, "until must be a date and time"),
        ({"since": "2d", "until": "3d"}, "since must be before until"),
        ({"by": "robot"}, "by must be one of person, service, rule, system"),
        ({"verdict": "maybe"}, "verdict must be one of approved, edited, denied, answered, expired"),
        ({"action": "approve"}, "action must look like call.approved"),
        ({"text": "x" * 201}, "text must be at most 200 characters"),
        ({"actor": "a\x00b"}, "actor must be 1 to 200 characters without control characters"),
    ],
)
def test_bad_filters_are_clear_errors(params: dict[str, str], problem: str) -> None:
    with pytest.raises(UserError, match=problem):
        parse_query(params)


async def test_a_bad_cursor_is_a_clear_error(store: Store) -> None:
    with pytest.raises(UserError, match="Invalid page cursor"):
        await store.audit.audit_events(query=AuditQuery(), after="not-a-cursor")


def test_times_are_iso_or_spans_back_from_now() -> None:
    now = dt.datetime(2026, 11, 29, 12, tzinfo=dt.UTC)
    assert parse_time("7d", "since", now=now) == now - dt.timedelta(days=7)
    assert parse_time("2w", "since", now=now) == now - dt.timedelta(weeks=2)
    assert parse_time("30m", "since", now=now) == now - dt.timedelta(minutes=30)
    assert parse_time("2026-01-31", "since") == dt.datetime(2026, 1, 31, tzinfo=dt.UTC)
    assert parse_time("2026-01-31T14:00+01:00", "since").utcoffset() == dt.timedelta(hours=1)


async def test_a_search_no_index_answers_is_refused_in_words_when_it_reads_too_long(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sqlalchemy import event, text

    from approvals.store import audit_log

    if store.backend.name != "postgresql":
        pytest.skip("SQLite's reads run in the process: there is no server to stop a statement")
    monkeypatch.setattr(audit_log, "SEARCH_TIMEOUT_MS", 50)

    def slow(conn: object, cursor: object, statement: str, *args: object) -> tuple[str, object]:
        parameters = args[0] if args else None
        if "FROM audit_events" in statement and "pg_sleep" not in statement:
            statement = statement.replace("FROM audit_events", "FROM audit_events, pg_sleep(1) AS slow", 1)
        return statement, parameters

    engine = store.db.engine.sync_engine
    event.listen(engine, "before_cursor_execute", slow, retval=True)
    try:
        with pytest.raises(UserError, match="reads too much of the log"):
            await store.audit.audit_events(query=parse_query({"text": "A-1"}))
    finally:
        event.remove(engine, "before_cursor_execute", slow)
    async with store.db.read() as session:  # the limit was the search's own transaction's, not the connection's
        assert (await session.execute(text("SHOW statement_timeout"))).scalar() == "0"
