"""The web app under test: real HTTP through the ASGI app, on SQLite and PostgreSQL.

`web` gives a running app (lifespan entered, no in-process worker unless a test asks)
with four users and helpers to log in or call the API with a bearer token. The users and
tokens are made once per process, in a template database a test that asks for `web` gets a
copy of (tests/databases.py), not once per test.
"""

from __future__ import annotations

import functools
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from fastapi import FastAPI

from approvals.store import SYSTEM, Database, Store
from approvals_web.app import create_app
from approvals_web.settings import Settings

from ..databases import BACKENDS, DATABASES
from ..store import agents as store_agents
from ..store.conftest import postgres_url, sqlite_template  # noqa: F401 - fixtures shared with the store tests

if TYPE_CHECKING:
    from ..oidc.harness import Provider

PASSWORDS = {"alice": "alice-pw-1234", "bob": "bob-pw-1234", "victor": "victor-pw-1234", "ada": "ada-pw-1234"}
ROLES = {"alice": "reviewer", "bob": "reviewer", "victor": "viewer", "ada": "admin"}
CSRF_FIELD = re.compile(r'name="csrf_token" value="([^"]+)"')


@dataclass
class WebApp:
    """A running app and ways to talk to it."""

    app: FastAPI
    store: Store
    tokens: dict[str, str] = field(default_factory=dict)
    """Role name -> a bearer token with that role."""

    def client(self, **kwargs: Any) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app), base_url="http://testserver", **kwargs)

    async def login(self, username: str) -> tuple[httpx.AsyncClient, str]:
        """A client with a session for `username`, and its CSRF token."""
        client = self.client()
        page = await client.get("/login")
        token = CSRF_FIELD.search(page.text)
        assert token is not None
        response = await client.post(
            "/login", data={"username": username, "password": PASSWORDS[username], "csrf_token": token.group(1)}
        )
        assert response.status_code == 303, response.text
        home = await client.get("/login")  # any page shows the new session's token
        fresh = CSRF_FIELD.search(home.text)
        assert fresh is not None
        return client, fresh.group(1)

    def api(self, role: str = "reviewer") -> httpx.AsyncClient:
        """A client authenticated with a bearer token of `role`."""
        return self.client(headers={"Authorization": f"Bearer {self.tokens[role]}"})


async def seed_users(url: str) -> dict[str, str]:
    """The users of ROLES and, per role, a person with a bearer token (each token is a person's own, as
    reviewers' tokens must be); the tokens by role."""
    database = Database(url)
    try:
        store = Store(database)
        for name, role in ROLES.items():
            await store.people.create_user(name, PASSWORDS[name], role=role, actor=SYSTEM)
        tokens = {}
        for role in ("viewer", "reviewer", "admin"):
            await store.people.create_user(f"api-{role}", PASSWORDS["alice"], role=role, actor=SYSTEM)
            tokens[role] = await store.people.create_token(f"{role}-token", role=role, actor=SYSTEM, user=f"api-{role}")
        return tokens
    finally:
        await database.dispose()


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The store tests' `db_url`; for a test that uses `web_tokens` (through `web`), a copy of the
    database with the users and tokens already in it."""
    seed = ("web-users", seed_users) if "web_tokens" in request.fixturenames else ("", None)
    url, _ = DATABASES.fresh(request.param, tmp_path, *seed)
    yield url
    DATABASES.release(url)


@pytest.fixture
def web_tokens(db_url: str) -> dict[str, str]:
    """Role name -> a bearer token of the person `seed_users` made with that role, in `db_url`."""
    backend = "sqlite" if db_url.startswith("sqlite") else "postgresql"
    return dict(DATABASES.template(backend, "web-users").seeded)


@functools.cache
def shared_app() -> tuple[FastAPI, Settings]:
    """The app `web` serves, built once per process, and its settings.

    Building it costs ~0.3 s of CPU (FastAPI makes ~330 fields for the routes), a third of a
    quick web test. What a test may change is made anew each time the lifespan is entered: the
    database (the test's own: `database_url` is set first), store, service, agent registry
    (loaded from `agents`, so one a test registers goes with it) and event hubs.
    """
    agents = [f"{store_agents.__name__}:shop_agent", f"{store_agents.__name__}:email_agent"]
    settings = Settings(database_url="sqlite://", worker=False, secret_key="test-secret", agents=agents)
    return create_app(settings), settings


@pytest.fixture
async def web(db_url: str, web_tokens: dict[str, str]) -> AsyncIterator[WebApp]:
    app, settings = shared_app()
    settings.database_url = db_url
    async with app.router.lifespan_context(app):
        store: Store = app.state.context.store
        yield WebApp(app=app, store=store, tokens=web_tokens)


@pytest.fixture(scope="session")
def oidc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Provider]:
    """node-oidc-provider, one per process (~1.5 s to start) for every sign-on test: each test's app
    (tests/oidc/harness.py: `provider_and_app`) resets it and points its test client at itself."""
    from ..oidc.harness import oidc_provider  # uvicorn and joserfc: only for a process that runs these tests

    with oidc_provider(tmp_path_factory.mktemp("sso"), "http://127.0.0.1:9") as provider:
        yield provider
