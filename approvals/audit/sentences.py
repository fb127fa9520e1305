"""Every audit event as one sentence, from one place: the audit page, the exports' `summary` and the API.

"alice approved refund (order A-1002, 249.00) via Slack, 2 of 2 approvals"; "rule small-refunds
v3 allowed ship (gate session nightly-refunds)"; "bob edited send_email: subject 'Refund' →
'Refund for A-1002'". An event alone names its call's tool, not the call's arguments or its
gate session: those come from `EventFacts` when the reader has them (`Store.audit.event_facts`),
and the sentence is still whole without them. An action nobody taught this module still reads
sensibly ("alice did `x.y` on widget 7").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from .actors import actor_words
from .diff import changes_words, field_changes, value_words

__all__ = ("AuditEventLike", "EventFacts", "args_words", "channel_words", "sentence", "KNOWN_ACTIONS")


class AuditEventLike(Protocol):
    """What a sentence reads of an event: a stored row or an `AuditEvent`."""

    @property
    def actor(self) -> str: ...
    @property
    def action(self) -> str: ...
    @property
    def subject_type(self) -> str: ...
    @property
    def subject_id(self) -> str: ...
    @property
    def run_id(self) -> str | None: ...
    @property
    def agent_name(self) -> str | None: ...
    @property
    def tool_name(self) -> str | None: ...
    @property
    def details(self) -> Any: ...


@dataclass(frozen=True, kw_only=True)
class EventFacts:
    """What the event's call and run say about it, beyond the event itself."""

    args: Mapping[str, Any] | None = None
    """The arguments the model asked with (an edit is diffed against these)."""
    session_id: str | None = None
    """The gate session the call or run belongs to."""
    engine: str | None = None


_NUMBER = re.compile(r"^-?\d{1,15}(\.\d{1,10})?$")
_CHANNELS = {"web": "the web", "api": "the API", "slack": "Slack", "email": "e-mail"}


def channel_words(channel: str) -> str:
    """A decision's channel as a sentence says it ("via Slack")."""
    return _CHANNELS.get(channel, channel)


def args_words(args: Mapping[str, Any] | None, *, most: int = 3) -> str:
    """A call's arguments in a few words: ids first ("order A-1002"), then numbers, then short texts."""
    if not args:
        return ""
    ids, numbers, texts = [], [], []
    for key, value in args.items():
        if isinstance(value, bool) or value is None:
            continue
        if key.endswith("_id") and isinstance(value, str | int):
            ids.append(f"{key.removesuffix('_id').replace('_', ' ')} {value}")
        elif isinstance(value, int | float) or (isinstance(value, str) and _NUMBER.match(value)):
            numbers.append(str(value))
        elif isinstance(value, str) and len(value) <= 30 and value.strip():
            texts.append(value)
    words = [*ids, *numbers, *(texts if len(ids) + len(numbers) < 2 else [])][:most]
    return f" ({', '.join(words)})" if words else ""


@dataclass(frozen=True)
class _Event:
    """The parts a sentence is made of, worked out once."""

    who: str
    what: str
    """The call's tool and arguments, or the subject: "refund (order A-1002, 249.00)"."""
    details: Mapping[str, Any]
    facts: EventFacts
    raw: AuditEventLike


def _session(facts: EventFacts) -> str:
    return f" (gate session {facts.session_id})" if facts.session_id else ""


def _reason(details: Mapping[str, Any], key: str = "reason") -> str:
    value = details.get(key)
    return f": {value_words(value, limit=120)}" if value else ""


def _groups(groups: Any) -> str:
    return ", ".join(str(g) for g in groups) if isinstance(groups, list) and groups else "the reviewers"


def _by_rule(e: _Event) -> str:
    """ "rule small-refunds v3" (and "remembered") when a rule decided."""
    rule, version = e.details.get("rule"), e.details.get("version")
    if not rule:
        return e.who
    remembered = " (remembered)" if e.details.get("remembered") else ""
    return f"rule {rule}" + (f" v{version}" if version is not None else "") + remembered


