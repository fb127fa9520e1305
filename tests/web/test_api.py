"""The JSON API over real HTTP (ASGI), on SQLite and PostgreSQL: runs, calls, decisions, resumes, audit, errors."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import fastapi.dependencies.utils
import fastapi.routing
import httpx
import pytest
from starlette.concurrency import run_in_threadpool

from approvals.store import Actor, Database, Store
from approvals.store.audit import run_event
from approvals.store.queries import encode_cursor
from approvals.worker.resumer import AgentRegistry, Resumer

from ..store.agents import Gate, slow_agent
from ..store.conftest import execute, record_refused_writes
from .conftest import WebApp

pytestmark = pytest.mark.anyio

SERVICE = Actor("svc", "reviewer")
PROBLEM = "application/problem+json"


async def paused_run(
    web: WebApp, tmp_path: Path, agent: str = "shop", prompt: str = "go"
) -> tuple[str, dict[str, Any]]:
    """A run started by a service, resumed until it waits for people; its calls by tool name (as the API shows them)."""
    run_id = await web.store.runs.start_run(agent, prompt, actor=SERVICE, deps={"log": str(tmp_path / "log")})
    run = await web.app.state.context.service.resume_now(run_id)
    assert run.status == "awaiting_approval"
    async with web.api("viewer") as api:
        calls = (await api.get(f"/api/runs/{run_id}/calls")).json()["items"]
    return run_id, {c["tool"]: c for c in calls}


@asynccontextmanager
async def session(web: WebApp, username: str) -> AsyncIterator[tuple[httpx.AsyncClient, dict[str, str]]]:
    """A logged-in browser-like client and the CSRF header its posts need."""
    client, csrf = await web.login(username)
    try:
        yield client, {"x-csrftoken": csrf}
    finally:
        await client.aclose()


def assert_problem(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM
    body: dict[str, Any] = response.json()
    assert body["status"] == status and body["title"] and body["detail"]
    return body


async def audit_count(web: WebApp) -> int:
    return await web.store.audit.last_audit_event_id()


# Runs


async def test_a_reviewer_starts_a_run_of_a_registered_agent(web: WebApp) -> None:
    async with web.api("reviewer") as api:
        response = await api.post("/api/runs", json={"agent": "shop", "prompt": "refund A-1", "deps": {"log": "x"}})
        assert response.status_code == 201, response.text
        run = response.json()
        assert run["agent"] == "shop" and run["status"] == "ready" and run["prompt"] == "refund A-1"
        assert run["started_by"] == "api-reviewer"
        assert response.headers["location"] == f"/api/runs/{run['id']}"
        assert (await api.get(response.headers["location"])).json() == run
    stored = await web.store.runs.get_run(run["id"])
    assert stored.deps == {"log": "x"} and stored.status == "ready"


async def test_an_unknown_agent_is_a_404_problem_and_no_run_is_started(web: WebApp) -> None:
    async with web.api("reviewer") as api:
        problem = assert_problem(await api.post("/api/runs", json={"agent": "nope", "prompt": "hi"}), 404)
        assert "nope" in problem["detail"]
        assert (await api.get("/api/runs")).json()["items"] == []


async def test_request_bodies_refuse_fields_they_do_not_know_such_as_an_actor(web: WebApp, tmp_path: Path) -> None:
    _, calls = await paused_run(web, tmp_path)
    before = await audit_count(web)
    async with web.api("reviewer") as api:
        problem = assert_problem(
            await api.post("/api/runs", json={"agent": "shop", "prompt": "x", "started_by": "ada"}), 422
        )
        assert [e["loc"] for e in problem["errors"]] == ["body.started_by"]
        refund = calls["refund"]["id"]
        problem = assert_problem(
            await api.post(f"/api/calls/{refund}/decision", json={"verdict": "approve", "actor": "ada"}), 422
        )
        assert any(e["loc"].endswith("actor") for e in problem["errors"])
        assert (await api.get(f"/api/calls/{refund}")).json()["status"] == "pending"
    assert await audit_count(web) == before


@pytest.mark.parametrize(
    ("content", "headers"),
    [
        (b'{"agent": "shop", "prompt": ', {"content-type": "application/json"}),
        (b"[1, 2]", {"content-type": "application/json"}),
        (b'"just a string"', {"content-type": "application/json"}),
        (b'{"agent": "shop", "prompt": "x"}', {"content-type": "text/plain"}),
        (b'{"agent": "shop", "prompt": "x"}', {}),
        (b"\xff\xfe not utf-8", {"content-type": "application/json"}),
        (b"", {"content-type": "application/json"}),
    ],
)
async def test_malformed_bodies_are_problems_never_500(web: WebApp, content: bytes, headers: dict[str, str]) -> None:
    async with web.api("reviewer") as api:
        response = await api.post("/api/runs", content=content, headers=headers)
        assert response.status_code in (400, 422), response.text
        assert_problem(response, response.status_code)
        assert (await api.get("/api/runs")).json()["items"] == []


async def test_runs_are_listed_newest_first_in_keyset_pages_with_filters(web: WebApp) -> None:
    ids = [await web.store.runs.start_run(agent, "go", actor=SERVICE) for agent in ("shop", "mailer", "shop")]
    async with web.api("viewer") as api:
        first = (await api.get("/api/runs", params={"limit": 2})).json()
        assert [r["id"] for r in first["items"]] == ids[::-1][:2]
        second = (await api.get("/api/runs", params={"limit": 2, "after": first["next_cursor"]})).json()
        assert [r["id"] for r in second["items"]] == [ids[0]] and second["next_cursor"] is None
        shop = (await api.get("/api/runs", params={"agent": "shop"})).json()["items"]
        assert [r["id"] for r in shop] == [ids[2], ids[0]]
        assert len((await api.get("/api/runs", params={"status": "ready"})).json()["items"]) == 3
        assert (await api.get("/api/runs", params={"status": "completed"})).json()["items"] == []
        assert_problem(await api.get("/api/runs", params={"status": "sleeping"}), 422)
        assert_problem(await api.get("/api/runs", params={"limit": 0}), 422)
        assert_problem(await api.get("/api/runs", params={"limit": 501}), 422)


@pytest.mark.parametrize(
    "cursor",
    [
        "not-a-cursor",
        encode_cursor("2024-01-01T00:00:00", "abc"),  # a naive time: the database would refuse it
        encode_cursor("2024-01-01T00:00:00+00:00", "a\x00b"),  # NUL: PostgreSQL would refuse it
        encode_cursor("yesterday", "abc"),
        encode_cursor(1, 2, 3),
    ],
)
async def test_bad_cursors_are_400_problems(web: WebApp, cursor: str) -> None:
    async with web.api("viewer") as api:
        assert_problem(await api.get("/api/runs", params={"after": cursor}), 400)
        assert_problem(await api.get("/api/calls", params={"after": cursor}), 400)
        assert_problem(await api.get("/api/audit", params={"after": cursor}), 400)


async def test_an_audit_cursor_beyond_any_id_is_a_400(web: WebApp) -> None:
    async with web.api("viewer") as api:
        assert_problem(await api.get("/api/audit", params={"after": encode_cursor(2**70)}), 400)
        assert_problem(await api.get("/api/audit", params={"after": encode_cursor(-1)}), 400)


async def test_a_paused_run_shows_its_history_and_calls(web: WebApp, tmp_path: Path) -> None:
    run_id, calls = await paused_run(web, tmp_path)
    async with web.api("viewer") as api:
        run = (await api.get(f"/api/runs/{run_id}")).json()
        assert run["status"] == "awaiting_approval" and run["output"] is None and run["error"] is None
        assert dt.datetime.fromisoformat(run["created_at"]) <= dt.datetime.fromisoformat(run["updated_at"])
        messages = (await api.get(f"/api/runs/{run_id}/messages")).json()
        assert messages["run_id"] == run_id
        assert [m["kind"] for m in messages["messages"]] == ["request", "response", "request"]
        tool_calls = [p["tool_name"] for p in messages["messages"][1]["parts"] if p["part_kind"] == "tool-call"]
        assert tool_calls == ["lookup_order", "refund", "delete_customer"]
        assert set(calls) == {"refund", "delete_customer"}
        assert calls["refund"]["args"] == {"order_id": "A-1", "amount": "450"}
        for path in ("", "/messages", "/calls"):
            assert_problem(await api.get(f"/api/runs/{'0' * 32}{path}"), 404)


async def test_the_stored_history_comes_back_exactly(web: WebApp, tmp_path: Path) -> None:
    from approvals.engines.native.messages import dump_message

    run_id, _ = await paused_run(web, tmp_path)
    async with web.api("viewer") as api:
        messages = (await api.get(f"/api/runs/{run_id}/messages")).json()["messages"]
    assert messages == [dump_message(m) for m in await web.store.runs.load_history(run_id)]


# Calls


async def test_the_inbox_lists_pending_calls_with_filters_search_pages_and_counts(web: WebApp, tmp_path: Path) -> None:
    shop_run, shop_calls = await paused_run(web, tmp_path)
    mail_run, mail_calls = await paused_run(web, tmp_path, agent="mailer")
    async with web.api("reviewer") as api:
        inbox = (await api.get("/api/calls")).json()
        assert {c["tool"] for c in inbox["items"]} == {"refund", "delete_customer", "send_email"}
        assert inbox["counts"] == {"pending": 3} and inbox["next_cursor"] is None
        assert [c["tool"] for c in (await api.get("/api/calls", params={"tool": "refund"})).json()["items"]] == [
            "refund"
        ]
        assert [c["run_id"] for c in (await api.get("/api/calls", params={"agent": "mailer"})).json()["items"]] == [
            mail_run
        ]
        found = (await api.get("/api/calls", params={"q": "ann@example"})).json()["items"]
        assert [c["tool"] for c in found] == ["send_email"]
        assert (await api.get("/api/calls", params={"q": "100%_"})).json()["items"] == []
        page = (await api.get("/api/calls", params={"limit": 2})).json()
        rest = (await api.get("/api/calls", params={"limit": 2, "after": page["next_cursor"]})).json()
        assert len(page["items"]) == 2 and len(rest["items"]) == 1 and rest["next_cursor"] is None
        assert {c["id"] for c in page["items"] + rest["items"]} == {c["id"] for c in inbox["items"]}

        response = await api.post(f"/api/calls/{shop_calls['refund']['id']}/decision", json={"verdict": "approve"})
        assert response.status_code == 200, response.text
        after = (await api.get("/api/calls")).json()
        assert after["counts"] == {"pending": 2, "approved": 1}
        approved = (await api.get("/api/calls", params={"status": "approved"})).json()["items"]
        assert [c["id"] for c in approved] == [shop_calls["refund"]["id"]]
        assert len((await api.get("/api/calls", params={"status": "all"})).json()["items"]) == 3
        assert (await api.get("/api/calls", params={"agent": "shop"})).json()["counts"] == {"pending": 1, "approved": 1}
        assert_problem(await api.get("/api/calls", params={"status": "maybe"}), 422)
    assert shop_run != mail_run and set(mail_calls) == {"send_email"}


async def test_a_call_shows_its_validated_args_digest_definition_and_decisions(web: WebApp, tmp_path: Path) -> None:
    _, calls = await paused_run(web, tmp_path)
    delete = calls["delete_customer"]
    async with session(web, "alice") as (alice, csrf):
        response = await alice.post(
            f"/api/calls/{delete['id']}/decision",
            json={"verdict": "approve", "args_digest": delete["current_args_digest"]},
            headers=csrf,
        )
        assert response.status_code == 200, response.text
        assert response.json()["status"] == "pending"  # one of two approvals
        detail = (await alice.get(f"/api/calls/{delete['id']}")).json()
    assert detail["args"] == {"customer_id": 7} and detail["args_digest"] == delete["args_digest"]
    assert detail["current_args_digest"] == delete["args_digest"] and detail["approvals_required"] == 2
    assert detail["tool_definition"]["name"] == "delete_customer"
    assert detail["tool_definition"]["description"] == "Delete a customer; two people must agree."
    assert detail["tool_definition"]["parameters_json_schema"]["properties"]["customer_id"]["type"] == "integer"
    assert detail["tool_definition"]["version"] == detail["tool_version"]
    assert [(d["actor"], d["verdict"]) for d in detail["decisions"]] == [("alice", "approve")]
    async with web.api("viewer") as api:
        assert_problem(await api.get(f"/api/calls/{'0' * 32}"), 404)


# Decisions


async def test_a_second_decision_is_a_409_that_names_who_decided(web: WebApp, tmp_path: Path) -> None:
    _, calls = await paused_run(web, tmp_path)
    refund = calls["refund"]["id"]
    async with web.api("reviewer") as api:
        first = await api.post(f"/api/calls/{refund}/decision", json={"verdict": "approve"})
        assert first.status_code == 200, first.text
        assert first.json()["status"] == "approved" and first.json()["decided_by"] == "api-reviewer"
        async with session(web, "bob") as (bob, csrf):
            late = await bob.post(
                f"/api/calls/{refund}/decision", json={"verdict": "deny", "reason": "too much"}, headers=csrf
            )
        problem = assert_problem(late, 409)
        assert problem["decided_by"] == "api-reviewer" and "api-reviewer" in problem["detail"]
        assert problem["status_now"] == "approved"
        assert (await api.get(f"/api/calls/{refund}")).json()["status"] == "approved"


async def test_no_dependency_of_a_decision_runs_in_a_worker_thread(
    web: WebApp, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FastAPI runs a plain `def` dependency or endpoint in a worker thread: a hop there and back per request."""
    _, calls = await paused_run(web, tmp_path)
    hops: list[object] = []

    async def counted(func: Any, *args: Any, **kwargs: Any) -> Any:
        hops.append(func)
        return await run_in_threadpool(func, *args, **kwargs)

    for module in (fastapi.dependencies.utils, fastapi.routing):  # where FastAPI sends sync dependencies and routes
        monkeypatch.setattr(module, "run_in_threadpool", counted)
    async with web.api("reviewer") as api:
        assert (await api.get("/api/me")).status_code == 200
        assert (await api.get("/api/calls")).status_code == 200
        decided = await api.post(f"/api/calls/{calls['refund']['id']}/decision", json={"verdict": "approve"})
        assert decided.status_code == 200, decided.text
    assert hops == []


