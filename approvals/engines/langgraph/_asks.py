"""What a paused LangGraph graph asks, in the shapes `HumanInTheLoopMiddleware` interrupts with, and our answers.

The middleware's `batched` mode (its default) raises one interrupt per model turn whose value
is a `HITLRequest`: `action_requests` (name, args, description) for the gated calls of the
last AI message, in the order of its `tool_calls`, answered with `{"decisions": [...]}` in
that order. Its `per_call` mode raises one interrupt per gated call, a `ToolApprovalRequest`
that names the call's id, answered with one decision. Both are answered here by interrupt id
(`Command(resume={interrupt_id: answer})`), which LangGraph maps to each waiting interrupt.

An `Ask` is kept in the run's snapshot between turns: which tool call each decision is for,
the decisions the middleware allows for it, and a decision already fixed by the engine
(arguments the tool's schema refused, sent back to the model as a retry).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

from langchain_core.messages import AIMessage, BaseMessage
from langgraph.types import Interrupt

from ...calls.verdicts import Answer, Approve, Deny, EditAndApprove, Verdict
from ...exceptions import UserError

__all__ = ("Ask", "AskedCall", "asks_of", "resume_map")


class AskedCall(TypedDict):
    id: str
    name: str
    args: dict[str, Any]
    description: str | None
    allowed: list[str] | None
    """The decision types the middleware accepts for the call; None when the interrupt does not say."""
    fixed: dict[str, Any] | None
    """The engine's own decision (a retry), given without asking anyone."""


class Ask(TypedDict):
    interrupt: str
    batched: bool
    calls: list[AskedCall]


def asks_of(interrupts: Sequence[Interrupt], messages: Sequence[BaseMessage]) -> list[Ask]:
    """The graph's pending interrupts as asks about tool calls; a `UserError` for an interrupt of another shape."""
    last = next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)
    calls = list(last.tool_calls) if last is not None else []
    asks: list[Ask] = []
    for pending in interrupts:
        value = pending.value
        if isinstance(value, Mapping) and isinstance(value.get("action_requests"), list):
            asks.append(Ask(interrupt=pending.id, batched=True, calls=_batched(value, calls)))
        elif isinstance(value, Mapping) and value.get("type") == "tool_approval":
            asked = AskedCall(
                id=str(value["tool_call_id"]),
                name=str(value["name"]),
                args=dict(value.get("args") or {}),
                description=value.get("description") or None,
                allowed=None,
                fixed=None,
            )
            asks.append(Ask(interrupt=pending.id, batched=False, calls=[asked]))
        else:
            raise UserError(
                f"The graph paused with an interrupt this engine cannot put to a person: {value!r}. It asks "
                "about tool calls in HumanInTheLoopMiddleware's shapes (action_requests, or tool_approval)."
            )
    return asks


def _batched(value: Mapping[str, Any], calls: list[Any]) -> list[AskedCall]:
    """Each action request paired with its tool call: the next unpaired call of that name and arguments, in order.

    The middleware asks in the order of the calls, leaving out those its `when` predicate lets
    through; arguments tell apart two calls of one tool.
    """
    configs = value.get("review_configs") or []
    used: set[int] = set()
    asked: list[AskedCall] = []
    for position, request in enumerate(value["action_requests"]):
        candidates = [i for i, call in enumerate(calls) if i not in used and call["name"] == request["name"]]
        index = next((i for i in candidates if calls[i]["args"] == request.get("args")), None)
        if index is None and candidates:
            index = candidates[0]
        if index is None or not calls[index].get("id"):
            raise UserError(
                f"The graph asks about a call to {request['name']!r} that its last AI message does not make"
            )
        used.add(index)
        allowed = configs[position].get("allowed_decisions") if position < len(configs) else None
        asked.append(
            AskedCall(
                id=str(calls[index]["id"]),
                name=str(request["name"]),
                args=dict(request.get("args") or {}),
                description=request.get("description") or None,
                allowed=list(allowed) if allowed is not None else None,
                fixed=None,
            )
        )
    return asked


def resume_map(asks: Sequence[Ask], verdicts: Mapping[str, Verdict]) -> dict[str, Any]:
    """The answer to each interrupt, by its id: the engine's fixed decisions and the people's verdicts."""
    answers: dict[str, Any] = {}
    for ask in asks:
        decisions = [call["fixed"] or _decision(call, verdicts) for call in ask["calls"]]
        answers[ask["interrupt"]] = {"decisions": decisions} if ask["batched"] else decisions[0]
    return answers


def _decision(call: AskedCall, verdicts: Mapping[str, Verdict]) -> dict[str, Any]:
    verdict = verdicts.get(call["id"])
    if verdict is None:
        raise UserError(f"No verdict was given for call {call['id']!r} ({call['name']}), which the run waits on")
    decision: dict[str, Any]
    if isinstance(verdict, Approve):
        decision = {"type": "approve"}
    elif isinstance(verdict, EditAndApprove):
        decision = {"type": "edit", "edited_action": {"name": call["name"], "args": verdict.args}}
    elif isinstance(verdict, Deny):
        decision = {"type": "reject", "message": verdict.reason}
    else:
        assert isinstance(verdict, Answer), verdict
        content = verdict.content
        decision = {"type": "respond", "message": content if isinstance(content, str) else json.dumps(content)}
    allowed = call["allowed"]
    if allowed is not None and decision["type"] not in allowed:
        raise UserError(
            f"Call {call['id']!r} ({call['name']}) was decided with {decision['type']!r}, which its "
            f"HumanInTheLoopMiddleware allows only as {', '.join(allowed)}"
        )
    return decision
