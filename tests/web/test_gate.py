"""The gate over HTTP: any program asks about a call and waits for the decision; coding CLIs' hooks
always get an answer in their own format. Real HTTP through the app, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
import pytest

from approvals import hook_client
from approvals.engines.gate.hooks import FORMATS
from approvals.store import SYSTEM

from .conftest import WebApp

pytestmark = pytest.mark.anyio

SCHEMA = {
    "type": "object",
    "properties": {"order_id": {"type": "string"}, "amount": {"type": "number", "minimum": 0}},
    "required": ["order_id", "amount"],
    "additionalProperties": False,
}


async def asking_client(web: WebApp, *, scopes: list[str] | None = None, name: str = "agent") -> httpx.AsyncClient:
    """A client with a service token that may ask (and nothing else unless `scopes` say so)."""
    token = await web.store.people.create_token(name, role="reviewer", actor=SYSTEM, scopes=scopes or ["calls:ask"])
    return web.client(headers={"Authorization": f"Bearer {token}"})


def gate_call(**overrides: Any) -> dict[str, Any]:
    return {
        "source": "billing-service",
        "session_id": "s-1",
        "tool_name": "refund",
        "args": {"order_id": "A-1", "amount": 12.5},
        "idempotency_key": "call-1",
        "json_schema": SCHEMA,
        "description": "Refund an order",
        "context": {"requested_by": "go-service"},
        **overrides,
    }


async def decide(web: WebApp, call_id: str, body: dict[str, Any]) -> None:
    async with web.api("reviewer") as reviewer:
        response = await reviewer.post(f"/api/calls/{call_id}/decision", json=body)
        assert response.status_code == 200, response.text


async def test_ask_wait_decide_and_report_the_outcome(web: WebApp) -> None:
    async with await asking_client(web) as agent:
        asked = await agent.post("/api/gate/calls", json=gate_call())
        assert asked.status_code == 201, asked.text
        call = asked.json()
        assert call["decision"] == "pending" and call["url"].endswith(f"/calls/{call['call_id']}")

        await decide(web, call["call_id"], {"verdict": "approve"})
        answered = await agent.get(f"/api/gate/calls/{call['call_id']}", params={"wait": 5})
        assert answered.json()["decision"] == "approved"
        assert answered.json()["status"] == "executing"  # handed out: the caller runs it now
        assert answered.json()["args"] == {"order_id": "A-1", "amount": 12.5}

        again = await agent.post("/api/gate/calls", json=gate_call())  # the same key: the same call, no new one
        assert again.status_code == 200 and again.json()["call_id"] == call["call_id"]
        assert again.json()["decision"] == "approved"
        other = await agent.post("/api/gate/calls", json=gate_call(args={"order_id": "A-1", "amount": 99}))
        assert other.status_code == 409

        settled = await agent.post(f"/api/gate/calls/{call['call_id']}/outcome", json={"outcome": "succeeded"})
        assert settled.status_code == 200 and settled.json()["status"] == "succeeded"
    calls = (await web.store.calls.list_calls(status=None)).items
    assert [c.id for c in calls if c.tool_name == "refund"] == [call["call_id"]]
    assert (await web.store.audit.verify_audit()).ok


async def test_a_session_cancelled_while_the_caller_runs_the_call_leaves_it_to_a_person(web: WebApp) -> None:
    """Handed out, the call is executing: a cancel makes it outcome_unknown (it may have run), not cancelled,
    and the caller's late report is refused, as a cancelled run's worker's writes are."""
    async with await asking_client(web) as agent:
        call = (await agent.post("/api/gate/calls", json=gate_call())).json()
        await decide(web, call["call_id"], {"verdict": "approve"})
        assert (await agent.get(f"/api/gate/calls/{call['call_id']}")).json()["status"] == "executing"
        async with web.api("admin") as admin:
            run_id = (await web.store.calls.get_call(call["call_id"])).run_id
            assert (await admin.post(f"/api/runs/{run_id}/cancel", json={"reason": "stop"})).status_code == 200
        assert (await web.store.calls.get_call(call["call_id"])).status == "outcome_unknown"
        report = {"outcome": "succeeded", "result": "refunded"}
        late = await agent.post(f"/api/gate/calls/{call['call_id']}/outcome", json=report)
        assert late.status_code == 409
    inbox = (await web.store.calls.list_calls(status="outcome_unknown")).items
    assert [c.id for c in inbox] == [call["call_id"]]
    assert (await web.store.audit.verify_audit()).ok