async def test_an_approval_of_arguments_that_changed_is_a_409(web: WebApp, tmp_path: Path) -> None:
    _, calls = await paused_run(web, tmp_path)
    async with web.api("reviewer") as api:
        stale = await api.post(
            f"/api/calls/{calls['refund']['id']}/decision", json={"verdict": "approve", "args_digest": "0" * 64}
        )
        assert "changed" in assert_problem(stale, 409)["detail"]
        assert (await api.get(f"/api/calls/{calls['refund']['id']}")).json()["status"] == "pending"


async def test_a_quorum_needs_two_different_reviewers(web: WebApp, tmp_path: Path) -> None:
    run_id, calls = await paused_run(web, tmp_path)
    delete = calls["delete_customer"]["id"]
    async with session(web, "alice") as (alice, alice_csrf), session(web, "bob") as (bob, bob_csrf):
        first = await alice.post(f"/api/calls/{delete}/decision", json={"verdict": "approve"}, headers=alice_csrf)
        assert first.json()["status"] == "pending"
        again = await alice.post(f"/api/calls/{delete}/decision", json={"verdict": "approve"}, headers=alice_csrf)
        assert_problem(again, 409)
        second = await bob.post(f"/api/calls/{delete}/decision", json={"verdict": "approve"}, headers=bob_csrf)
        assert second.json()["status"] == "approved" and second.json()["decided_by"] == "bob"
    assert (await web.store.runs.get_run(run_id)).status == "awaiting_approval"  # the refund still waits