def _approved(e: _Event) -> str:
    if e.raw.actor.startswith("rule:") or (e.details.get("rule") and e.raw.actor == "system"):
        return f"{_by_rule(e)} allowed {e.what}{_session(e.facts)}"
    text = f"{e.who} approved {e.what}" + _via(e)
    required = e.details.get("required")
    if isinstance(required, int) and required > 1:
        text += f", {e.details.get('approvals', '?')} of {required} approvals"
    return text


def _via(e: _Event) -> str:
    """Where a decision came from, and the provider identity behind the person when there is one."""
    channel = e.details.get("channel")
    text = f" via {channel_words(str(channel))}" if channel else ""
    identity = e.details.get("identity")
    if isinstance(identity, Mapping) and identity.get("subject") and identity.get("issuer"):
        text += f" (signed in as {identity['subject']} at {identity['issuer']})"
    return text


def _edited(e: _Event) -> str:
    edited = e.details.get("edited_args")
    text = f"{e.who} edited {e.raw.tool_name or 'a call'}"
    if isinstance(edited, Mapping) and e.facts.args is not None:
        text += ": " + changes_words(field_changes(e.facts.args, edited))
    elif isinstance(edited, Mapping):
        text += " to" + (args_words(edited) or " new arguments")
    text += " and approved it" + _via(e)
    required = e.details.get("required")
    if isinstance(required, int) and required > 1:
        text += f", {e.details.get('approvals', '?')} of {required} approvals"
    return text


def _denied(e: _Event) -> str:
    if e.raw.actor.startswith("rule:") or e.details.get("rule"):
        return f"{_by_rule(e)} denied {e.what}{_session(e.facts)}{_reason(e.details)}"
    return f"{e.who} denied {e.what}{_via(e)}{_reason(e.details)}"


def _requested(e: _Event) -> str:
    agent = e.raw.agent_name
    asker = actor_words(e.raw.actor)
    if asker.kind == "system" and agent:  # a worker records what its agent's model asked for
        text = f"{agent} asked to run {e.what}"
    else:
        text = f"{e.who} asked to run {e.what}" + (f" for {agent}" if agent and agent != asker.name else "")
    policy = e.details.get("policy")
    if isinstance(policy, Mapping) and policy.get("rule"):
        effect = {"allow": "allows it", "deny": "denies it", "ask": "asks people"}.get(str(policy.get("effect")), "")
        version = policy.get("version")
        text += f"; rule {policy['rule']}" + (f" v{version}" if version is not None else "")
        text += f" {effect}" if effect else ""
    return text + _session(e.facts)


def _follow_up(verb: str) -> Callable[[_Event], str]:
    def told(e: _Event) -> str:
        return f"{e.who} {verb} {_groups(e.details.get('groups'))} about {e.what}" + (
            f" (rule {e.details['rule']})" if e.details.get("rule") else ""
        )

    return told


def _fallback(e: _Event) -> str:
    waited = e.details.get("waited_seconds")
    after = f" after {waited:g} s" if isinstance(waited, int | float) else ""
    return f"nobody decided {e.what}{after}; {e.who}'s hook fell back to {e.details.get('fallback', 'its default')}"


def _refused(e: _Event) -> str:
    if e.raw.subject_type == "gate":
        gate = "the gate" if e.raw.subject_id == "gate" else f"the {e.raw.subject_id} gate"
        return f"{gate} refused a request from {e.who}{_reason(e.details)}"
    event = e.details.get("event", "a message")
    return (
        f"{e.raw.subject_type} destination {e.raw.subject_id[:12]} refused {event} "
        f"(event {e.details.get('event_id', '?')}){_reason(e.details, 'problem')}"
    )


def _run(verb: str, *, reason: bool = False) -> Callable[[_Event], str]:
    def told(e: _Event) -> str:
        run = f"run {e.raw.subject_id[:8]}" + (f" of {e.raw.agent_name}" if e.raw.agent_name else "")
        return f"{e.who} {verb.format(run=run)}" + (_reason(e.details) if reason else "") + _session(e.facts)

    return told


