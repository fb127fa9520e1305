"""Slack messages and the deny modal, built with slack_sdk's Block Kit models (which check Slack's limits).

A pending call becomes a message with the tool, the agent, its arguments (`call_summary`),
when it expires, whom it is routed to, and three buttons: Approve (its value carries the
call's id and the digest of the arguments shown, so an approval binds to what the reviewer
saw), Deny (opens a modal asking why) and Open in the inbox. A decided call's message loses
its buttons and says who decided. Text a model or a tool wrote is escaped (`&`, `<`, `>`)
wherever Slack would read markup, so it cannot mention `@channel` or dress up a link;
arguments go out as plain text.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Any

from slack_sdk.models.blocks import (
    ActionsBlock,
    Block,
    ButtonElement,
    ContextBlock,
    InputBlock,
    MarkdownTextObject,
    PlainTextInputElement,
    PlainTextObject,
    SectionBlock,
)
from slack_sdk.models.views import View

from ..store.models import ToolCallRow
from .call_summary import argument_lines, call_url

__all__ = (
    "ACTION_APPROVE",
    "ACTION_DENY",
    "ACTION_OPEN",
    "DENY_CALLBACK",
    "REASON_ACTION",
    "REASON_BLOCK",
    "Message",
    "ShownCall",
    "call_message",
    "deny_modal",
    "escape",
    "reminder_text",
)

ACTION_APPROVE = "approvals_approve"
ACTION_DENY = "approvals_deny"
ACTION_OPEN = "approvals_open"
DENY_CALLBACK = "approvals_deny_reason"
REASON_BLOCK = "deny_reason"
REASON_ACTION = "reason"
ACTIONS_BLOCK = "call_actions"
MAX_SECTION = 3000
MAX_REASON = 2000


@dataclass(frozen=True)
class Message:
    """A message's notification text (also what clients without blocks show) and its blocks."""

    text: str
    blocks: list[dict[str, Any]]


@dataclass(frozen=True)
class ShownCall:
    """What a button or a modal carries: the call, and the digest of the arguments the reviewer was shown."""

    call_id: str
    digest: str
    channel: str | None = None
    """The conversation of the message clicked (in the modal's metadata, for answers there)."""

    def encode(self) -> str:
        data = {"call": self.call_id, "digest": self.digest}
        if self.channel:
            data["channel"] = self.channel
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def decode(cls, text: str | None) -> ShownCall | None:
        """None for anything that is not what `encode` wrote."""
        try:
            data = json.loads(text or "")
        except ValueError:
            return None
        if not isinstance(data, dict):
            return None
        call_id, digest, channel = data.get("call"), data.get("digest"), data.get("channel")
        if not isinstance(call_id, str) or not isinstance(digest, str) or not call_id or not digest:
            return None
        return cls(call_id, digest, channel if isinstance(channel, str) else None)


def escape(text: str) -> str:
    """Text as Slack shows it literally in mrkdwn: its three control characters escaped, as Slack documents."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def call_message(
    call: ToolCallRow,
    *,
    public_url: str | None,
    open_: bool,
    status_line: str | None = None,
    note: str | None = None,
) -> Message:
    """The message about `call`: with buttons while it is `open_`; `status_line` says what became of it or how
    far its quorum got, `note` why this message was sent (an escalation)."""
    headline = f"*{escape(call.agent_name)}* asks to run *{escape(call.tool_name)}*"
    blocks: list[Block] = []
    if note:
        blocks.append(ContextBlock(elements=[MarkdownTextObject(text=f":rotating_light: {escape(note)}")]))
    blocks.append(SectionBlock(text=MarkdownTextObject(text=headline)))
    blocks.append(SectionBlock(text=PlainTextObject(text=_arguments(call.current_args), emoji=False)))
    blocks.append(ContextBlock(elements=[MarkdownTextObject(text=_facts(call, open_))]))
    if status_line:
        blocks.append(SectionBlock(text=MarkdownTextObject(text=f"*{escape(status_line)}*")))
    url = call_url(public_url, call.id)
    if open_:
        shown = ShownCall(call.id, call.current_digest).encode()
        buttons = [
            ButtonElement(text="Approve", action_id=ACTION_APPROVE, value=shown, style="primary"),
            ButtonElement(text="Deny", action_id=ACTION_DENY, value=shown, style="danger"),
        ]
        if url:
            buttons.append(ButtonElement(text="Open in the inbox", action_id=ACTION_OPEN, url=url))
        blocks.append(ActionsBlock(block_id=ACTIONS_BLOCK, elements=buttons))
    elif url:
        blocks.append(ContextBlock(elements=[MarkdownTextObject(text=f"<{url}|Open in the inbox>")]))
    prefix = "Approval needed" if open_ else (status_line or "Decided")
    text = escape(f"{prefix}: {call.agent_name} asks to run {call.tool_name}")
    return Message(text=text, blocks=[block.to_dict() for block in blocks])


def reminder_text(call: ToolCallRow) -> str:
    """A reply in the message's thread: the call still waits, and when it expires."""
    when = f" It expires {_date(call.expires_at)}." if call.expires_at else ""
    return f"Reminder: this call still waits for a decision.{when}"


def deny_modal(shown: ShownCall, call: ToolCallRow) -> dict[str, Any]:
    """The modal asking why a call is denied; its metadata carries the call, the digest shown and the channel."""
    intro = f"Deny *{escape(call.tool_name)}* for *{escape(call.agent_name)}*. The model reads your reason."
    view = View(
        type="modal",
        callback_id=DENY_CALLBACK,
        title=PlainTextObject(text="Deny this call"),
        submit=PlainTextObject(text="Deny"),
        close=PlainTextObject(text="Cancel"),
        private_metadata=shown.encode(),
        blocks=[
            SectionBlock(text=MarkdownTextObject(text=intro)),
            InputBlock(
                block_id=REASON_BLOCK,
                label=PlainTextObject(text="Why do you deny it?"),
                element=PlainTextInputElement(action_id=REASON_ACTION, multiline=True, max_length=MAX_REASON),
            ),
        ],
    )
    data: dict[str, Any] = view.to_dict()
    return data


def _arguments(args: Any) -> str:
    lines = [f"{line.name}: {line.value}" for line in argument_lines(args)]
    text = "\n".join(lines) or "(no arguments)"
    return text if len(text) <= MAX_SECTION else text[: MAX_SECTION - 1] + "…"


def _facts(call: ToolCallRow, open_: bool) -> str:
    groups = [str(group) for group in call.approver_groups or ()]
    routed = f"Routed to {escape(', '.join(groups))}" if groups else "Any reviewer may approve"
    parts = [routed]
    if call.approvals_required > 1:
        parts.append(f"{call.approvals_required} approvals needed")
    if open_ and call.expires_at:
        parts.append(f"Expires {_date(call.expires_at)}")
    parts.append(f"Call `{escape(call.id)}`")
    return " · ".join(parts)


def _date(when: dt.datetime | None) -> str:
    """Slack's date token: each reader sees their own time zone; the fallback is UTC."""
    if when is None:
        return ""
    when = when.astimezone(dt.UTC)
    return f"<!date^{int(when.timestamp())}^{{date_short_pretty}} at {{time}}|{when:%Y-%m-%d %H:%M} UTC>"
