"""Reminders and escalation on SQLite and PostgreSQL: when they fire, once each, what they change, the rules' say.

Calls are asked through the real gate lifecycle (`store.calls.request_call`), under rules saved in
the store; scans are given the moment to look at (`now`), so no test waits for a clock.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from typing import Any

import anyio
import pytest

from approvals.calls import CallRequest
from approvals.calls.requests import validate_request
from approvals.calls.verdicts import Approve, Deny
from approvals.channels.settings import FollowUpDefaults
from approvals.exceptions import Forbidden
from approvals.policy import parse_rule
from approvals.policy.follow_ups import Step
from approvals.store import Actor, Database, Store
from approvals.store.models import AuditEventRow, ToolCallRow
from approvals.worker.follow_ups import FollowUpScan, Plans, run_follow_ups, scan_follow_ups

pytestmark = pytest.mark.anyio

ADMIN = Actor("admin", "admin")
CLIENT = Actor("billing-service", "reviewer", person=False)
ANN = Actor("ann", "reviewer", frozenset({"finance"}))
OLGA = Actor("olga", "reviewer", frozenset({"ops"}))
SCHEMA = {"type": "object", "properties": {"amount": {"type": "number"}}, "required": ["amount"]}
DEFAULTS = FollowUpDefaults(remind_before=15 * 60.0, escalate_after=3600.0, escalate_to=("ops",))
MINUTE = dt.timedelta(minutes=1)


async def ask(store: Store, *, ttl: float | None = 3600.0, tool: str = "refund", amount: float = 10) -> ToolCallRow:
    request = CallRequest(
        engine="gate",
        source="billing",
        session_id=uuid.uuid4().hex,
        tool_name=tool,
        args={"amount": amount},
        json_schema=SCHEMA,
        approval_ttl=ttl,
    )
    call, created = await store.calls.request_call(validate_request(request), actor=CLIENT)
    assert created and call.status == "pending"
    return call


async def rule(store: Store, **fields: Any) -> None:
    await store.rules.save_rule(
        parse_rule({"name": "refunds", "tool": "refund", "effect": "ask", **fields}), actor=ADMIN
    )


async def scan(store: Store, at: dt.datetime, defaults: FollowUpDefaults = DEFAULTS) -> FollowUpScan:
    return await scan_follow_ups(store, Plans(defaults), now=at)


async def events(store: Store, action: str, call_id: str | None = None) -> list[AuditEventRow]:
    page = await store.audit.audit_events(action=action, subject_id=call_id, limit=1000, newest_first=False)
    return page.items


async def test_a_pending_call_is_reminded_once_before_it_expires(store: Store) -> None:
    call = await ask(store, ttl=3600)
    assert call.expires_at is not None
    due = call.expires_at - dt.timedelta(minutes=15)
    assert (await scan(store, due - MINUTE)).reminded == []
    assert (await scan(store, due + MINUTE)).reminded == [call.id]
    assert (await scan(store, due + 2 * MINUTE)).reminded == []  # once
    [event] = await events(store, "call.reminded", call.id)
    assert (event.actor, event.subject_type, event.run_id, event.tool_name) == ("system", "call", call.run_id, "refund")
    assert event.details == {
        "due_at": due.isoformat(),
        "rule": None,
        "version": None,
        "groups": [],
        "expires_at": call.expires_at.isoformat(),
    }
    assert (await store.calls.get_call(call.id)).status == "pending"  # a reminder changes nothing about the call


async def test_no_reminder_without_an_expiry_too_short_a_time_to_decide_or_after_a_decision(store: Store) -> None:
    endless = await ask(store, ttl=None)
    brief = await ask(store, ttl=10 * 60)  # asked with less time than the reminder comes ahead of its expiry
    decided = await ask(store, ttl=3600)
    await store.calls.decide(decided.id, Deny("no"), actor=ANN)
    assert decided.expires_at is not None
    for minutes in (1, 5, 9, 50, 59):
        assert (await scan(store, decided.created_at + minutes * MINUTE)).reminded == []
    assert await events(store, "call.reminded") == []
    assert endless.id and brief.id


async def test_an_expired_call_is_not_reminded_late(store: Store) -> None:
    """A scanner that was down through the reminder's time finds the call expired: nothing to remind of."""
    call = await ask(store, ttl=3600)
    assert call.expires_at is not None
    assert (await scan(store, call.expires_at + MINUTE)).reminded == []