async def test_a_waiting_caller_hears_the_decision_while_it_waits(web: WebApp) -> None:
    async with await asking_client(web) as agent:
        call = (await agent.post("/api/gate/calls", json=gate_call())).json()
        result: dict[str, Any] = {}

        async def wait_for_it() -> None:
            response = await agent.get(f"/api/gate/calls/{call['call_id']}", params={"wait": 30})
            result.update(response.json())

        async with anyio.create_task_group() as group:
            group.start_soon(wait_for_it)
            await anyio.sleep(0.3)
            await decide(web, call["call_id"], {"verdict": "deny", "reason": "Not this order."})
        assert result["decision"] == "denied" and result["reason"] == "Not this order."


async def test_of_two_requests_waiting_on_one_call_only_one_is_handed_it_to_run(web: WebApp) -> None:
    """Two polls of one approved call (a retry while the first still waits, or the MCP gateway's two identical
    calls): one approval is one run, so exactly one answer says `handed_out`; before, both said approved."""
    async with await asking_client(web) as agent:
        call = (await agent.post("/api/gate/calls", json=gate_call())).json()
        assert call["handed_out"] is False  # pending: nothing to run yet
        answers: list[dict[str, Any]] = []

        async def wait_for_it() -> None:
            response = await agent.get(f"/api/gate/calls/{call['call_id']}", params={"wait": 30})
            answers.append(response.json())

        async with anyio.create_task_group() as group:
            group.start_soon(wait_for_it)
            group.start_soon(wait_for_it)
            await anyio.sleep(0.3)
            await decide(web, call["call_id"], {"verdict": "approve"})
        assert [a["decision"] for a in answers] == ["approved", "approved"]
        assert sorted(a["handed_out"] for a in answers) == [False, True], answers
        again = (await agent.post("/api/gate/calls", json=gate_call())).json()  # asked again later: not again
        assert (again["decision"], again["status"], again["handed_out"]) == ("approved", "executing", False)
    trail = [
        e.action for e in (await web.store.audit.audit_events(subject_id=call["call_id"], newest_first=False)).items
    ]
    assert trail.count("call.executing") == 1


async def test_arguments_are_checked_against_the_schema_and_nothing_is_stored(web: WebApp) -> None:
    async with await asking_client(web) as agent:
        refused = await agent.post("/api/gate/calls", json=gate_call(args={"order_id": "A-1", "amount": -3}))
        assert refused.status_code == 422
        assert any("amount" in str(error) for error in refused.json()["errors"]), refused.json()
    assert (await web.store.calls.list_calls(status=None)).items == []


async def test_a_time_to_decide_past_any_date_is_refused_not_a_server_error(web: WebApp) -> None:
    """Found by schemathesis: a TTL of 1.8e308 s overflowed the expiry date (a 500)."""
    async with await asking_client(web) as agent:
        refused = await agent.post("/api/gate/calls", json=gate_call(approval_ttl=1.7976931348623157e308))
        assert refused.status_code == 422
        hooked = await hook(agent, claude_input(), ttl="1e308")
        assert decision_of(hooked)[0] == "deny" and "ttl" in (decision_of(hooked)[1] or "")
    assert (await web.store.calls.list_calls(status=None)).items == []


async def test_an_edit_comes_back_as_the_arguments_to_run(web: WebApp) -> None:
    async with await asking_client(web) as agent:
        call = (await agent.post("/api/gate/calls", json=gate_call())).json()
        async with web.api("reviewer") as reviewer:
            bad = await reviewer.post(
                f"/api/calls/{call['call_id']}/decision", json={"verdict": "edit", "args": {"order_id": "A-1"}}
            )
            assert bad.status_code == 422  # the schema stored with the call checks the edit
        await decide(web, call["call_id"], {"verdict": "edit", "args": {"order_id": "A-1", "amount": 5}})
        answer = (await agent.get(f"/api/gate/calls/{call['call_id']}")).json()
        assert answer["decision"] == "approved" and answer["edited"] is True
        assert answer["args"] == {"order_id": "A-1", "amount": 5}


