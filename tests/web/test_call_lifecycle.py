"""The call lifecycle for an agent that runs elsewhere, through a small test engine and the real API.

`ScriptedGate` is an engine registered by name that does what every gate does: it requests a
decision on a tool call (arguments validated against a JSON Schema it gives), waits for it,
runs the tool itself when approved and settles the call with the outcome. Reviewers decide
through `POST /api/calls/{id}/decision`; the calls show in the inbox and the audit chain holds.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest

from approvals.calls import CallRequest
from approvals.calls.states import CallStatus, RunStatus
from approvals.calls.verdicts import Approve
from approvals.engines import GateEngine, get_engine, register_engine
from approvals.exceptions import Conflict, Forbidden, InvalidArguments, UserError
from approvals.service import ApprovalService
from approvals.store import Actor
from approvals.store.calls import session_run_id
from approvals.store.models import ToolCallRow

from .conftest import WebApp

pytestmark = pytest.mark.anyio

ENGINE = "scripted_gate"
REFUND_SCHEMA = {
    "type": "object",
    "properties": {"order_id": {"type": "string"}, "amount": {"type": "number", "exclusiveMinimum": 0}},
    "required": ["order_id", "amount"],
    "additionalProperties": False,
}
CLIENT = Actor(id="gate-client", role="reviewer", person=False)
"""The program that asks: a service identity, which may request calls but never approve them."""


@pytest.fixture(autouse=True, scope="module")
def scripted_gate_engine() -> None:
    try:
        get_engine(ENGINE)
    except UserError:
        register_engine(GateEngine(ENGINE))


@dataclass
class ScriptedGate:
    """A test engine: asks about each call, waits for people, runs the tool itself, reports how it went."""

    web: WebApp
    tools: dict[str, Callable[..., Any]]
    session_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    ran: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def request(self, tool: str, args: dict[str, Any], *, key: str | None = None, **options: Any) -> CallRequest:
        return CallRequest(
            engine=ENGINE,
            source="billing-service",
            session_id=self.session_id,
            tool_name=tool,
            args=args,
            tool_call_id=key or uuid.uuid4().hex,
            json_schema=REFUND_SCHEMA,
            description="Refund an order.",
            context={"cwd": "/srv/billing"},
            **options,
        )

    async def ask(self, request: CallRequest) -> ToolCallRow:
        service: ApprovalService = self.web.app.state.context.service
        call, _ = await service.request_call(request, actor=CLIENT)
        return call

    async def wait(self, call: ToolCallRow, seconds: float = 30.0) -> ToolCallRow:
        return await self.web.store.calls.wait_for_decision(call.id, seconds=seconds)

    async def call_tool(self, request: CallRequest) -> ToolCallRow:
        """The whole cycle: ask, wait, and run the tool (with a reviewer's edit) only if approved."""
        decided = await self.wait(await self.ask(request))
        if decided.status != CallStatus.APPROVED:
            return decided
        args = decided.current_args
        try:
            result = self.tools[request.tool_name](**args)
        except Exception as exc:
            return await self.web.store.calls.settle_call(decided.id, CallStatus.FAILED, str(exc), actor=CLIENT)
        self.ran.append((request.tool_name, args))
        return await self.web.store.calls.settle_call(decided.id, CallStatus.SUCCEEDED, result, actor=CLIENT)


def refund(order_id: str, amount: float) -> str:
    return f"refunded {amount} on {order_id}"


async def pending_call_in_inbox(web: WebApp, tool: str = "refund") -> dict[str, Any]:
    """The first pending call of `tool` the inbox lists, once it is there."""
    async with web.api("viewer") as client:
        with anyio.fail_after(20):
            while True:
                inbox = (await client.get("/api/calls", params={"tool_name": tool})).json()
                if inbox["items"]:
                    item: dict[str, Any] = inbox["items"][0]
                    return item
                await anyio.sleep(0.02)


async def decide(web: WebApp, call_id: str, body: dict[str, Any], role: str = "reviewer") -> Any:
    async with web.api(role) as client:
        return await client.post(f"/api/calls/{call_id}/decision", json=body)


async def test_a_gate_call_waits_for_an_approval_given_through_the_api_and_is_settled(web: WebApp) -> None:
    gate = ScriptedGate(web, {"refund": refund})
    outcome: list[ToolCallRow] = []
    async with anyio.create_task_group() as group:

        async def ask() -> None:
            outcome.append(await gate.call_tool(gate.request("refund", {"order_id": "A-1", "amount": 25.5})))

        group.start_soon(ask)
        listed = await pending_call_in_inbox(web)
        assert listed["agent"] == "billing-service"
        assert listed["args"] == {"order_id": "A-1", "amount": 25.5}
        assert listed["context"] == {"cwd": "/srv/billing"}
        assert gate.ran == []  # nothing runs before a person says yes
        response = await decide(web, listed["id"], {"verdict": "approve", "args_digest": listed["current_args_digest"]})
        assert response.status_code == 200, response.text

    settled = outcome[0]
    assert settled.status == CallStatus.SUCCEEDED
    assert settled.result == "refunded 25.5 on A-1"
    assert gate.ran == [("refund", {"order_id": "A-1", "amount": 25.5})]
    async with web.api("viewer") as client:
        call = (await client.get(f"/api/calls/{settled.id}")).json()
        assert call["status"] == "succeeded"
        assert call["tool_definition"]["parameters_json_schema"] == REFUND_SCHEMA
        run = (await client.get(f"/api/runs/{settled.run_id}")).json()
        assert (run["engine"], run["session_id"], run["status"]) == (ENGINE, gate.session_id, "running")
        audit = (await client.get("/api/audit", params={"run": settled.run_id})).json()
        actions = [event["action"] for event in reversed(audit["items"])]
        assert actions == [
            "run.started",
            "call.requested",
            "run.paused",
            "call.approved",
            "run.running",
            "call.succeeded",
        ]
        verified = (await client.get("/api/audit/verify")).json()
        assert verified["ok"] is True


async def test_arguments_that_break_the_schema_are_refused_with_its_errors_and_nothing_is_stored(web: WebApp) -> None:
    gate = ScriptedGate(web, {"refund": refund})
    with pytest.raises(InvalidArguments) as refused:
        await gate.ask(gate.request("refund", {"order_id": 7, "amount": -1, "note": "x"}))
    errors = dict(refused.value.errors)
    assert "is not of type 'string'" in errors["order_id"]
    assert "less than or equal to the minimum of 0" in errors["amount"]
    assert "Additional properties are not allowed ('note' was unexpected)" in errors[""]
    async with web.api("viewer") as client:
        assert (await client.get("/api/calls", params={"status": "all"})).json()["items"] == []
        assert (
            await client.get(f"/api/runs/{session_run_id(ENGINE, 'billing-service', gate.session_id)}")
        ).status_code == 404


async def test_an_unusable_request_is_refused_before_anything_is_stored(web: WebApp) -> None:
    gate = ScriptedGate(web, {})
    with pytest.raises(UserError, match="json_schema must describe an object"):
        await gate.ask(CallRequest(**{**gate.request("refund", {}).__dict__, "json_schema": {"type": "string"}}))
    with pytest.raises(UserError, match="tool_name must not be empty"):
        await gate.ask(gate.request(" ", {"order_id": "A", "amount": 1}))
    with pytest.raises(UserError, match="is not a gate"):
        await gate.ask(
            CallRequest(**{**gate.request("refund", {"order_id": "A", "amount": 1}).__dict__, "engine": "native"})
        )


async def test_asking_again_with_the_same_key_gets_the_same_call_and_its_decision(web: WebApp) -> None:
    gate = ScriptedGate(web, {"refund": refund})
    request = gate.request("refund", {"order_id": "A-2", "amount": 10}, key="toolu_01")
    service = web.app.state.context.service
    first, created = await service.request_call(request, actor=CLIENT)
    again, created_again = await service.request_call(request, actor=CLIENT)
    assert (created, created_again) == (True, False)
    assert again.id == first.id
    response = await decide(web, first.id, {"verdict": "deny", "reason": "Refunds go through the shop."})
    assert response.status_code == 200, response.text
    after, created_after = await service.request_call(request, actor=CLIENT)
    assert (after.id, after.status, after.denial_reason, created_after) == (
        first.id,
        CallStatus.DENIED,
        "Refunds go through the shop.",
        False,
    )
    assert (await gate.wait(after, seconds=0)).status == CallStatus.DENIED
    with pytest.raises(Conflict, match="other arguments"):
        await service.request_call(
            gate.request("refund", {"order_id": "A-2", "amount": 99}, key="toolu_01"), actor=CLIENT
        )
    async with web.api("viewer") as client:
        calls = (await client.get(f"/api/runs/{first.run_id}/calls")).json()["items"]
        assert [call["id"] for call in calls] == [first.id]


async def test_an_edit_is_validated_by_the_schema_and_the_caller_runs_the_edited_arguments(web: WebApp) -> None:
    gate = ScriptedGate(web, {"refund": refund})
    outcome: list[ToolCallRow] = []
    async with anyio.create_task_group() as group:

        async def ask() -> None:
            outcome.append(await gate.call_tool(gate.request("refund", {"order_id": "A-3", "amount": 500})))

        group.start_soon(ask)
        listed = await pending_call_in_inbox(web)
        digest = listed["current_args_digest"]
        bad = await decide(web, listed["id"], {"verdict": "edit", "args": {"order_id": "A-3"}, "args_digest": digest})
        assert bad.status_code == 422
        assert bad.json()["errors"] == [{"loc": "", "msg": "'amount' is a required property"}]
        good = {"verdict": "edit", "args": {"order_id": "A-3", "amount": 50}, "args_digest": digest}
        response = await decide(web, listed["id"], good)
        assert response.status_code == 200, response.text

    assert outcome[0].status == CallStatus.SUCCEEDED
    assert gate.ran == [("refund", {"order_id": "A-3", "amount": 50})]


async def test_a_quorum_call_waits_for_two_people_and_the_caller_may_not_approve(web: WebApp) -> None:
    gate = ScriptedGate(web, {"refund": refund})
    call = await gate.ask(gate.request("refund", {"order_id": "A-4", "amount": 1}, approvals_required=2))
    with pytest.raises(Forbidden, match="service token"):
        await web.store.calls.decide(call.id, Approve(), actor=CLIENT)
    first = await decide(web, call.id, {"verdict": "approve"}, role="reviewer")
    assert first.json()["status"] == "pending"
    assert (await gate.wait(call, seconds=0.05)).status == CallStatus.PENDING
    second = await decide(web, call.id, {"verdict": "approve"}, role="admin")
    assert second.json()["status"] == "approved"
    assert (await gate.wait(call, seconds=0)).status == CallStatus.APPROVED


async def test_a_call_nobody_decides_in_time_expires_while_its_caller_waits(web: WebApp) -> None:
    gate = ScriptedGate(web, {"refund": refund})
    call = await gate.ask(gate.request("refund", {"order_id": "A-5", "amount": 1}, approval_ttl=0.3))
    decided = await gate.wait(call, seconds=20)
    assert decided.status == CallStatus.EXPIRED
    assert decided.denial_reason is not None and "No one decided within 0 seconds" in decided.denial_reason
    run = await web.store.runs.get_run(call.run_id)
    assert run.status == RunStatus.RUNNING  # a gate's run goes on where its agent runs; no worker claims it
    assert await web.store.runs.claim("worker-1") is None


async def test_only_the_caller_settles_and_only_an_approved_call(web: WebApp) -> None:
    gate = ScriptedGate(web, {"refund": refund})
    call = await gate.ask(gate.request("refund", {"order_id": "A-6", "amount": 1}))
    with pytest.raises(Conflict, match="only an approved call is settled"):
        await web.store.calls.settle_call(call.id, CallStatus.SUCCEEDED, "done", actor=CLIENT)
    assert (await decide(web, call.id, {"verdict": "approve"})).status_code == 200
    stranger = Actor(id="someone-else", role="reviewer")
    with pytest.raises(Forbidden, match="did not ask for call"):
        await web.store.calls.settle_call(call.id, CallStatus.SUCCEEDED, "done", actor=stranger)
    with pytest.raises(UserError, match="outcome is one of"):
        await web.store.calls.settle_call(call.id, CallStatus.DENIED, None, actor=CLIENT)
    settled = await web.store.calls.settle_call(call.id, CallStatus.OUTCOME_UNKNOWN, None, actor=CLIENT)
    assert settled.status == CallStatus.OUTCOME_UNKNOWN
    with pytest.raises(Conflict):
        await web.store.calls.settle_call(call.id, CallStatus.SUCCEEDED, "again", actor=CLIENT)
    async with web.api("viewer") as client:
        inbox = (await client.get("/api/calls", params={"status": "outcome_unknown"})).json()["items"]
        assert [item["id"] for item in inbox] == [call.id]  # a person settles what the caller could not tell


async def test_a_cancelled_session_takes_no_more_calls(web: WebApp) -> None:
    gate = ScriptedGate(web, {"refund": refund})
    call = await gate.ask(gate.request("refund", {"order_id": "A-7", "amount": 1}))
    async with web.api("admin") as client:
        response = await client.post(f"/api/runs/{call.run_id}/cancel", json={"reason": "session over"})
        assert response.status_code == 200, response.text
    assert (await gate.wait(call, seconds=0)).status == CallStatus.CANCELLED
    with pytest.raises(Conflict, match="ended"):
        await gate.ask(gate.request("refund", {"order_id": "A-8", "amount": 1}))


async def test_the_pages_show_a_gate_call_with_its_context_and_its_session(web: WebApp) -> None:
    gate = ScriptedGate(web, {"refund": refund})
    request = gate.request("refund", {"order_id": "A-9", "amount": 3})
    hostile = CallRequest(**{**request.__dict__, "context": {"cwd": "/srv/<script>alert(1)</script>", "pid": 42}})
    call = await gate.ask(hostile)
    client, _ = await web.login("alice")
    page = (await client.get(f"/calls/{call.id}")).text
    assert "/srv/&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<script>alert(1)</script>" not in page
    assert "<dt>pid</dt><dd><code>42</code></dd>" in page
    run_page = (await client.get(f"/runs/{call.run_id}")).text
    assert f"{ENGINE} · session <code>{gate.session_id}</code>" in run_page
    inbox = (await client.get("/")).text
    assert "billing-service" in inbox
    await client.aclose()