async def test_escalation_widens_the_groups_once_and_lets_their_members_approve(store: Store) -> None:
    await rule(store, groups=["finance"], escalate_to=["ops"], escalate_after="30m")
    call = await ask(store, ttl=None)
    assert call.approver_groups == ["finance"]
    with pytest.raises(Forbidden):
        await store.calls.decide(call.id, Approve(args_digest=call.args_digest), actor=OLGA)
    assert (await scan(store, call.created_at + 29 * MINUTE)).escalated == []
    assert (await scan(store, call.created_at + 31 * MINUTE)).escalated == [call.id]
    assert (await scan(store, call.created_at + 90 * MINUTE)).escalated == []  # once, whatever the defaults say
    [event] = await events(store, "call.escalated", call.id)
    assert event.details == {
        "due_at": (call.created_at + 30 * MINUTE).isoformat(),
        "rule": "refunds",
        "version": 1,
        "groups": ["ops"],
        "approver_groups": ["finance", "ops"],
    }
    assert (await store.calls.get_call(call.id)).approver_groups == ["finance", "ops"]
    approved = await store.calls.decide(call.id, Approve(args_digest=call.args_digest), actor=OLGA)
    assert (approved.status, approved.decided_by) == ("approved", "olga")


async def test_a_call_any_reviewer_may_approve_is_escalated_without_narrowing_it(store: Store) -> None:
    call = await ask(store, ttl=None)  # no rule: the defaults, routed to nobody in particular
    assert (await scan(store, call.created_at + 61 * MINUTE)).escalated == [call.id]
    [event] = await events(store, "call.escalated", call.id)
    assert event.details is not None and event.details["groups"] == ["ops"] and "approver_groups" not in event.details
    assert (await store.calls.get_call(call.id)).approver_groups is None
    assert (await store.calls.decide(call.id, Approve(args_digest=call.args_digest), actor=ANN)).status == "approved"


async def test_no_escalation_without_groups_to_escalate_to(store: Store) -> None:
    call = await ask(store, ttl=None)
    nobody = FollowUpDefaults(remind_before=None, escalate_after=60.0, escalate_to=())
    assert await scan(store, call.created_at + 600 * MINUTE, nobody) == FollowUpScan()


async def test_a_rule_overrides_the_defaults_and_can_turn_each_step_off(store: Store) -> None:
    await rule(store, remind_before="50m", escalate_after="10m", escalate_to=["finance-leads"])
    early = await ask(store, ttl=3600)
    await store.rules.save_rule(
        parse_rule({"name": "quiet", "tool": "ping", "effect": "ask", "remind_before": 0, "escalate_after": 0}),
        actor=ADMIN,
    )
    quiet = await ask(store, ttl=3600, tool="ping")
    plain = await ask(store, ttl=3600, tool="other")  # no rule: the defaults
    found = await scan(store, early.created_at + 11 * MINUTE)
    assert found == FollowUpScan(reminded=[early.id], escalated=[early.id])
    [escalated] = await events(store, "call.escalated", early.id)
    assert escalated.details is not None and escalated.details["groups"] == ["finance-leads"]
    found = await scan(store, early.created_at + 59 * MINUTE)
    assert found == FollowUpScan(reminded=[plain.id])  # the defaults: 15 min before, and after 1 h (not yet)
    assert await events(store, "call.reminded", quiet.id) == []
    found = await scan(store, quiet.created_at + 600 * MINUTE)  # all three expired by then
    assert found == FollowUpScan()


async def test_a_rule_changed_after_the_call_was_asked_does_not_change_its_follow_ups(store: Store) -> None:
    """The call's rule is the version that routed it: versions never change, so neither do its follow-ups."""
    await rule(store, escalate_after="10m")
    call = await ask(store, ttl=None)
    await rule(store, escalate_after="0")  # version 2 turns escalation off, for calls asked from now on
    assert (await scan(store, call.created_at + 11 * MINUTE)).escalated == [call.id]


