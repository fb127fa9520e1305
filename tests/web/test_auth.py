"""Authentication and its guards, on SQLite and PostgreSQL: sessions, CSRF, tokens, the SSO header, roles."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from approvals.policy import parse_rule
from approvals.store import SYSTEM, Actor, Database, Store
from approvals.store.token_cache import TOKEN_CACHE_SECONDS
from approvals.worker.resumer import AgentRegistry
from approvals_web.app import create_app
from approvals_web.settings import Settings

from ..store.agents import email_agent, shop_agent
from .conftest import CSRF_FIELD, PASSWORDS, WebApp

pytestmark = pytest.mark.anyio

SERVICE = Actor("svc", "reviewer")
STATE_CHANGING = {
    ("POST", "/api/runs"),
    ("POST", "/api/runs/{run_id}/cancel"),
    ("POST", "/api/runs/{run_id}/retry"),
    ("POST", "/api/runs/{run_id}/resume"),
    ("POST", "/api/calls/{call_id}/decision"),
    ("POST", "/api/calls/{call_id}/approve-and-remember"),
    ("PUT", "/api/users/{username}/groups"),
    ("PUT", "/api/users/{username}/contact"),
    ("PUT", "/api/rules/{name}"),
    ("DELETE", "/api/rules/{name}"),
    ("POST", "/api/rules/{name}/enabled"),
    ("POST", "/api/rules/check"),
    ("POST", "/api/rules/dry-run"),
    ("POST", "/api/rules/apply"),
}
VALID_BODIES: dict[str, Any] = {
    "/api/runs": {"agent": "shop", "prompt": "go"},
    "/api/runs/{run_id}/cancel": {"reason": "no"},
    "/api/runs/{run_id}/retry": None,
    "/api/runs/{run_id}/resume": {"wait": None},
    "/api/calls/{call_id}/decision": {"verdict": "approve"},
    "/api/calls/{call_id}/approve-and-remember": {"duration": "1h"},
    "/api/users/{username}/groups": {"groups": ["finance"]},
    "/api/users/{username}/contact": {"email": "someone@example.com"},
    "/api/rules/{name}": {"effect": "allow"},
    "/api/rules/{name}/enabled": {"enabled": False},
    "/api/rules/check": {"when": "true"},
    "/api/rules/dry-run": {"rule": {"name": "r", "effect": "allow"}},
    "/api/rules/apply": {"rules": []},
}
ADMIN_READS = {"/api/users"}
"""Reads only an admin may make: a viewer's token is refused them."""


@asynccontextmanager
async def session(web: WebApp, username: str) -> AsyncIterator[tuple[httpx.AsyncClient, str]]:
    """A logged-in browser-like client and its CSRF token."""
    client, csrf = await web.login(username)
    try:
        yield client, csrf
    finally:
        await client.aclose()


@asynccontextmanager
async def running(db_url: str, **settings: Any) -> AsyncIterator[FastAPI]:
    """Another app over the same database, with different settings."""
    app = create_app(
        Settings(database_url=db_url, worker=False, secret_key="another-secret", **settings),
        registry=AgentRegistry([shop_agent, email_agent]),
    )
    async with app.router.lifespan_context(app):
        yield app