async def test_a_reviewer_may_deny_a_quorum_call_they_approved_but_not_approve_it_twice(
    web: WebApp, tmp_path: Path
) -> None:
    _, calls = await paused_run(web, tmp_path)
    delete = calls["delete_customer"]["id"]
    async with session(web, "alice") as (alice, csrf):
        first = await alice.post(f"/api/calls/{delete}/decision", json={"verdict": "approve"}, headers=csrf)
        assert first.json()["status"] == "pending"
        again = await alice.post(f"/api/calls/{delete}/decision", json={"verdict": "approve"}, headers=csrf)
        detail = assert_problem(again, 409)["detail"]
        assert "already approved" in detail and "a quorum needs approvals from different people" in detail
        denied = await alice.post(
            f"/api/calls/{delete}/decision", json={"verdict": "deny", "reason": "Wrong customer."}, headers=csrf
        )
        assert denied.status_code == 200, denied.text
        assert denied.json()["status"] == "denied" and denied.json()["decided_by"] == "alice"


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"verdict": "approve"}, "approved"),
        ({"verdict": "deny", "reason": "It went through already."}, "denied"),
        ({"verdict": "answer", "content": {"refunded": True, "payment": 991}}, "answered"),
    ],
)
async def test_the_reviewer_who_approved_a_call_settles_it_when_its_outcome_is_unknown(
    web: WebApp, tmp_path: Path, body: dict[str, Any], status: str
) -> None:
    run_id, calls = await paused_run(web, tmp_path)
    refund, delete = calls["refund"]["id"], calls["delete_customer"]["id"]
    async with session(web, "alice") as (alice, csrf):
        approved = await alice.post(f"/api/calls/{refund}/decision", json={"verdict": "approve"}, headers=csrf)
        assert approved.json()["status"] == "approved"
        await alice.post(f"/api/calls/{delete}/decision", json={"verdict": "deny", "reason": "no"}, headers=csrf)
        # the worker that claims the run dies before the refund's outcome is stored
        assert await web.store.runs.claim("dead-worker", run_id=run_id, lease_seconds=0) is not None
        assert await web.store.runs.claim("rescuer", run_id=run_id) is None
        assert (await alice.get(f"/api/calls/{refund}")).json()["status"] == "outcome_unknown"

        settled = await alice.post(f"/api/calls/{refund}/decision", json=body, headers=csrf)

        assert settled.status_code == 200, settled.text
        assert settled.json()["status"] == status and settled.json()["decided_by"] == "alice"
        assert (await alice.get(f"/api/runs/{run_id}")).json()["status"] == "ready"