async def test_only_tokens_with_the_ask_scope_may_ask_and_asking_is_not_deciding(web: WebApp) -> None:
    async with web.client() as nobody:
        assert (await nobody.post("/api/gate/calls", json=gate_call())).status_code == 401
    async with await asking_client(web, scopes=["calls:read"]) as reader:
        assert (await reader.post("/api/gate/calls", json=gate_call())).status_code == 403
    browser, csrf = await web.login("alice")  # a cookie session asks nothing, CSRF token or not
    response = await browser.post("/api/gate/calls", json=gate_call(), headers={"X-CSRFToken": csrf})
    await browser.aclose()
    assert response.status_code == 401
    async with await asking_client(web) as agent:
        call = (await agent.post("/api/gate/calls", json=gate_call())).json()
        decided = await agent.post(f"/api/calls/{call['call_id']}/decision", json={"verdict": "approve"})
        assert decided.status_code == 403


# Claude Code's HTTP hook, and the other CLIs' formats through the same endpoint


def claude_input(**overrides: Any) -> dict[str, Any]:
    return {
        "session_id": "cc-session-1",
        "transcript_path": "/home/dev/.claude/projects/x/t.jsonl",
        "cwd": "/home/dev/project",
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": "rm -rf build", "description": "Clean the build folder"},
        "tool_use_id": "toolu_01",
        **overrides,
    }


async def hook(client: httpx.AsyncClient, body: Any, cli: str = "claude-code", **params: Any) -> dict[str, Any]:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    response = await client.post(f"/api/hooks/{cli}", content=content, params={"wait": 0, **params})
    assert response.status_code == 200, response.text  # never an error: Claude Code would run the tool
    output: dict[str, Any] = response.json()
    assert hook_client.accepts(cli, output), output
    return output


def decision_of(output: dict[str, Any]) -> tuple[str, str | None, Any]:
    specific = output["hookSpecificOutput"]
    return specific["permissionDecision"], specific.get("permissionDecisionReason"), specific.get("updatedInput")


async def test_claude_code_allow_deny_edit_and_a_retry_finds_the_same_call(web: WebApp) -> None:
    async with await asking_client(web) as agent:
        waiting = decision_of(await hook(agent, claude_input()))
        assert waiting[0] == "deny" and "/calls/" in (waiting[1] or "")  # the default fallback names the call
        [call] = (await web.store.calls.list_calls()).items
        assert call.context["cwd"] == "/home/dev/project" and call.args["command"] == "rm -rf build"

        assert decision_of(await hook(agent, claude_input(), fallback="ask"))[0] == "ask"
        assert decision_of(await hook(agent, claude_input(), fallback="defer"))[0] == "defer"
        await decide(web, call.id, {"verdict": "edit", "args": {"command": "rm -rf build/tmp"}})
        allowed = decision_of(await hook(agent, claude_input()))
        assert allowed[0] == "allow" and allowed[2] == {"command": "rm -rf build/tmp"}
        assert len((await web.store.calls.list_calls(status=None)).items) == 1  # every retry found the same call

        second = claude_input(tool_use_id="toolu_02", tool_input={"command": "git push --force"})
        await hook(agent, second)
        [pending] = (await web.store.calls.list_calls()).items
        await decide(web, pending.id, {"verdict": "deny", "reason": "Never force-push main."})
        denied = decision_of(await hook(agent, second))
        assert denied[0] == "deny" and "Never force-push main." in (denied[1] or "")


async def test_an_edited_bash_command_is_validated(web: WebApp) -> None:
    async with await asking_client(web) as agent:
        await hook(agent, claude_input())
    [call] = (await web.store.calls.list_calls()).items
    async with web.api("reviewer") as reviewer:
        response = await reviewer.post(
            f"/api/calls/{call.id}/decision", json={"verdict": "edit", "args": {"command": ""}}
        )
        assert response.status_code == 422


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"{not json", "not JSON"),
        ({"hook_event_name": "SessionStart", "session_id": "s", "tool_name": "Bash", "tool_input": {}}, "SessionStart"),
        (claude_input(tool_input="rm -rf /"), "tool_input"),
        (claude_input(session_id=""), "session_id"),
        (claude_input(tool_input={"description": "no command"}), "command"),
        (["a", "list"], "JSON object"),
    ],
)
async def test_bad_hook_input_is_a_denial_that_says_why_and_nothing_is_stored(
    web: WebApp, body: Any, reason: str
) -> None:
    async with await asking_client(web) as agent:
        decision, said, _ = decision_of(await hook(agent, body))
    assert decision == "deny" and reason in (said or ""), said
    assert (await web.store.calls.list_calls(status=None)).items == []


