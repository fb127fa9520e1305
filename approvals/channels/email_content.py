"""The mail a reviewer gets about a call: subject, a plain-text part and an HTML part with the same content.

Both parts say which agent wants to run which tool, with what arguments (`call_summary`'s
short lines; the full arguments are on the confirmation page and the call's page), until
when, whom it is routed to, and carry three links: Approve, Deny (a reason is asked on the
page) and Open in the inbox. Every value from the call is escaped in the HTML part and kept
out of headers' line structure: an argument is data, never markup or a header.
"""

from __future__ import annotations

import datetime as dt
import html
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from typing import Literal

from ..store.models import ToolCallRow
from .call_summary import argument_lines

__all__ = ("MailLinks", "Purpose", "compose_call_mail", "subject_for")

Purpose = Literal["pending", "reminder", "escalation"]

_SUBJECT_PREFIX: dict[Purpose, str] = {
    "pending": "Approval needed",
    "reminder": "Reminder: approval needed",
    "escalation": "Escalated: approval needed",
}
_MAX_SUBJECT_PART = 80


@dataclass(frozen=True)
class MailLinks:
    """Where the mail's buttons lead: the recipient's own single-use links, and the call's page."""

    approve: str
    deny: str
    inbox: str | None
    links_expire_at: dt.datetime


def _one_line(text: str, limit: int = _MAX_SUBJECT_PART) -> str:
    """No line breaks or control characters (they would end a header), cut to `limit`."""
    flat = " ".join("".join(ch if ch.isprintable() else " " for ch in text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def subject_for(call: ToolCallRow, purpose: Purpose) -> str:
    """E.g. "Approval needed: refund (billing-service)"."""
    return f"{_SUBJECT_PREFIX[purpose]}: {_one_line(call.tool_name)} ({_one_line(call.agent_name)})"


def _when(at: dt.datetime | None) -> str:
    return at.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M UTC") if at is not None else "no expiry"


def _routing(call: ToolCallRow) -> str:
    groups = ", ".join(call.approver_groups or ()) or "any reviewer"
    needed = call.approvals_required
    words = f"{groups} ({needed} approval{'s' if needed != 1 else ''} needed)"
    return f"{words}, by rule {call.rule_name}" if call.rule_name else words


def _opening(call: ToolCallRow, purpose: Purpose, groups: tuple[str, ...]) -> str:
    asks = f"{call.agent_name} wants to run {call.tool_name}, and a person must decide."
    if purpose == "reminder":
        return f"Reminder: nobody has decided this call yet, and it expires at {_when(call.expires_at)}. {asks}"
    if purpose == "escalation":
        told = ", ".join(groups) or "your group"
        return f"Nobody has decided this call yet, so it was escalated to {told}. {asks}"
    return asks


def _facts(call: ToolCallRow) -> list[tuple[str, str]]:
    return [
        ("Tool", call.tool_name),
        ("Agent", call.agent_name),
        ("Expires", _when(call.expires_at)),
        ("Routed to", _routing(call)),
    ]


def _fine_print(links: MailLinks) -> str:
    return (
        "These links are yours alone, work once, and only for the arguments above, "
        f"until {_when(links.links_expire_at)}. "
        "Opening one shows a confirmation page: nothing is decided until you confirm there."
    )


def _text(call: ToolCallRow, purpose: Purpose, links: MailLinks, groups: tuple[str, ...]) -> str:
    lines = [_opening(call, purpose, groups), ""]
    lines += [f"{name}: {value}" for name, value in _facts(call)]
    lines += ["", "Arguments:"]
    lines += [f"  {line.name}: {line.value}" for line in argument_lines(call.current_args)]
    lines += ["", f"Approve: {links.approve}", f"Deny (you will be asked why): {links.deny}"]
    if links.inbox:
        lines.append(f"Open in the inbox: {links.inbox}")
    lines += ["", _fine_print(links), ""]
    return "\n".join(lines)


def _html(call: ToolCallRow, purpose: Purpose, links: MailLinks, groups: tuple[str, ...]) -> str:
    e = html.escape
    facts = "".join(
        f'<tr><th align="left" style="padding:2px 12px 2px 0;color:#5b6575">{e(name)}</th><td>{e(value)}</td></tr>'
        for name, value in _facts(call)
    )
    args = "".join(
        f'<tr><th align="left" style="padding:2px 12px 2px 0;font-family:monospace">{e(line.name)}</th>'
        f'<td style="font-family:monospace;word-break:break-word">{e(line.value)}</td></tr>'
        for line in argument_lines(call.current_args)
    )
    button = "display:inline-block;padding:8px 16px;margin:0 8px 8px 0;border-radius:6px;text-decoration:none;"
    buttons = [
        f'<a href="{e(links.approve)}" style="{button}background:#137a3a;color:#ffffff">Approve</a>',
        f'<a href="{e(links.deny)}" style="{button}background:#b3261e;color:#ffffff">Deny</a>',
    ]
    if links.inbox:
        buttons.append(
            f'<a href="{e(links.inbox)}" style="{button}border:1px solid #2457d6;color:#2457d6">Open in the inbox</a>'
        )
    return (
        "<!doctype html>\n"
        '<html><body style="font-family:system-ui,sans-serif;color:#1d2430;max-width:640px">'
        f"<p>{e(_opening(call, purpose, groups))}</p>"
        f"<table>{facts}</table>"
        f"<h3>Arguments</h3><table>{args}</table>"
        f'<p style="margin-top:16px">{"".join(buttons)}</p>'
        f'<p style="color:#5b6575;font-size:13px">{e(_fine_print(links))}</p>'
        "</body></html>\n"
    )


def compose_call_mail(
    call: ToolCallRow,
    *,
    sender: str,
    recipient: str,
    links: MailLinks,
    purpose: Purpose = "pending",
    groups: tuple[str, ...] = (),
) -> EmailMessage:
    """One recipient's mail about `call`, with a fresh Message-ID; `groups`: those an escalation told."""
    message = EmailMessage()
    message["Subject"] = subject_for(call, purpose)
    message["From"] = sender
    message["To"] = recipient
    message["Date"] = formatdate(localtime=False)
    domain = sender.rpartition("@")[2].strip("<> ") or None
    message["Message-ID"] = make_msgid(domain=domain)
    message["Auto-Submitted"] = "auto-generated"  # RFC 3834: vacation responders do not answer it
    message.set_content(_text(call, purpose, links, groups))
    message.add_alternative(_html(call, purpose, links, groups), subtype="html")
    return message