@pytest.mark.parametrize(
    "body", [{"verdict": "deny"}, {"verdict": "deny", "reason": ""}, {"verdict": "deny", "reason": " \n"}]
)
async def test_a_denial_needs_a_reason(web: WebApp, tmp_path: Path, body: dict[str, Any]) -> None:
    _, calls = await paused_run(web, tmp_path)
    async with web.api("reviewer") as api:
        problem = assert_problem(await api.post(f"/api/calls/{calls['refund']['id']}/decision", json=body), 422)
        assert any(e["loc"].endswith("reason") for e in problem["errors"])
        assert (await api.get(f"/api/calls/{calls['refund']['id']}")).json()["status"] == "pending"


async def test_a_denial_with_a_reason_is_recorded(web: WebApp, tmp_path: Path) -> None:
    _, calls = await paused_run(web, tmp_path)
    async with web.api("reviewer") as api:
        response = await api.post(
            f"/api/calls/{calls['refund']['id']}/decision", json={"verdict": "deny", "reason": "Ask the manager"}
        )
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "denied" and response.json()["denial_reason"] == "Ask the manager"


async def test_edited_args_are_validated_by_the_tool_and_nothing_is_saved_when_they_fail(
    web: WebApp, tmp_path: Path
) -> None:
    _, calls = await paused_run(web, tmp_path)
    refund = calls["refund"]["id"]
    before = await audit_count(web)
    async with web.api("reviewer") as api:
        bad = await api.post(
            f"/api/calls/{refund}/decision",
            json={"verdict": "edit", "args": {"order_id": "A-1", "amount": "lots", "extra": 1}},
        )
        problem = assert_problem(bad, 422)
        assert {e["loc"] for e in problem["errors"]} == {"amount", "extra"}
        assert all(e["msg"] for e in problem["errors"])
        detail = (await api.get(f"/api/calls/{refund}")).json()
        assert detail["status"] == "pending" and detail["decisions"] == [] and detail["edited_args"] is None
        assert await audit_count(web) == before

        good = await api.post(
            f"/api/calls/{refund}/decision",
            json={
                "verdict": "edit",
                "args": {"order_id": "A-1", "amount": "120.50"},
                "args_digest": calls["refund"]["args_digest"],
            },
        )
        assert good.status_code == 200, good.text
        edited = good.json()
    assert edited["status"] == "approved" and edited["verdict"] == "edit"
    assert edited["edited_args"] == {"order_id": "A-1", "amount": "120.50"}
    assert edited["current_args_digest"] == edited["edited_args_digest"] != edited["args_digest"]
    assert edited["args"] == {"order_id": "A-1", "amount": "450"}  # what the model asked for is kept