async def test_refused_hook_input_is_audited(web: WebApp) -> None:
    async with await asking_client(web) as agent:
        await hook(agent, claude_input(tool_input={"description": "no command"}))
    [event] = [e for e in (await web.store.audit.audit_events()).items if e.action == "call.refused"]
    assert event.subject_id == "claude_code" and "command" in event.details["reason"]
    assert event.details["tool_name"] == "Bash"


async def test_an_oversized_body_and_a_bad_token_are_denials_not_errors(web: WebApp) -> None:
    async with await asking_client(web) as agent:
        huge = json.dumps(claude_input(tool_input={"command": "x" * 2_000_000})).encode()
        decision, said, _ = decision_of(await hook(agent, huge))
        assert decision == "deny" and "larger than" in (said or "")
    async with web.client(headers={"Authorization": "Bearer apv_not-a-token"}) as stranger:
        decision, said, _ = decision_of(await hook(stranger, claude_input()))
        assert decision == "deny" and "token" in (said or "")
    async with web.client() as nobody:
        assert decision_of(await hook(nobody, claude_input()))[0] == "deny"
    assert (await web.store.calls.list_calls(status=None)).items == []


@pytest.mark.parametrize("cli", ["codex", "gemini", "cursor"])
async def test_other_clis_get_their_own_format(web: WebApp, cli: str) -> None:
    inputs = {
        "codex": {**claude_input(), "session_id": "codex-1"},
        "gemini": {
            "session_id": "gemini-1",
            "cwd": "/w",
            "hook_event_name": "BeforeTool",
            "timestamp": "2026-11-26T17:00:00Z",
            "tool_name": "run_shell_command",
            "tool_input": {"command": "rm -rf build"},
        },
        "cursor": {
            "conversation_id": "cur-1",
            "generation_id": "gen-1",
            "hook_event_name": "beforeShellExecution",
            "command": "rm -rf build",
            "cwd": "/w",
            "workspace_roots": ["/w"],
        },
    }
    async with await asking_client(web) as agent:
        waiting = await hook(agent, inputs[cli], cli)
        assert waiting != {}  # not an allow
        [call] = (await web.store.calls.list_calls()).items
        assert call.args["command"] == "rm -rf build"
        await decide(web, call.id, {"verdict": "approve"})
        allowed = await hook(agent, inputs[cli], cli)
    assert allowed == ({"permission": "allow"} if cli == "cursor" else {})


def test_every_answer_a_format_writes_is_one_its_cli_reads() -> None:
    """The server's writer and the command client's check agree, for every verdict of every CLI."""
    from approvals.engines.gate.hooks import Permission, Verdict

    for cli, hook_format in FORMATS.items():
        for permission in Permission:
            for verdict in (
                Verdict(permission),
                Verdict(permission, "why"),
                Verdict(permission, "edited", updated_input={"command": "ls"}),
            ):
                assert hook_client.accepts(cli, hook_format.write(verdict)), (cli, verdict)
    assert not hook_client.accepts("codex", {"decision": "allow"})  # an unknown field: Codex would run the tool
    assert not hook_client.accepts("codex", {"hookSpecificOutput": {"permissionDecision": "allow"}})
    assert not hook_client.accepts("gemini", {"decision": "allow", "reason": "x"})
    assert not hook_client.accepts("claude-code", {"hookSpecificOutput": {"permissionDecision": "maybe"}})
    assert not hook_client.accepts("cursor", {"permission": "allow", "extra": 1})