def client_for(app: FastAPI, **kwargs: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://testserver", **kwargs)


async def login_form_token(client: httpx.AsyncClient) -> str:
    match = CSRF_FIELD.search((await client.get("/login")).text)
    assert match is not None
    return match.group(1)


async def whoami(client: httpx.AsyncClient) -> str | None:
    response = await client.get("/api/me")
    if response.status_code == 401:
        return None
    assert response.status_code == 200, response.text
    return f"{response.json()['id']}:{response.json()['role']}"


async def paused_run(web: WebApp, tmp_path: Path) -> tuple[str, str]:
    run_id = await web.store.runs.start_run("shop", "go", actor=SERVICE, deps={"log": str(tmp_path / "log")})
    await web.app.state.context.service.resume_now(run_id)
    calls = await web.store.calls.run_calls(run_id)
    return run_id, calls[0].id


# Sessions


async def test_a_user_logs_in_and_out(web: WebApp) -> None:
    async with web.client() as client:
        assert await whoami(client) is None
        token = await login_form_token(client)
        response = await client.post(
            "/login", data={"username": "alice", "password": PASSWORDS["alice"], "csrf_token": token, "next": "/runs"}
        )
        assert response.status_code == 303 and response.headers["location"] == "/runs"
        assert await whoami(client) == "alice:reviewer"
        fresh = await login_form_token(client)
        assert fresh != token  # a new session gets a new CSRF token
        response = await client.post("/logout", data={"csrf_token": fresh})
        assert response.status_code == 303 and response.headers["location"] == "/login"
        assert await whoami(client) is None


@pytest.mark.parametrize("next_url", ["https://evil.example/", "//evil.example/x", "javascript:alert(1)"])
async def test_login_only_redirects_to_local_paths(web: WebApp, next_url: str) -> None:
    async with web.client() as client:
        token = await login_form_token(client)
        response = await client.post(
            "/login", data={"username": "bob", "password": PASSWORDS["bob"], "csrf_token": token, "next": next_url}
        )
        assert response.status_code == 303 and response.headers["location"] == "/"


@pytest.mark.parametrize(("username", "password"), [("alice", "wrong-password"), ("nobody", "alice-pw-1234")])
async def test_a_wrong_password_or_unknown_user_gets_the_same_refusal(
    web: WebApp, username: str, password: str
) -> None:
    async with web.client() as client:
        token = await login_form_token(client)
        response = await client.post("/login", data={"username": username, "password": password, "csrf_token": token})
        assert response.status_code == 401
        assert "Wrong username or password." in response.text
        assert await whoami(client) is None


async def test_a_disabled_users_session_ends(web: WebApp) -> None:
    async with session(web, "alice") as (client, _):
        assert await whoami(client) == "alice:reviewer"
        await web.store.people.update_user("alice", disabled=True, actor=SYSTEM)
        assert await whoami(client) is None
        await web.store.people.update_user("alice", disabled=False, actor=SYSTEM)
        assert await whoami(client) is None  # re-enabling does not bring the old session back
        token = await login_form_token(client)
        await client.post("/login", data={"username": "alice", "password": PASSWORDS["alice"], "csrf_token": token})
        assert await whoami(client) == "alice:reviewer"


async def test_a_disabled_user_cannot_log_in(web: WebApp) -> None:
    await web.store.people.update_user("bob", disabled=True, actor=SYSTEM)
    async with web.client() as client:
        token = await login_form_token(client)
        response = await client.post(
            "/login", data={"username": "bob", "password": PASSWORDS["bob"], "csrf_token": token}
        )
        assert response.status_code == 401 and await whoami(client) is None


# CSRF


async def test_cookie_requests_to_the_api_need_the_csrf_token(web: WebApp) -> None:
    async with session(web, "alice") as (client, csrf):
        body = {"agent": "shop", "prompt": "go"}
        for headers in ({}, {"x-csrftoken": "not-the-token"}, {"x-csrftoken": ""}):
            response = await client.post("/api/runs", json=body, headers=headers)
            assert response.status_code == 403 and "CSRF" in response.json()["detail"]
        assert (await client.get("/api/runs")).json()["items"] == []
        response = await client.post("/api/runs", json=body, headers={"x-csrftoken": csrf})
        assert response.status_code == 201 and response.json()["started_by"] == "alice"


async def test_cookie_form_posts_need_the_csrf_field(web: WebApp) -> None:
    async with session(web, "alice") as (client, csrf):
        assert (await client.post("/logout", data={})).status_code == 403
        assert (await client.post("/logout", data={"csrf_token": "forged"})).status_code == 403
        assert await whoami(client) == "alice:reviewer"  # still logged in
        assert (await client.post("/logout", data={"csrf_token": csrf})).status_code == 303
        assert await whoami(client) is None
    async with web.client() as fresh:
        await fresh.get("/login")
        response = await fresh.post("/login", data={"username": "bob", "password": PASSWORDS["bob"]})
        assert response.status_code == 403 and await whoami(fresh) is None


async def test_a_csrf_token_from_another_session_is_refused(web: WebApp) -> None:
    async with session(web, "alice") as (alice, _), session(web, "bob") as (_, bob_csrf):
        response = await alice.post(
            "/api/runs", json={"agent": "shop", "prompt": "go"}, headers={"x-csrftoken": bob_csrf}
        )
        assert response.status_code == 403


async def test_bearer_token_requests_need_no_csrf_token(web: WebApp) -> None:
    async with web.api("reviewer") as api:
        response = await api.post("/api/runs", json={"agent": "shop", "prompt": "go"})
        assert response.status_code == 201 and response.json()["started_by"] == "api-reviewer"


# Tokens


async def test_a_revoked_token_is_a_401(web: WebApp) -> None:
    token = await web.store.people.create_token("ci", role="reviewer", actor=SYSTEM)
    async with web.client(headers={"Authorization": f"Bearer {token}"}) as api:
        assert await whoami(api) == "token:ci:reviewer"
        [row] = [t for t in await web.store.people.list_tokens() if t.name == "ci"]
        await web.store.people.revoke_token(row.id, actor=SYSTEM)
        for response in (await api.get("/api/me"), await api.post("/api/runs", json={"agent": "shop", "prompt": "x"})):
            assert response.status_code == 401
            assert response.headers["content-type"] == "application/problem+json"
            assert response.headers["www-authenticate"] == "Bearer"
    assert (await web.store.runs.list_runs()).items == []


async def test_a_token_revoked_by_another_process_stops_working_within_the_cache_bound(
    web: WebApp, db_url: str
) -> None:
    clock = [0.0]
    web.store.people.verified_tokens.clock = lambda: clock[0]
    token = await web.store.people.create_token("ci", role="reviewer", actor=SYSTEM)
    elsewhere = Store(Database(db_url))  # `approvals tokens revoke` in another process: this app's store hears nothing
    try:
        async with web.client(headers={"Authorization": f"Bearer {token}"}) as api:
            assert await whoami(api) == "token:ci:reviewer"
            [row] = [t for t in await elsewhere.people.list_tokens() if t.name == "ci"]
            await elsewhere.people.revoke_token(row.id, actor=SYSTEM)
            clock[0] += TOKEN_CACHE_SECONDS - 0.5
            assert await whoami(api) == "token:ci:reviewer", "verified a moment ago, so not looked up again"
            clock[0] += 0.5
            started = await api.post("/api/runs", json={"agent": "shop", "prompt": "x"})
            for response in (await api.get("/api/me"), started):
                assert response.status_code == 401
                assert response.headers["www-authenticate"] == "Bearer"
    finally:
        await elsewhere.db.dispose()
    assert (await web.store.runs.list_runs()).items == []


async def test_a_change_to_a_tokens_person_in_this_process_applies_at_once(web: WebApp) -> None:
    bobs = await web.store.people.create_token("bob-cli", role="reviewer", actor=SYSTEM, user="bob")
    async with web.client(headers={"Authorization": f"Bearer {bobs}"}) as api:
        assert await whoami(api) == "bob:reviewer"
        await web.store.people.update_user("bob", role="viewer", actor=SYSTEM)
        assert await whoami(api) == "bob:viewer"
        response = await api.post("/api/runs", json={"agent": "shop", "prompt": "x"})
        assert response.status_code == 403, response.text


@pytest.mark.parametrize("header", ["Bearer apv_made-up", "Bearer ", "Basic YWxpY2U6cHc=", "bearer"])
async def test_made_up_or_other_credentials_do_not_authenticate(web: WebApp, header: str) -> None:
    async with web.client(headers={"Authorization": header}) as client:
        assert (await client.get("/api/me")).status_code == 401


async def test_a_token_acts_with_its_own_role(web: WebApp) -> None:
    for role in ("viewer", "reviewer", "admin"):
        async with web.api(role) as api:
            assert await whoami(api) == f"api-{role}:{role}"  # the token's person, at the token's role


# Single sign-on header


async def test_the_sso_header_is_ignored_unless_configured(web: WebApp) -> None:
    async with web.client(headers={"X-Remote-User": "ada"}) as client:
        assert await whoami(client) is None


async def test_the_sso_header_names_the_user_when_configured(web: WebApp, db_url: str) -> None:
    async with running(db_url, trusted_identity_header="X-Remote-User") as app:
        async with client_for(app, headers={"X-Remote-User": "ada"}) as ada:
            assert await whoami(ada) == "ada:admin"
            refused = await ada.post("/api/runs", json={"agent": "shop", "prompt": "go"})
            assert refused.status_code == 403  # a browser behind the proxy: CSRF applies as for a session
        async with client_for(app, headers={"X-Remote-User": "mallory"}) as unknown:
            assert await whoami(unknown) is None
        await web.store.people.update_user("victor", disabled=True, actor=SYSTEM)
        async with client_for(app, headers={"X-Remote-User": "victor"}) as disabled:
            assert await whoami(disabled) is None
        async with client_for(app) as nobody:
            assert await whoami(nobody) is None


# Roles on every route


GATE_ROUTES = {
    ("POST", "/api/gate/calls"),
    ("GET", "/api/gate/calls/{call_id}"),
    ("POST", "/api/gate/calls/{call_id}/outcome"),
    ("POST", "/api/hooks/{cli}"),
}
"""Routes for agents, not people: API tokens only (no cookie session), a 200 denial from the hooks.
tests/web/test_gate.py checks who may use them."""


def api_routes(app: FastAPI, methods: set[str]) -> list[tuple[str, str]]:
    """Every route under /api/ the app documents for people, as (method, path template); the gate's are apart."""
    documented = {
        (method.upper(), path)
        for path, operations in app.openapi()["paths"].items()
        if path.startswith("/api/")
        for method in operations
    }
    assert documented >= GATE_ROUTES
    return sorted((method, path) for method, path in documented - GATE_ROUTES if method in methods)


RULE = "small-refunds"
"""The rule `{name}` names: `test_every_api_read_needs_authentication` writes it."""


def fill(path: str, run_id: str, call_id: str) -> str:
    return path.replace("{run_id}", run_id).replace("{call_id}", call_id).replace("{name}", RULE)


async def test_every_state_changing_api_route_refuses_viewers_and_anonymous_requests(
    web: WebApp, tmp_path: Path
) -> None:
    routes = api_routes(web.app, {"POST", "PUT", "PATCH", "DELETE"})
    assert set(routes) == STATE_CHANGING  # a new route must be added here, and so checked
    run_id, call_id = await paused_run(web, tmp_path)
    before = await web.store.audit.last_audit_event_id()
    async with web.api("viewer") as viewer, web.client() as anonymous, session(web, "victor") as (victor, victor_csrf):
        for method, path in routes:
            url, body = fill(path, run_id, call_id), VALID_BODIES[path]
            response = await viewer.request(method, url, json=body)
            assert response.status_code == 403, (path, response.text)
            assert "role" in response.json()["detail"]
            response = await victor.request(method, url, json=body, headers={"x-csrftoken": victor_csrf})
            assert response.status_code == 403, (path, response.text)
            response = await anonymous.request(method, url, json=body)
            assert response.status_code == 401, (path, response.text)
            assert response.headers["www-authenticate"] == "Bearer"
            assert response.headers["content-type"] == "application/problem+json"
    assert await web.store.audit.last_audit_event_id() == before  # nothing happened
    assert (await web.store.calls.get_call(call_id)).status == "pending"


async def test_every_api_read_needs_authentication(web: WebApp, tmp_path: Path) -> None:
    run_id, call_id = await paused_run(web, tmp_path)
    routes = api_routes(web.app, {"GET"})
    assert len(routes) == 14
    await web.store.rules.save_rule(parse_rule({"name": RULE, "effect": "allow"}), actor=SYSTEM)
    async with web.client() as anonymous, web.api("viewer") as viewer:
        for _, path in routes:
            url = fill(path, run_id, call_id)
            assert (await anonymous.get(url)).status_code == 401, path
            assert (await viewer.get(url)).status_code == (403 if path in ADMIN_READS else 200), path


async def test_sessions_cookies_are_http_only_and_same_site(web: WebApp) -> None:
    async with web.client() as client:
        token = await login_form_token(client)
        response = await client.post(
            "/login", data={"username": "alice", "password": PASSWORDS["alice"], "csrf_token": token}
        )
    cookie = response.headers["set-cookie"]
    assert re.search(r"(?i)httponly", cookie) and re.search(r"(?i)samesite=lax", cookie)