def _started(e: _Event) -> str:
    run = f"run {e.raw.subject_id[:8]}" + (f" of {e.raw.agent_name}" if e.raw.agent_name else "")
    session = e.details.get("session_id") or e.facts.session_id
    prompt = e.details.get("prompt")
    where = f" (gate session {session})" if session else ""
    return f"{e.who} started {run}{where}" + (f": {value_words(prompt, limit=80)}" if prompt else "")


def _paused(e: _Event) -> str:
    waiting = e.details.get("waiting_for")
    count = len(waiting) if isinstance(waiting, list) else 0
    waiting = "1 call is" if count == 1 else f"{count} calls are" if count else "its calls are"
    return f"run {e.raw.subject_id[:8]} of {e.raw.agent_name or 'its agent'} paused until {waiting} decided"


def _call(verb: str, *, key: str | None = None) -> Callable[[_Event], str]:
    def told(e: _Event) -> str:
        return f"{e.who} {verb.format(what=e.what)}" + (_reason(e.details, key) if key else "")

    return told


def _rule(verb: str) -> Callable[[_Event], str]:
    def told(e: _Event) -> str:
        version = e.details.get("version")
        kind = e.details.get("kind")
        text = f"{e.who} {verb} rule {e.raw.subject_id}" + (f" v{version}" if version is not None else "")
        if kind == "remembered" and verb != "remembered":
            text += " (remembered)"
        if e.details.get("call_id"):
            text += f" while deciding call {str(e.details['call_id'])[:8]}"
        return text

    return told


def _rules_applied(e: _Event) -> str:
    parts = [f"{len(v)} {k}" for k, v in e.details.items() if isinstance(v, list) and v]
    return f"{e.who} applied the rules file" + (f" ({', '.join(parts)})" if parts else "")


def _user(verb: str) -> Callable[[_Event], str]:
    def told(e: _Event) -> str:
        shown = {k: v for k, v in e.details.items() if k != "sessions_ended" and v is not None}
        extra = ", ".join(f"{k} {value_words(v, limit=40)}" for k, v in sorted(shown.items()))
        return f"{e.who} {verb} user {e.raw.subject_id}" + (f" ({extra})" if extra else "")

    return told


def _token(verb: str) -> Callable[[_Event], str]:
    def told(e: _Event) -> str:
        name = e.details.get("name")
        return f"{e.who} {verb} API token {name or '#' + e.raw.subject_id}" + (
            f" (role {e.details['role']})" if e.details.get("role") else ""
        )

    return told


def _login(e: _Event) -> str:
    whom = f"{'account' if e.raw.subject_type == 'account' else 'address'} {e.raw.subject_id}"
    if e.raw.action == "login.unlocked":
        return f"{e.who} unlocked logins for {whom}"
    seconds = e.details.get("seconds")
    return f"{e.who} locked logins for {whom} after {e.details.get('failures', 'too many')} failures" + (
        f", for {seconds} s" if seconds else ""
    )


def _archived(e: _Event) -> str:
    d = e.details
    return (
        f"{e.who} archived {d.get('events', 'the')} events ({d['first_event_id']}..{d['event_id']}, up to signed "
        f"checkpoint {d['checkpoint_seq']}) to the bundle {d.get('bundle', '?')} and deleted them from the database"
    )