async def test_the_call_page_shows_the_command_the_folder_and_the_sessions_other_calls(web: WebApp) -> None:
    async with await asking_client(web) as agent:
        await hook(agent, claude_input(tool_use_id="toolu_a", tool_input={"command": "ls -la"}))
        evil = {"command": "echo '<script>alert(1)</script>' && rm -rf build"}
        await hook(agent, claude_input(tool_use_id="toolu_b", tool_input=evil, cwd="/srv/<b>app</b>"))
    calls = (await web.store.calls.list_calls()).items
    latest = next(c for c in calls if c.tool_call_id == "toolu_b")
    browser, _ = await web.login("alice")
    page = (await browser.get(f"/calls/{latest.id}")).text
    await browser.aclose()
    assert (
        '<pre class="value command">echo &#39;&lt;script&gt;alert(1)&lt;/script&gt;&#39; &amp;&amp; rm -rf build</pre>'
        in page
    )
    assert "<script>alert(1)" not in page
    assert "/srv/&lt;b&gt;app&lt;/b&gt;" in page  # the working directory, escaped
    assert "This session" in page and '<pre class="command">ls -la</pre>' in page  # the earlier call
    assert f'action="/calls/{latest.id}/edit"' in page  # a gate call's edit is checked by its stored schema
    assert 'class="command"' in page.split(f'action="/calls/{latest.id}/edit"', 1)[1]  # a monospace box


async def test_only_the_asker_is_handed_its_approval(web: WebApp) -> None:
    async with await asking_client(web) as agent, await asking_client(web, name="other-agent") as other_agent:
        call = (await agent.post("/api/gate/calls", json=gate_call())).json()
        await decide(web, call["call_id"], {"verdict": "approve"})
        taken = await other_agent.get(f"/api/gate/calls/{call['call_id']}")
        assert taken.status_code == 403
        assert (await web.store.calls.get_call(call["call_id"])).status == "approved"  # still the asker's to run
        assert (await agent.get(f"/api/gate/calls/{call['call_id']}")).json()["status"] == "executing"


def codex_input(tool_use_id: str, command: str) -> dict[str, Any]:
    return {**claude_input(tool_use_id=tool_use_id, tool_input={"command": command}), "session_id": "codex-7"}


async def test_a_cli_asking_again_with_the_same_input_finds_the_waiting_call(web: WebApp) -> None:
    """The model retries after "it waits for approval" with a new tool call id: the same call, not a second one."""
    async with await asking_client(web) as agent:
        first = await hook(agent, codex_input("call_1", "make deploy"), "codex")
        assert "waits for a person" in first["hookSpecificOutput"]["permissionDecisionReason"]
        await hook(agent, codex_input("call_2", "make deploy"), "codex")
        [call] = (await web.store.calls.list_calls(status=None)).items
        await decide(web, call.id, {"verdict": "approve"})
        assert await hook(agent, codex_input("call_3", "make deploy"), "codex") == {}
        assert (await web.store.calls.get_call(call.id)).status == "executing"
        # handed out, it is done with: the same command later is a new call
        assert await hook(agent, codex_input("call_4", "make deploy"), "codex") != {}
    assert len((await web.store.calls.list_calls(status=None)).items) == 2


async def test_an_edit_a_cli_cannot_apply_is_run_once_the_model_asks_with_the_edited_input(web: WebApp) -> None:
    async with await asking_client(web) as agent:
        await hook(agent, codex_input("call_1", "rm -rf /srv/app"), "codex")
        [call] = (await web.store.calls.list_calls()).items
        await decide(web, call.id, {"verdict": "edit", "args": {"command": "rm -rf /srv/app/tmp"}})
        told = (await hook(agent, codex_input("call_1", "rm -rf /srv/app"), "codex"))["hookSpecificOutput"]
        assert told["permissionDecision"] == "deny" and '"rm -rf /srv/app/tmp"' in told["permissionDecisionReason"]
        assert not told["permissionDecisionReason"].endswith(".")  # Codex adds ". Command: ..." itself
        assert (await web.store.calls.get_call(call.id)).status == "approved"  # nothing was handed out to run
        assert await hook(agent, codex_input("call_2", "rm -rf /srv/app/tmp"), "codex") == {}
        assert (await web.store.calls.get_call(call.id)).status == "executing"
    assert len((await web.store.calls.list_calls(status=None)).items) == 1


