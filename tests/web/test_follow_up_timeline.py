"""The run page tells a call's reminders and escalations in words, with the rest of its story."""

from __future__ import annotations

import datetime as dt
import html
import re

import pytest

from approvals.channels.settings import FollowUpDefaults
from approvals.policy import parse_rule
from approvals.store import Actor
from approvals.worker.follow_ups import Plans, scan_follow_ups

from ..worker.test_follow_ups import ask
from .conftest import WebApp
from .test_gate import asking_client, claude_input, decision_of, hook

pytestmark = pytest.mark.anyio

DEFAULTS = FollowUpDefaults(remind_before=900.0, escalate_after=1800.0, escalate_to=("oncall",))


def said(page: str) -> list[str]:
    return [" ".join(html.unescape(text).split()) for text in re.findall(r'<p class="muted follow-up">(.*?)</p>', page)]


async def test_the_pages_say_when_a_call_was_reminded_and_escalated_and_to_whom(web: WebApp) -> None:
    rule = {"name": "refunds", "tool": "refund", "effect": "ask", "groups": ["finance"]}
    await web.store.rules.save_rule(parse_rule(rule), actor=Actor("ada", "admin"))
    call = await ask(web.store, ttl=3600)
    assert call.expires_at is not None
    await scan_follow_ups(web.store, Plans(DEFAULTS), now=call.created_at + dt.timedelta(minutes=50))
    client, _ = await web.login("alice")
    expires = call.expires_at.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    page = await client.get(f"/runs/{call.run_id}")  # a gate's call page lists its session, not the timeline
    assert page.status_code == 200
    reminded, escalated = said(page.text)  # one scan: the reminder first, to the groups of then
    expected = rf"Nobody had decided it, so its reviewers in finance were reminded at .+: it expires at {expires}\."
    assert re.fullmatch(expected, reminded), reminded
    expected = r"Nobody had decided it, so it was escalated at .+ UTC to oncall who may now approve it too\."
    assert re.fullmatch(expected, escalated), escalated
    call_page = await client.get(f"/calls/{call.id}")  # no timeline there: the call's card says the same
    assert said(call_page.text) == [reminded, escalated]


async def test_the_pages_say_when_a_hook_answered_its_fallback(web: WebApp) -> None:
    async with await asking_client(web) as agent:
        answered = decision_of(await hook(agent, claude_input(), fallback="ask"))
    assert answered[0] == "ask"
    [call] = (await web.store.calls.list_calls()).items
    client, _ = await web.login("alice")
    for page in (f"/runs/{call.run_id}", f"/calls/{call.id}"):
        [told] = said((await client.get(page)).text)
        expected = r"Nobody had decided it within the hook's wait \(0 s\), so at .+ UTC the hook answered ask: "
        expected += r"the call still waits\."
        assert re.fullmatch(expected, told), told