async def test_a_decided_call_is_never_followed_up_even_when_found_due(store: Store) -> None:
    """The decision wins a race with a scan that found the call pending: the follow-up sees it under the lock."""
    call = await ask(store, ttl=3600)
    await store.calls.decide(call.id, Deny("no"), actor=ANN)
    assert not await store.outbound.follow_up(call.id, Step.REMIND, due_at=call.created_at)
    assert not await store.outbound.follow_up(call.id, Step.ESCALATE, due_at=call.created_at, groups=["ops"])
    assert await events(store, "call.reminded") == await events(store, "call.escalated") == []
    assert await store.outbound.follow_ups_of([call.id]) == []


async def test_scanners_on_one_database_make_each_step_once(db_url: str) -> None:
    databases = [Database(db_url) for _ in range(3)]
    stores = [Store(database) for database in databases]
    try:
        calls = [await ask(stores[0], ttl=7200) for _ in range(12)]
        at = calls[-1].created_at + 106 * MINUTE  # reminded 105 min after asked, escalated after 60
        scans: list[FollowUpScan] = []

        async def one(store: Store) -> None:
            scans.append(await scan(store, at))

        async with anyio.create_task_group() as group:
            for store in stores:
                for _ in range(2):
                    group.start_soon(one, store)
        ids = sorted(call.id for call in calls)
        assert sorted(id_ for found in scans for id_ in found.reminded) == ids
        assert sorted(id_ for found in scans for id_ in found.escalated) == ids
        assert sorted(e.subject_id for e in await events(stores[0], "call.reminded")) == ids
        assert sorted(e.subject_id for e in await events(stores[0], "call.escalated")) == ids
        done = await stores[0].outbound.follow_ups_of(ids)
        assert sorted((row.call_id, row.step) for row in done) == sorted(
            (id_, step) for id_ in ids for step in ("escalate", "remind")
        )
    finally:
        for database in databases:
            await database.dispose()


async def test_the_scanner_runs_at_once_then_every_interval_until_stopped(store: Store) -> None:
    first = await ask(store, ttl=None)
    quick = FollowUpDefaults(remind_before=None, escalate_after=0.5, escalate_to=("ops",))
    stop = anyio.Event()
    with anyio.fail_after(30):
        async with anyio.create_task_group() as group:
            await group.start(
                lambda task_status: run_follow_ups(store, quick, stop, interval=0.1, task_status=task_status)
            )
            second = await ask(store, ttl=None)
            while len(await events(store, "call.escalated")) < 2:
                await anyio.sleep(0.05)
            stop.set()
    assert sorted(e.subject_id for e in await events(store, "call.escalated")) == sorted([first.id, second.id])


async def test_an_unexpected_error_is_logged_with_its_traceback_and_the_scans_go_on(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    call = await ask(store, ttl=None)
    follow_up = store.outbound.follow_up
    failures = 0

    async def failing_once(*args: Any, **kwargs: Any) -> bool:
        nonlocal failures
        if failures == 0:
            failures += 1
            raise RuntimeError("a bug")
        return await follow_up(*args, **kwargs)

    store.outbound.follow_up = failing_once  # type: ignore[method-assign]
    quick = FollowUpDefaults(remind_before=None, escalate_after=0.2, escalate_to=("ops",))
    stop = anyio.Event()
    with caplog.at_level(logging.INFO, logger="approvals.follow_ups"), anyio.fail_after(30):
        async with anyio.create_task_group() as group:
            group.start_soon(lambda: run_follow_ups(store, quick, stop, interval=0.1))
            while not await events(store, "call.escalated", call.id):
                await anyio.sleep(0.05)
            stop.set()
    [failure] = [record for record in caplog.records if record.levelno == logging.ERROR]
    assert "failed unexpectedly" in failure.getMessage() and failure.exc_info is not None


async def test_with_no_default_escalation_only_the_calls_of_rules_that_escalate_are_escalated(store: Store) -> None:
    await rule(store, escalate_to=["ops"], escalate_after="5m")
    routed = await ask(store, ttl=None)
    plain = await ask(store, ttl=None, tool="other")
    quiet = FollowUpDefaults(remind_before=None, escalate_after=60.0, escalate_to=())
    assert await scan(store, plain.created_at + 600 * MINUTE, quiet) == FollowUpScan(escalated=[routed.id])
