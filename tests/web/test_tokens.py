"""API tokens are people's or services': a person is one identity however they sign in, and scopes are checked."""

from __future__ import annotations

from pathlib import Path

import pytest

from approvals.store import SYSTEM

from .conftest import PASSWORDS, WebApp
from .test_api import assert_problem, paused_run, session

pytestmark = pytest.mark.anyio


async def test_one_person_with_a_session_and_a_token_counts_once_in_a_quorum(web: WebApp, tmp_path: Path) -> None:
    _, calls = await paused_run(web, tmp_path)
    delete = calls["delete_customer"]  # needs two different people
    alices = await web.store.people.create_token("alice-laptop", role="reviewer", actor=SYSTEM, user="alice")
    async with session(web, "alice") as (browser, csrf):
        first = await browser.post(f"/api/calls/{delete['id']}/decision", json={"verdict": "approve"}, headers=csrf)
        assert first.status_code == 200, first.text
    async with web.client(headers={"Authorization": f"Bearer {alices}"}) as api:
        again = await api.post(f"/api/calls/{delete['id']}/decision", json={"verdict": "approve"})
    assert_problem(again, 409)
    assert (await web.store.calls.get_call(delete["id"])).status == "pending", "one person, one approval"


async def test_a_run_started_with_ones_own_token_is_still_ones_own(web: WebApp) -> None:
    alices = await web.store.people.create_token("alice-cli", role="reviewer", actor=SYSTEM, user="alice")
    async with web.client(headers={"Authorization": f"Bearer {alices}"}) as api:
        started = await api.post("/api/runs", json={"agent": "mailer", "prompt": "mail"})
        assert started.status_code == 201, started.text
        run_id = started.json()["id"]
        assert started.json()["started_by"] == "alice"
    run = await web.app.state.context.service.resume_now(run_id)
    assert run.status == "awaiting_approval"
    [call] = await web.store.calls.run_calls(run_id)
    async with session(web, "alice") as (browser, csrf):
        refused = await browser.post(f"/api/calls/{call.id}/decision", json={"verdict": "approve"}, headers=csrf)
    assert_problem(refused, 403)


async def test_a_service_token_may_start_runs_and_deny_but_never_approve(web: WebApp, tmp_path: Path) -> None:
    _, calls = await paused_run(web, tmp_path)
    service = await web.store.people.create_token("backend", role="reviewer", actor=SYSTEM)
    async with web.client(headers={"Authorization": f"Bearer {service}"}) as api:
        approve = await api.post(f"/api/calls/{calls['refund']['id']}/decision", json={"verdict": "approve"})
        assert "service token" in assert_problem(approve, 403)["detail"]
        edit = {"verdict": "edit", "args": {"order_id": "A-1", "amount": "1"}}
        assert_problem(await api.post(f"/api/calls/{calls['refund']['id']}/decision", json=edit), 403)
        deny = {"verdict": "deny", "reason": "the backend withdrew the request"}
        assert (await api.post(f"/api/calls/{calls['refund']['id']}/decision", json=deny)).status_code == 200
        started = await api.post("/api/runs", json={"agent": "mailer", "prompt": "mail"})
        assert started.status_code == 201 and started.json()["started_by"] == "token:backend"


async def test_a_token_of_a_disabled_person_stops_working(web: WebApp) -> None:
    bobs = await web.store.people.create_token("bob-cli", role="reviewer", actor=SYSTEM, user="bob")
    async with web.client(headers={"Authorization": f"Bearer {bobs}"}) as api:
        assert (await api.get("/api/me")).status_code == 200
        await web.store.people.update_user("bob", disabled=True, actor=SYSTEM)
        assert_problem(await api.get("/api/me"), 401)


async def test_a_token_acts_at_most_with_its_persons_role(web: WebApp) -> None:
    victors = await web.store.people.create_token("victor-admin?", role="admin", actor=SYSTEM, user="victor")
    async with web.client(headers={"Authorization": f"Bearer {victors}"}) as api:
        assert (await api.get("/api/me")).json()["role"] == "viewer"
        assert_problem(await api.post("/api/runs", json={"agent": "mailer", "prompt": "x"}), 403)


async def test_a_tokens_scopes_are_checked_on_every_route(web: WebApp, tmp_path: Path) -> None:
    run_id, calls = await paused_run(web, tmp_path)
    await web.store.people.create_user("reader", PASSWORDS["alice"], role="reviewer", actor=SYSTEM)
    reader = await web.store.people.create_token(
        "reader", role="reviewer", actor=SYSTEM, user="reader", scopes=["calls:read"]
    )
    async with web.client(headers={"Authorization": f"Bearer {reader}"}) as api:
        assert (await api.get("/api/calls")).status_code == 200
        assert (await api.get(f"/api/calls/{calls['refund']['id']}")).status_code == 200
        for method, path, body in [
            ("POST", "/api/runs", {"agent": "mailer", "prompt": "x"}),
            ("GET", "/api/runs", None),
            ("GET", f"/api/runs/{run_id}", None),
            ("POST", f"/api/calls/{calls['refund']['id']}/decision", {"verdict": "approve"}),
            ("GET", "/api/audit", None),
            ("GET", "/api/audit/export", None),
        ]:
            refused = await api.request(method, path, json=body)
            assert "scope" in assert_problem(refused, 403)["detail"], (method, path)
    assert (await web.store.calls.get_call(calls["refund"]["id"])).status == "pending"


async def test_unknown_scopes_and_people_are_refused_when_the_token_is_made(web: WebApp) -> None:
    from approvals.exceptions import NotFound, UserError

    with pytest.raises(UserError, match="Unknown token scopes"):
        await web.store.people.create_token("x", role="viewer", actor=SYSTEM, scopes=["everything"])
    with pytest.raises(NotFound):
        await web.store.people.create_token("x", role="viewer", actor=SYSTEM, user="nobody")