_SENTENCES: dict[str, Callable[[_Event], str]] = {
    "audit.archived": _archived,  # issue 39 D: retention
    "call.requested": _requested,
    "call.approved": _approved,
    "call.edited": _edited,
    "call.denied": _denied,
    "call.answered": _call("answered {what} instead of running it", key="answer"),
    "call.expired": _call("let {what} expire undecided", key="reason"),
    "call.reminded": _follow_up("reminded"),
    "call.escalated": _follow_up("escalated to"),
    "call.fallback": _fallback,
    "call.refused": _refused,
    "call.executing": _call("was handed {what} to run"),
    "call.succeeded": _call("ran {what}: it succeeded"),
    "call.failed": _call("ran {what}: it failed", key="result"),
    "call.outcome_unknown": _call("cannot tell whether {what} ran", key="reason"),
    "call.retried": _call("will run {what} again", key="reason"),
    "call.released": _call("gave back {what} without running it"),
    "call.cancelled": _call("cancelled {what}", key="reason"),
    "call.pending": _call("put {what} back to wait for a decision"),
    "run.started": _started,
    "run.paused": _paused,
    "run.resumed": _run("resumed {run}"),
    "run.released": _run("let go of {run} for another worker"),
    "run.ready": _run("marked {run} ready: all its calls are decided"),
    "run.running": _run("let {run} go on: all its calls are decided"),
    "run.completed": _run("finished {run}"),
    "run.failed": _run("saw {run} fail", reason=True),
    "run.cancelled": _run("cancelled {run}", reason=True),
    "run.retried": _run("retried {run}"),
    "rule.created": _rule("created"),
    "rule.changed": _rule("changed"),
    "rule.deleted": _rule("deleted"),
    "rule.enabled": _rule("enabled"),
    "rule.disabled": _rule("disabled"),
    "rule.remembered": _rule("remembered"),
    "rules.applied": _rules_applied,
    "user.created": _user("created"),
    "user.updated": _user("updated"),
    "user.disabled": _user("disabled"),
    "user.groups_changed": _user("changed the groups of"),
    "user.contact_changed": _user("changed the contact details of"),
    "user.contact_kept": _user("kept the e-mail address of"),
    "user.provisioned": _user("provisioned"),
    "user.deactivated": _user("deactivated"),
    "user.reactivated": _user("reactivated"),
    "user.deleted": _user("deleted"),
    "user.reprovisioned": _user("updated the provisioned profile of"),
    "group.provisioned": lambda e: f"{e.who} provisioned group {e.raw.subject_id}",
    "group.deleted": lambda e: f"{e.who} deleted group {e.raw.subject_id}",
    "scim.refused": lambda e: (
        f"{e.who} was refused {e.raw.subject_id} ({e.details.get('status')}: "
        f"{value_words(e.details.get('detail'), limit=80)})"
    ),
    "token.created": _token("created"),
    "token.revoked": _token("revoked"),
    "login.locked": _login,
    "login.unlocked": _login,
    "user.logged_in": lambda e: (
        f"{e.who} signed in through {e.details.get('provider') or e.details.get('issuer', 'a provider')}"
    ),
    "login.refused": lambda e: f"{e.who} was refused sign-in ({e.details.get('reason', 'refused')})",  # issue 40 SSO
    "login.failed": lambda e: f"a sign-in through {e.raw.subject_id} failed: {e.details.get('reason', '?')}",
}
KNOWN_ACTIONS = frozenset(_SENTENCES)
"""Every action with a sentence of its own; `*.refused` of the delivery channels is told too."""


def _what(event: AuditEventLike, facts: EventFacts) -> str:
    if event.subject_type == "call":
        return f"{event.tool_name or 'a call'}{args_words(facts.args)}"
    return f"{event.subject_type} {event.subject_id}"


def _unknown(e: _Event) -> str:
    return f"{e.who} did `{e.raw.action}` on {e.what}"


def sentence(event: AuditEventLike, facts: EventFacts | None = None) -> str:
    """The event as one sentence a person can read."""
    facts = facts or EventFacts()
    details = event.details if isinstance(event.details, Mapping) else {}
    parts = _Event(actor_words(event.actor).text, _what(event, facts), details, facts, event)
    told = _SENTENCES.get(event.action)
    if told is None and event.action.endswith(".refused"):
        told = _refused
    try:
        return (told or _unknown)(parts)
    except (KeyError, TypeError, ValueError, AttributeError):  # details of an unexpected shape: still a sentence
        return _unknown(parts)