async def test_an_answer_is_the_result_the_model_gets(web: WebApp, tmp_path: Path) -> None:
    _, calls = await paused_run(web, tmp_path)
    async with web.api("reviewer") as api:
        response = await api.post(
            f"/api/calls/{calls['refund']['id']}/decision", json={"verdict": "answer", "content": {"refunded": "0"}}
        )
        assert response.json()["status"] == "answered" and response.json()["answer"] == {"refunded": "0"}
        assert_problem(
            await api.post(f"/api/calls/{calls['delete_customer']['id']}/decision", json={"verdict": "answer"}), 422
        )


@pytest.mark.parametrize("body", [{}, {"verdict": "maybe"}, {"verdict": "approve", "args": {}}, {"verdict": "edit"}])
async def test_a_decision_body_must_be_one_of_the_verdicts(web: WebApp, tmp_path: Path, body: dict[str, Any]) -> None:
    _, calls = await paused_run(web, tmp_path)
    async with web.api("reviewer") as api:
        assert_problem(await api.post(f"/api/calls/{calls['refund']['id']}/decision", json=body), 422)
        assert (await api.get(f"/api/calls/{calls['refund']['id']}")).json()["status"] == "pending"


async def test_a_decision_on_an_unknown_call_is_a_404(web: WebApp) -> None:
    async with web.api("reviewer") as api:
        assert_problem(await api.post(f"/api/calls/{'0' * 32}/decision", json={"verdict": "approve"}), 404)


async def test_viewers_cannot_decide_and_reviewers_cannot_approve_runs_they_started(
    web: WebApp, tmp_path: Path
) -> None:
    async with web.api("reviewer") as api:
        started = (
            await api.post("/api/runs", json={"agent": "mailer", "prompt": "x", "deps": {"log": str(tmp_path / "l")}})
        ).json()
        await web.app.state.context.service.resume_now(started["id"])
        [call] = (await api.get(f"/api/runs/{started['id']}/calls")).json()["items"]
        async with web.api("viewer") as viewer:
            assert_problem(await viewer.post(f"/api/calls/{call['id']}/decision", json={"verdict": "approve"}), 403)
        own = await api.post(f"/api/calls/{call['id']}/decision", json={"verdict": "approve"})
        assert "You asked for this call" in assert_problem(own, 403)["detail"]  # the run's starter asked it
        own_edit = await api.post(
            f"/api/calls/{call['id']}/decision", json={"verdict": "edit", "args": {"to": "b@example.com", "body": "x"}}
        )
        assert_problem(own_edit, 403)
        assert (await api.get(f"/api/calls/{call['id']}")).json()["status"] == "pending"


# Resuming


async def test_resume_waits_for_the_run_or_leaves_it_to_the_workers(web: WebApp, tmp_path: Path) -> None:
    run_id, calls = await paused_run(web, tmp_path)
    async with web.api("reviewer") as api:
        for body in ({"wait": None}, {"wait": 5}, None):
            assert assert_problem(await api.post(f"/api/runs/{run_id}/resume", json=body), 409)["status_now"] == (
                "awaiting_approval"
            )
        await api.post(f"/api/calls/{calls['refund']['id']}/decision", json={"verdict": "approve"})
        async with session(web, "alice") as (alice, csrf):
            for client, headers in ((api, {}), (alice, csrf)):
                await client.post(
                    f"/api/calls/{calls['delete_customer']['id']}/decision",
                    json={"verdict": "approve"},
                    headers=headers,
                )
        queued = await api.post(f"/api/runs/{run_id}/resume", json={"wait": None})
        assert queued.status_code == 202 and queued.json()["status"] == "ready"
        done = await api.post(f"/api/runs/{run_id}/resume", json={"wait": 10})
        assert done.status_code == 200, done.text
        assert done.json()["status"] == "completed" and "refunded 450" in done.json()["output"]
        assert_problem(await api.post(f"/api/runs/{run_id}/resume", json={"wait": 10}), 409)
        for wait in (0, -1, 3600, "soon"):
            assert_problem(await api.post(f"/api/runs/{run_id}/resume", json={"wait": wait}), 422)
        assert_problem(await api.post(f"/api/runs/{'0' * 32}/resume", json={"wait": None}), 404)
    assert sorted((tmp_path / "log").read_text().splitlines()) == ["delete 7", "refund A-1 450"]