async def test_a_post_tool_report_settles_the_call_that_ran(web: WebApp) -> None:
    """Claude Code's PostToolUse names the call by its tool_use_id; Gemini CLI's AfterTool by its tool and input."""
    async with await asking_client(web) as agent:
        await hook(agent, claude_input())
        [call] = (await web.store.calls.list_calls()).items
        await decide(web, call.id, {"verdict": "approve"})
        assert decision_of(await hook(agent, claude_input()))[0] == "allow"
        report = {**claude_input(), "hook_event_name": "PostToolUse", "tool_response": {"stdout": "", "stderr": ""}}
        response = await agent.post("/api/hooks/claude-code", json=report)
        assert response.status_code == 200 and response.json() == {}
        assert hook_client.accepts("claude-code", response.json(), "PostToolUse")
        settled = await web.store.calls.get_call(call.id)
        assert settled.status == "succeeded" and settled.result == {"stdout": "", "stderr": ""}

        before = {
            "session_id": "g-1",
            "hook_event_name": "BeforeTool",
            "timestamp": "2026-11-26T18:00:00Z",
            "tool_name": "run_shell_command",
            "tool_input": {"command": "make test"},
        }
        await hook(agent, before, "gemini")
        pending = next(c for c in (await web.store.calls.list_calls()).items if c.tool_name == "run_shell_command")
        await decide(web, pending.id, {"verdict": "approve"})
        assert await hook(agent, before, "gemini") == {}
        after = {
            **before,
            "hook_event_name": "AfterTool",
            "timestamp": "2026-11-26T18:00:09Z",
            "tool_response": "x" * 20_000,
        }
        assert (await agent.post("/api/hooks/gemini", json=after)).json() == {}
        ran = await web.store.calls.get_call(pending.id)
        assert ran.status == "succeeded" and len(ran.result["truncated"]) == 16_000  # a long output is cut

        stray = {**after, "tool_input": {"command": "ls"}}  # no call was handed out for it: nothing changes
        assert (await agent.post("/api/hooks/gemini", json=stray)).json() == {}
    assert (await web.store.audit.verify_audit()).ok


async def test_a_schema_that_is_not_plain_json_is_refused(web: WebApp) -> None:
    async with await asking_client(web) as agent:
        properties = {"order_id": {"type": "string"}, "amount": {"type": "number", "maximum": float("nan")}}
        schema = {**SCHEMA, "properties": properties}
        body = json.dumps(gate_call(json_schema=schema))
        refused = await agent.post("/api/gate/calls", content=body, headers={"Content-Type": "application/json"})
        assert refused.status_code in (400, 422), refused.text
        assert "plain JSON" in refused.text
    assert (await web.store.calls.list_calls(status=None)).items == []


async def test_the_mcp_gateway_asks_as_its_own_engine_and_its_retries_find_the_waiting_call(web: WebApp) -> None:
    """`engine: mcp` names the gateway on the run (rules may match it); a retry under a new key finds the call."""
    async with await asking_client(web) as agent:
        first = await agent.post(
            "/api/gate/calls",
            json=gate_call(engine="mcp", idempotency_key="k-1", same_arguments_same_call=True),
        )
        again = await agent.post(
            "/api/gate/calls",
            json=gate_call(engine="mcp", idempotency_key="k-2", same_arguments_same_call=True),
        )
        other = await agent.post("/api/gate/calls", json=gate_call(engine="mcp", idempotency_key="k-3"))
        unknown = await agent.post("/api/gate/calls", json=gate_call(engine="claude_code"))
        not_a_flag = await agent.post("/api/gate/calls", json=gate_call(engine="mcp", same_arguments_same_call=0))
    assert not_a_flag.status_code == 422  # 0 is no boolean (found by schemathesis)
    assert first.status_code == 201 and again.status_code == 200
    assert again.json()["call_id"] == first.json()["call_id"]
    assert other.status_code == 201 and other.json()["call_id"] != first.json()["call_id"]  # no flag: a new call
    assert unknown.status_code == 422  # the hooks' engines ask through their own endpoint
    call = await web.store.calls.get_call(first.json()["call_id"])
    assert (await web.store.runs.get_run(call.run_id)).engine == "mcp"


# Sessions belong to who opened them; every call knows who asked it (issue 36)

OWN_CALL = "You asked for this call, so another reviewer must approve it."
NOT_YOUR_SESSION = "Session 's1' of 'billing' was opened by another token or user; use a session id of your own"


