"""Issue 14 over real HTTP, on SQLite and PostgreSQL: revocable sessions and throttled logins.

A session is a row on the server, so a copy of the cookie stops working once its session is
logged out or its user's password, role or enabled state changes. Failed logins lock the
account (and a busy client address) for a while, audited; password checks run in a few
worker threads, so the event loop keeps answering everyone else.
"""

from __future__ import annotations

import datetime as dt
import threading
from contextlib import aclosing
from typing import Any

import anyio
import httpx
import pytest
from sqlalchemy import update

from approvals import security
from approvals.store import SYSTEM
from approvals.store.models import LoginThrottleRow

from .conftest import CSRF_FIELD, PASSWORDS, WebApp

pytestmark = pytest.mark.anyio

COOKIE = "approvals_session"


def client_from(web: WebApp, address: str = "127.0.0.1", **kwargs: Any) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=web.app, client=(address, 4321))
    return httpx.AsyncClient(transport=transport, base_url="http://testserver", **kwargs)


def copy_of(web: WebApp, client: httpx.AsyncClient) -> httpx.AsyncClient:
    """Another client holding the same session cookie, as someone who copied it would."""
    return client_from(web, cookies={COOKIE: client.cookies[COOKIE]})


async def form_token(client: httpx.AsyncClient) -> str:
    match = CSRF_FIELD.search((await client.get("/login")).text)
    assert match is not None
    return match.group(1)


async def try_login(client: httpx.AsyncClient, username: str, password: str) -> httpx.Response:
    token = await form_token(client)
    return await client.post("/login", data={"username": username, "password": password, "csrf_token": token})


async def is_logged_in(client: httpx.AsyncClient) -> bool:
    """Through the API (401 or 200) and through a page (the login page or the page)."""
    api = await client.get("/api/me")
    page = await client.get("/")
    assert api.status_code in (200, 401), api.text
    assert (api.status_code == 200) == (page.status_code == 200), (api.status_code, page.status_code)
    if page.status_code != 200:
        assert page.status_code == 303 and page.headers["location"].startswith("/login")
    return api.status_code == 200


async def actions(web: WebApp, action: str) -> list[Any]:
    return list((await web.store.audit.audit_events(action=action)).items)


# -- sessions end on the server --------------------------------------------------------


async def test_logout_ends_the_session_for_a_copied_cookie_too(web: WebApp) -> None:
    client, csrf = await web.login("alice")
    async with aclosing(client), copy_of(web, client) as copy:
        assert await is_logged_in(copy)
        response = await client.post("/logout", data={"csrf_token": csrf})
        assert response.status_code == 303
        assert not await is_logged_in(client)
        assert not await is_logged_in(copy)


async def test_logout_ends_only_that_session(web: WebApp) -> None:
    laptop, csrf = await web.login("alice")
    phone, _ = await web.login("alice")
    async with aclosing(laptop), aclosing(phone):
        await laptop.post("/logout", data={"csrf_token": csrf})
        assert not await is_logged_in(laptop)
        assert await is_logged_in(phone)


@pytest.mark.parametrize(
    "change", [{"password": "a-new-password-1"}, {"role": "viewer"}, {"role": "admin"}, {"disabled": True}]
)
async def test_changing_a_user_ends_all_their_sessions(web: WebApp, change: dict[str, Any]) -> None:
    laptop, _ = await web.login("alice")
    phone, _ = await web.login("alice")
    other, _ = await web.login("bob")
    async with aclosing(laptop), aclosing(phone), aclosing(other), copy_of(web, laptop) as copy:
        assert await is_logged_in(copy)
        await web.store.people.update_user("alice", actor=SYSTEM, **change)
        for client in (laptop, phone, copy):
            assert not await is_logged_in(client)
        assert await is_logged_in(other)  # bob was not changed
    (event,) = [e for e in (await web.store.audit.audit_events(limit=1)).items]
    assert event.details["sessions_ended"] == 2


async def test_csrf_still_guards_a_server_side_session(web: WebApp) -> None:
    client, csrf = await web.login("alice")
    async with aclosing(client):
        assert (await client.post("/logout")).status_code == 403
        assert await is_logged_in(client)
        assert (await client.post("/logout", data={"csrf_token": csrf})).status_code == 303


# -- login throttling ------------------------------------------------------------------


