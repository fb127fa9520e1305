"""A rule's reminders and escalation through the rules form: written, shown again, refused next to the field."""

from __future__ import annotations

import re

import pytest

from approvals.policy import parse_rule
from approvals_web.rules import pages as rules

from .conftest import WebApp
from .test_rules_pages import admin, fields

pytestmark = pytest.mark.anyio


def test_follow_up_fields_round_trip_through_the_form() -> None:
    spec = parse_rule(
        {
            "name": "big-refunds",
            "tool": "refund",
            "effect": "ask",
            "remind_before": "30m",
            "escalate_after": 0,
            "escalate_to": ["oncall", "finance-leads"],
        }
    )
    values = rules.form_values(spec)
    assert (values["remind_before"], values["escalate_after"], values["escalate_to"]) == (
        "30m",
        "0",
        "finance-leads, oncall",
    )
    assert parse_rule(rules.definition_from_form(values)) == spec
    unset = rules.form_values(parse_rule({"name": "r", "effect": "ask"}))
    assert (unset["remind_before"], unset["escalate_after"], unset["escalate_to"]) == ("", "", "")
    assert parse_rule(rules.definition_from_form(unset)).escalate_to is None  # empty: the default groups


async def test_an_admin_sets_follow_ups_in_the_form_and_bad_values_are_shown_next_to_their_fields(web: WebApp) -> None:
    client, csrf = await admin(web)
    form = await client.get("/rules/new")
    for name in ("remind_before", "escalate_after", "escalate_to"):
        assert f'name="{name}"' in form.text
    typed = fields(effect="ask", when="", remind_before="soon", escalate_after="-1m", escalate_to="on call")
    refused = await client.post("/rules", data={**typed, "csrf_token": csrf})
    assert refused.status_code == 422
    assert re.search(r'id="rule-remind_before-error"[^>]*>&#39;soon&#39; is not a duration', refused.text)
    assert re.search(r'id="rule-escalate_after-error"[^>]*>&#39;-1m&#39; is not a duration', refused.text)
    assert re.search(r'id="rule-escalate_to-error"[^>]*>&#39;on call&#39; is not a group name', refused.text)
    assert 'value="soon"' in refused.text and 'value="on call"' in refused.text

    allow = fields(remind_before="10m")
    not_ask = await client.post("/rules", data={**allow, "csrf_token": csrf})
    assert not_ask.status_code == 422 and "remind_before apply to ask rules only" in not_ask.text

    good = fields(effect="ask", when="", remind_before="10m", escalate_after="2h", escalate_to="oncall")
    assert (await client.post("/rules", data={**good, "csrf_token": csrf})).status_code == 303
    spec = (await web.store.rules.get_rule("small-refunds")).spec
    assert (spec.remind_before, spec.escalate_after, spec.escalate_to) == (600.0, 7200.0, ["oncall"])
    edit = await client.get("/rules/small-refunds/edit")
    assert 'value="10m"' in edit.text and 'value="2h"' in edit.text and 'value="oncall"' in edit.text