async def test_resume_with_a_wait_runs_a_newly_started_run_until_it_pauses(web: WebApp, tmp_path: Path) -> None:
    run_id = await web.store.runs.start_run("mailer", "go", actor=SERVICE, deps={"log": str(tmp_path / "log")})
    async with web.api("reviewer") as api:
        response = await api.post(f"/api/runs/{run_id}/resume", json={"wait": 10})
    assert response.status_code == 200 and response.json()["status"] == "awaiting_approval"


# Cancel and retry


async def test_admins_cancel_runs_that_have_not_ended(web: WebApp, tmp_path: Path) -> None:
    run_id, _ = await paused_run(web, tmp_path)
    async with web.api("reviewer") as reviewer:
        assert_problem(await reviewer.post(f"/api/runs/{run_id}/cancel"), 403)
    async with web.api("admin") as admin:
        response = await admin.post(f"/api/runs/{run_id}/cancel", json={"reason": "customer called"})
        assert response.status_code == 200, response.text
        assert response.json()["status"] == "cancelled" and response.json()["error"] == "customer called"
        calls = (await admin.get(f"/api/runs/{run_id}/calls")).json()["items"]
        assert {c["status"] for c in calls} == {"cancelled"}
        assert "already ended" in assert_problem(await admin.post(f"/api/runs/{run_id}/cancel"), 409)["detail"]
        assert_problem(await admin.post(f"/api/runs/{'0' * 32}/cancel"), 404)
        assert_problem(await admin.post(f"/api/runs/{run_id}/cancel", json={"reason": "x", "by": "y"}), 422)


async def test_an_admin_cancels_a_run_whose_worker_is_inside_a_slow_tool_and_the_worker_stops(
    web: WebApp, db_url: str
) -> None:
    gate = Gate()
    agents = AgentRegistry()
    agents.register(slow_agent, deps_factory=lambda _data: gate)
    run_id = await web.store.runs.start_run("slow", "transfer 5", actor=SERVICE)
    await Resumer(web.store, agents).resume(run_id)
    async with web.api("viewer") as viewer:
        [call] = (await viewer.get(f"/api/runs/{run_id}/calls")).json()["items"]
    async with web.api("reviewer") as reviewer:
        assert (await reviewer.post(f"/api/calls/{call['id']}/decision", json={"verdict": "approve"})).is_success
    worker_db = Database(db_url)  # the worker's own connections, as in a worker process
    worker_store = Store(worker_db)
    refused = record_refused_writes(worker_store)
    resumed: list[str | None] = []
    try:
        async with anyio.create_task_group() as group, web.api("admin") as admin:

            async def work() -> None:
                resumed.append(await Resumer(worker_store, agents, worker_id="slow-worker").resume(run_id))

            group.start_soon(work)
            with anyio.fail_after(20):
                await gate.entered.wait()  # the worker holds the run, inside the tool
            assert (await admin.get(f"/api/runs/{run_id}")).json()["status"] == "resuming"
            history = (await admin.get(f"/api/runs/{run_id}/messages")).json()["messages"]

            response = await admin.post(f"/api/runs/{run_id}/cancel", json={"reason": "customer called"})

            assert response.status_code == 200, response.text
            assert response.json()["status"] == "cancelled" and response.json()["error"] == "customer called"
            [cancelled_call] = (await admin.get(f"/api/runs/{run_id}/calls")).json()["items"]
            assert cancelled_call["status"] == "outcome_unknown"  # its tool may have run: a person settles it
            gate.opened.set()  # the tool returns; the worker tries to store its result
    finally:
        await worker_db.dispose()
    assert resumed == [run_id]  # the worker stopped, without an error
    assert [lost.status for lost in refused] == ["cancelled"]  # its next write was refused, and it wrote no more
    async with web.api("viewer") as viewer:
        assert (await viewer.get(f"/api/runs/{run_id}/messages")).json()["messages"] == history
        run = (await viewer.get(f"/api/runs/{run_id}")).json()
        assert (run["status"], run["output"]) == ("cancelled", None)
        stored = (await viewer.get(f"/api/calls/{call['id']}")).json()
        assert (stored["status"], stored["result"]) == ("outcome_unknown", None)
        events = (await viewer.get("/api/audit", params={"run": run_id})).json()["items"]
    cancelled = next(e for e in events if e["action"] == "run.cancelled")
    assert cancelled["actor"] == "api-admin" and cancelled["details"] == {"reason": "customer called"}
    assert not [e for e in events if e["actor"] == "slow-worker" and e["id"] > cancelled["id"]]


async def test_admins_retry_failed_runs_only(web: WebApp, tmp_path: Path) -> None:
    run_id, _ = await paused_run(web, tmp_path)
    async with web.api("admin") as admin:
        assert_problem(await admin.post(f"/api/runs/{run_id}/retry"), 409)
        failed = await web.store.runs.start_run("shop", "go", actor=SERVICE)
        assert await web.store.runs.claim("w1", run_id=failed) is not None
        await web.store.runs.finish(failed, "w1", [], error="the model went away")
        async with web.api("reviewer") as reviewer:
            assert_problem(await reviewer.post(f"/api/runs/{failed}/retry"), 403)
        response = await admin.post(f"/api/runs/{failed}/retry")
        assert response.status_code == 202, response.text
        assert response.json()["status"] == "ready" and response.json()["error"] is None