async def test_a_session_is_its_openers_and_whoever_asked_a_call_never_approves_it(web: WebApp) -> None:
    """The reported hole: carol's asking token put a call into the session the billing service's token opened,
    and carol's deciding token, not the run's starter, approved it. Now the ask is refused and nothing stored,
    and a call carol asks in a session of her own waits for another reviewer."""
    await web.store.people.create_user("carol", "carol-pw-1234", role="reviewer", actor=SYSTEM)
    billing = await web.store.people.create_token("billing", role="reviewer", actor=SYSTEM, scopes=["calls:ask"])
    carol_asks = await web.store.people.create_token(
        "carol-ask", role="reviewer", actor=SYSTEM, user="carol", scopes=["calls:ask"]
    )
    carol_decides = await web.store.people.create_token(
        "carol-own", role="reviewer", actor=SYSTEM, user="carol", scopes=["calls:decide", "calls:read"]
    )
    opened = gate_call(source="billing", session_id="s1")
    slipped = gate_call(
        source="billing", session_id="s1", idempotency_key="call-2", args={"order_id": "A-9", "amount": 900}
    )

    def bearer(token: str) -> httpx.AsyncClient:
        return web.client(headers={"Authorization": f"Bearer {token}"})

    async with bearer(billing) as service, bearer(carol_asks) as carol, bearer(carol_decides) as carol_decider:
        first = await service.post("/api/gate/calls", json=opened)
        assert first.status_code == 201, first.text
        assert (await web.store.calls.get_call(first.json()["call_id"])).requested_by == "token:billing"

        refused = await carol.post("/api/gate/calls", json=slipped)
        assert refused.status_code == 403, refused.text
        assert refused.json()["detail"] == NOT_YOUR_SESSION
        peek = await carol.post("/api/gate/calls", json=opened)  # the opener's key: not handed to another asker
        assert peek.status_code == 403 and "was opened by another token or user" in peek.json()["detail"]
        waited = await carol.get(f"/api/gate/calls/{first.json()['call_id']}")
        assert waited.status_code == 403  # nor may she wait on (or be handed) the opener's call
        async with web.api("admin") as admin:  # an admin may settle a session's calls, not ask in it
            assert (await admin.post("/api/gate/calls", json=slipped)).status_code == 403

        own = await carol.post("/api/gate/calls", json={**slipped, "session_id": "carol-1"})
        assert own.status_code == 201, own.text
        own_id = own.json()["call_id"]
        assert (await web.store.calls.get_call(own_id)).requested_by == "carol"
        approved = await carol_decider.post(f"/api/calls/{own_id}/decision", json={"verdict": "approve"})
        assert approved.status_code == 403 and approved.json()["detail"] == OWN_CALL
        edit = {"verdict": "edit", "args": {"order_id": "A-9", "amount": 1}}
        assert (await carol_decider.post(f"/api/calls/{own_id}/decision", json=edit)).status_code == 403
        shown = (await carol_decider.get(f"/api/calls/{own_id}")).json()
        assert shown["status"] == "pending" and shown["requested_by"] == "carol"

    stored = (await web.store.calls.list_calls(status=None)).items
    assert sorted(c.id for c in stored) == sorted([first.json()["call_id"], own_id])  # nothing slipped in
    billing_run = (await web.store.calls.get_call(first.json()["call_id"])).run_id
    assert [c.tool_call_id for c in await web.store.calls.run_calls(billing_run)] == ["call-1"]
    refusals = [e for e in (await web.store.audit.audit_events()).items if e.action == "call.refused"]
    assert sorted(e.actor for e in refusals) == ["api-admin", "carol", "carol"]
    assert all(e.details["reason"] == NOT_YOUR_SESSION and e.details["session_id"] == "s1" for e in refusals)
    await decide(web, own_id, {"verdict": "approve"})  # another reviewer may
    assert (await web.store.audit.verify_audit()).ok


async def test_a_hook_in_another_tokens_session_is_denied_and_nothing_is_stored(web: WebApp) -> None:
    async with await asking_client(web) as agent, await asking_client(web, name="intruder") as intruder:
        await hook(agent, claude_input(tool_use_id="toolu_1"))  # waits for a person (the fallback answers meanwhile)
        decision, said, _ = decision_of(await hook(intruder, claude_input(tool_use_id="toolu_2")))
    assert decision == "deny" and "was opened by another token or user" in (said or "")
    assert [c.tool_call_id for c in (await web.store.calls.list_calls(status=None)).items] == ["toolu_1"]