async def test_repeated_wrong_passwords_lock_the_account_with_retry_after(web: WebApp) -> None:
    limit = web.store.people.login_limits.account_failures
    async with client_from(web) as client, client_from(web, "10.9.9.9") as elsewhere:
        for _ in range(limit - 1):
            assert (await try_login(client, "alice", "wrong")).status_code == 401
        locked = await try_login(client, "alice", "wrong")
        assert locked.status_code == 429
        assert int(locked.headers["Retry-After"]) == 60
        assert "Too many failed logins" in locked.text
        # the right password does not help during the lockout, from anywhere
        for who in (client, elsewhere):
            response = await try_login(who, "alice", PASSWORDS["alice"])
            assert response.status_code == 429 and 0 < int(response.headers["Retry-After"]) <= 60
            assert not await is_logged_in(who)
        assert (await try_login(client, "bob", PASSWORDS["bob"])).status_code == 303  # others log in
    (event,) = await actions(web, "login.locked")
    assert (event.subject_type, event.subject_id, event.details["failures"]) == ("account", "alice", limit)


async def test_a_lockout_ends_audited_and_a_success_resets_the_count(web: WebApp) -> None:
    limit = web.store.people.login_limits.account_failures
    async with client_from(web) as client:
        for _ in range(limit):
            await try_login(client, "alice", "wrong")
        await expire_lockouts(web)
        assert (await try_login(client, "alice", PASSWORDS["alice"])).status_code == 303
        assert [e.subject_id for e in await actions(web, "login.unlocked")] == ["alice"]
        for _ in range(limit - 1):  # the count started over
            assert (await try_login(client, "alice", "wrong")).status_code == 401
        assert (await try_login(client, "alice", PASSWORDS["alice"])).status_code == 303


async def test_a_second_lockout_lasts_longer(web: WebApp) -> None:
    limit = web.store.people.login_limits.account_failures
    async with client_from(web) as client:
        for _ in range(limit):
            first = await try_login(client, "alice", "wrong")
        await expire_lockouts(web)
        for _ in range(limit):
            second = await try_login(client, "alice", "wrong")
    assert (first.status_code, second.status_code) == (429, 429)
    assert int(second.headers["Retry-After"]) == 2 * int(first.headers["Retry-After"])


async def test_many_wrong_logins_from_one_address_lock_the_address(web: WebApp) -> None:
    limit = web.store.people.login_limits.address_failures
    async with client_from(web, "10.0.0.1") as guesser, client_from(web, "10.0.0.2") as someone:
        for i in range(limit - 1):  # a different account each time: no account reaches its own limit
            assert (await try_login(guesser, f"user{i}", "wrong")).status_code == 401
        assert (await try_login(guesser, "another", "wrong")).status_code == 429
        assert (await try_login(guesser, "bob", PASSWORDS["bob"])).status_code == 429
        assert (await try_login(someone, "bob", PASSWORDS["bob"])).status_code == 303
    (event,) = await actions(web, "login.locked")
    assert (event.subject_type, event.subject_id) == ("address", "10.0.0.1")


async def expire_lockouts(web: WebApp) -> None:
    async with web.store.db.write() as session:
        past = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)
        await session.execute(
            update(LoginThrottleRow).where(LoginThrottleRow.locked_until.is_not(None)).values(locked_until=past)
        )


# -- password hashing off the event loop -----------------------------------------------


async def test_password_checks_run_in_a_few_threads_while_the_server_answers(
    web: WebApp, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()
    lock = threading.Lock()
    inside = most = 0
    real = security.verify_password

    def held(password_hash: str | None, password: str) -> bool:
        nonlocal inside, most
        with lock:
            inside += 1
            most = max(most, inside)
        try:
            release.wait(3)  # held until the test lets go (or 3 s, so a blocked loop fails, not hangs)
            return real(password_hash, password)
        finally:
            with lock:
                inside -= 1

    monkeypatch.setattr(security, "verify_password", held)
    logins = security.HASHING_CONCURRENCY + 3
    clients = [client_from(web, f"10.1.0.{i}") for i in range(logins)]
    results: list[int] = []

    async def log_in(client: httpx.AsyncClient, i: int) -> None:
        results.append((await try_login(client, f"guess{i}", "wrong")).status_code)

    try:
        async with client_from(web) as probe, anyio.create_task_group() as group:
            for i, client in enumerate(clients):
                group.start_soon(log_in, client, i)
            with anyio.fail_after(10):
                while inside < security.HASHING_CONCURRENCY:
                    await anyio.sleep(0.01)
            # the checks under way are held in their threads: other requests still get answers
            assert (await probe.get("/healthz")).status_code == 200
            assert (await probe.get("/login")).status_code == 200
            assert not release.is_set() and inside == security.HASHING_CONCURRENCY
            release.set()
    finally:
        release.set()
        for client in clients:
            await client.aclose()
    assert results == [401] * logins
    assert most == security.HASHING_CONCURRENCY  # the rest waited: a burst cannot take the memory