# Audit


async def test_the_audit_log_is_filtered_and_paged(web: WebApp, tmp_path: Path) -> None:
    run_id, calls = await paused_run(web, tmp_path)
    other_run, _ = await paused_run(web, tmp_path, agent="mailer")
    async with web.api("reviewer") as api:
        await api.post(f"/api/calls/{calls['refund']['id']}/decision", json={"verdict": "approve"})
        everything = (await api.get("/api/audit", params={"limit": 1000})).json()
        ids = [e["id"] for e in everything["items"]]
        assert ids == sorted(ids, reverse=True) and everything["next_cursor"] is None

        paged: list[int] = []
        cursor = None
        while True:
            params: dict[str, Any] = {"limit": 3, **({"after": cursor} if cursor else {})}
            page = (await api.get("/api/audit", params=params)).json()
            paged += [e["id"] for e in page["items"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert paged == ids

        approved = (await api.get("/api/audit", params={"action": "call.approved"})).json()["items"]
        assert [(e["actor"], e["subject_id"], e["run_id"], e["tool"]) for e in approved] == [
            ("api-reviewer", calls["refund"]["id"], run_id, "refund")
        ]
        by_run = (await api.get("/api/audit", params={"run": other_run})).json()["items"]
        assert by_run and {e["run_id"] for e in by_run} == {other_run}
        assert {e["agent"] for e in (await api.get("/api/audit", params={"agent": "mailer"})).json()["items"]} == {
            "mailer"
        }
        assert (await api.get("/api/audit", params={"actor": "api-reviewer"})).json()["items"] == approved
        assert [e["tool"] for e in (await api.get("/api/audit", params={"tool": "send_email"})).json()["items"]] == [
            "send_email"
        ]

        now = dt.datetime.now(dt.UTC)
        future = (now + dt.timedelta(hours=1)).isoformat()
        past = (now - dt.timedelta(hours=1)).isoformat()
        assert (await api.get("/api/audit", params={"since": future})).json()["items"] == []
        assert (await api.get("/api/audit", params={"until": past})).json()["items"] == []
        assert len(
            (await api.get("/api/audit", params={"since": past, "until": future, "limit": 1000})).json()["items"]
        ) == len(ids)
        naive = (now - dt.timedelta(hours=1)).replace(tzinfo=None).isoformat()  # taken as UTC
        assert len((await api.get("/api/audit", params={"since": naive, "limit": 1000})).json()["items"]) == len(ids)
        assert_problem(await api.get("/api/audit", params={"since": "yesterday"}), 422)


async def test_the_audit_export_streams_every_matching_event_as_jsonl_and_csv(web: WebApp, tmp_path: Path) -> None:
    from approvals.store import SYSTEM

    await web.store.people.create_user("=HYPERLINK(1)", "pw-123456789", role="viewer", actor=SYSTEM)
    await paused_run(web, tmp_path)
    async with web.api("viewer") as api:
        listed = (await api.get("/api/audit", params={"limit": 1000})).json()["items"][::-1]
        jsonl = await api.get("/api/audit/export")
        assert jsonl.status_code == 200 and jsonl.headers["content-type"] == "application/x-ndjson"
        assert "attachment" in jsonl.headers["content-disposition"]
        exported = [json.loads(line) for line in jsonl.text.splitlines()]
        assert exported == listed  # oldest first, all of them, exactly as listed

        paused = await api.get("/api/audit/export", params={"action": "run.paused", "format": "jsonl"})
        assert [json.loads(line)["action"] for line in paused.text.splitlines()] == ["run.paused"]

        as_csv = await api.get("/api/audit/export", params={"format": "csv"})
        assert as_csv.headers["content-type"].startswith("text/csv")
        rows = list(csv.DictReader(io.StringIO(as_csv.text)))
        assert [int(r["id"]) for r in rows] == [e["id"] for e in listed]
        assert [r["hash"] for r in rows] == [e["hash"] for e in listed]
        created = next(r for r in rows if r["action"] == "user.created" and "HYPERLINK" in r["subject_id"])
        assert created["subject_id"] == "'=HYPERLINK(1)"  # a spreadsheet would run it as a formula
        requested = next(r for r in rows if r["action"] == "call.requested")
        assert "args" in json.loads(requested["details"])

        assert_problem(await api.get("/api/audit/export", params={"format": "xml"}), 422)
    async with web.client() as anonymous:
        assert_problem(await anonymous.get("/api/audit/export"), 401)


async def test_the_audit_export_of_many_events_crosses_pages(web: WebApp) -> None:
    # more than one page of the export's reads (1,000 events), as `start_run` records them, in one transaction
    async with web.store.runs.transaction() as tx:
        for i in range(1_100):
            tx.record(run_event(SERVICE.id, "run.started", uuid.uuid4().hex, "shop", {"prompt": f"run {i}"}))
    async with web.api("viewer") as api:
        lines = (await api.get("/api/audit/export", params={"action": "run.started"})).text.splitlines()
    assert len(lines) == 1_100
    assert [json.loads(line)["details"]["prompt"] for line in lines[:2]] == ["run 0", "run 1"]


async def test_the_audit_chain_verifies_and_a_tampered_event_is_found(web: WebApp, tmp_path: Path) -> None:
    await paused_run(web, tmp_path)
    async with web.api("viewer") as api:
        intact = (await api.get("/api/audit/verify")).json()
        assert intact["ok"] is True and intact["checked"] == await audit_count(web) and intact["problem"] is None
        await execute(web.store, "UPDATE audit_events SET actor = 'mallory' WHERE id = 3")
        broken = (await api.get("/api/audit/verify")).json()
    assert broken["ok"] is False and broken["first_bad_id"] == 3 and "changed" in broken["problem"]


# What users send comes back as data


async def test_html_in_args_and_prompts_comes_back_as_unchanged_json_strings(web: WebApp, tmp_path: Path) -> None:
    script = "<script>alert('x')</script>"
    image = '"><img src=x onerror=alert(1)>'
    run_id, calls = await paused_run(web, tmp_path, agent="mailer", prompt=script)
    call = calls["send_email"]["id"]
    async with web.api("reviewer") as api:
        edited = await api.post(
            f"/api/calls/{call}/decision", json={"verdict": "edit", "args": {"to": image, "body": script}}
        )
        assert edited.status_code == 200, edited.text
        assert edited.headers["content-type"] == "application/json"
        assert edited.json()["edited_args"] == {"to": image, "body": script}
        run = await api.get(f"/api/runs/{run_id}")
        assert run.headers["content-type"] == "application/json" and run.json()["prompt"] == script
        events = (await api.get("/api/audit", params={"action": "call.edited"})).json()["items"]
        assert events[0]["details"]["edited_args"]["body"] == script


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/api/runs", {"agent": "shop", "prompt": "a\x00b"}),
        ("POST", "/api/runs", {"agent": "shop", "prompt": "x", "deps": {"k": ["\x00"]}}),
        ("POST", "/api/runs", {"agent": "shop", "prompt": "x", "deps": {"\x00": 1}}),
        ("POST", "/api/runs", {"agent": "a\x00", "prompt": "x"}),
        ("GET", "/api/runs/%00", None),
        ("GET", "/api/calls/%00", None),
        ("GET", "/api/calls?q=%00", None),
        ("GET", "/api/audit?actor=%00", None),
        ("GET", "/api/runs?agent=" + "a" * 201, None),
    ],
)
async def test_text_the_database_cannot_store_is_a_422_not_a_500(
    web: WebApp, method: str, path: str, body: dict[str, Any] | None
) -> None:
    async with web.api("reviewer") as api:
        assert_problem(await api.request(method, path, json=body), 422)


