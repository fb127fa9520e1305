"""Slack, e-mail and follow-up settings: an incomplete channel is refused at start-up, naming what is missing."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from approvals.channels.settings import FollowUpDefaults
from approvals_web.settings import Settings

SLACK = {"slack_bot_token": "xoxb-1", "slack_signing_secret": "s", "slack_channel": "C1"}
SMTP = {"smtp_host": "mail.example.com", "mail_from": "approvals@example.com"}
PUBLIC = {"public_url": "https://approvals.example.com"}


def settings(**values: Any) -> Settings:
    return Settings(database_url="sqlite:///x.db", **values)


def test_nothing_turned_on_means_no_channel_but_default_follow_ups() -> None:
    outbound = settings().outbound()
    assert (outbound.slack, outbound.smtp, outbound.any_channel) == (None, None, False)
    assert outbound.follow_ups == FollowUpDefaults(remind_before=900.0, escalate_after=3600.0, escalate_to=())


def test_complete_slack_and_smtp_settings_become_the_cores_settings() -> None:
    outbound = settings(**SLACK, **SMTP, **PUBLIC, slack_routes={"finance": "C0FIN"}, email_link_ttl="2h").outbound()
    assert outbound.slack is not None and outbound.slack.routes == {"finance": "C0FIN"}
    assert outbound.smtp is not None and outbound.smtp.link_ttl == 7200.0 and outbound.smtp.port == 587
    assert outbound.public_url == "https://approvals.example.com" and outbound.any_channel
    assert "xoxb-1" not in repr(outbound) and "xoxb-1" not in repr(settings(**SLACK, **PUBLIC))  # secrets unprinted


@pytest.mark.parametrize(
    ("values", "missing"),
    [
        ({**SLACK, "slack_signing_secret": None, **PUBLIC}, ["APPROVALS_SLACK_SIGNING_SECRET"]),
        ({**SLACK, "slack_channel": None, **PUBLIC}, ["APPROVALS_SLACK_CHANNEL or APPROVALS_SLACK_ROUTES"]),
        ({**SLACK}, ["APPROVALS_PUBLIC_URL"]),
        ({"smtp_host": "mail.example.com"}, ["APPROVALS_MAIL_FROM", "APPROVALS_PUBLIC_URL"]),
    ],
)
def test_an_incomplete_channel_is_refused_naming_what_to_set(values: dict[str, Any], missing: list[str]) -> None:
    with pytest.raises(ValidationError) as refused:
        settings(**values)
    for name in missing:
        assert name in str(refused.value)


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"remind_before": "30m", "escalate_after": "2h", "escalate_to": ["oncall"]}, (1800.0, 7200.0, ("oncall",))),
        ({"remind_before": "", "escalate_after": ""}, (None, None, ())),
    ],
)
def test_follow_up_defaults_take_durations_and_empty_turns_a_step_off(
    values: dict[str, Any], expected: tuple[Any, ...]
) -> None:
    defaults = settings(**values).outbound().follow_ups
    assert (defaults.remind_before, defaults.escalate_after, defaults.escalate_to) == expected


def test_a_bad_duration_is_refused_clearly() -> None:
    with pytest.raises(ValidationError, match="is not a duration"):
        settings(remind_before="soon")


def test_default_escalation_groups_follow_the_rules_pattern() -> None:
    assert settings(escalate_to=["oncall", "oncall", "ops"]).outbound().follow_ups.escalate_to == ("oncall", "ops")
    with pytest.raises(ValidationError, match="is not a group name"):
        settings(escalate_to=["on call"])