async def test_non_finite_numbers_and_lone_surrogates_are_422(web: WebApp, tmp_path: Path) -> None:
    _, calls = await paused_run(web, tmp_path)
    async with web.api("reviewer") as api:
        for raw in (
            b'{"agent": "shop", "prompt": "x", "deps": NaN}',
            b'{"agent": "shop", "prompt": "x", "deps": [1e999]}',
            b'{"agent": "shop", "prompt": "\\ud800"}',
        ):
            response = await api.post("/api/runs", content=raw, headers={"content-type": "application/json"})
            assert_problem(response, 422)
        edit = b'{"verdict": "edit", "args": {"order_id": "A\\u0000", "amount": "1"}}'
        response = await api.post(
            f"/api/calls/{calls['refund']['id']}/decision", content=edit, headers={"content-type": "application/json"}
        )
        assert_problem(response, 422)
        answer = b'{"verdict": "answer", "content": {"x": Infinity}}'
        response = await api.post(
            f"/api/calls/{calls['refund']['id']}/decision", content=answer, headers={"content-type": "application/json"}
        )
        assert_problem(response, 422)
        assert (await api.get("/api/runs")).json()["items"][0]["status"] == "awaiting_approval"


# The API describes itself


async def test_openapi_documents_every_api_route(web: WebApp) -> None:
    async with web.client() as client:
        spec = (await client.get("/api/openapi.json")).json()
    assert "Problem" in spec["components"]["schemas"]
    operations = [
        (path, method, op)
        for path, ops in spec["paths"].items()
        if path.startswith("/api/")
        for method, op in ops.items()
        if not path.startswith("/api/hooks/")  # always 200: a CLI runs the tool when its hook fails
    ]
    assert len(operations) == 31
    for path, method, op in operations:
        name = f"{method.upper()} {path}"
        assert op.get("summary"), name
        success = [code for code in op["responses"] if code.startswith("2")]
        assert success, name
        for code in success:
            content = op["responses"][code]["content"]
            assert any("schema" in media for media in content.values()), name
        assert "401" in op["responses"], name
        if method == "post":
            assert {"403", "422"} <= set(op["responses"]), name
        for code, response in op["responses"].items():
            if code.startswith("4"):
                assert "application/problem+json" in response["content"], name
    decision = spec["paths"]["/api/calls/{call_id}/decision"]["post"]
    assert "409" in decision["responses"] and "404" in decision["responses"]
