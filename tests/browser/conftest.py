"""A real browser against a real server: Debian's headless Chromium driven by Playwright.

The app runs under uvicorn on 127.0.0.1 (a free port) in a background thread, with its
in-process worker on, so runs resume by themselves as in `approvals serve`; every test runs
on SQLite and on PostgreSQL (the store tests' `db_url`). Tests start runs on the server's
own event loop (`LiveServer.call`), as an API client in the same process would.

Chromium comes from Debian (`apt-get install chromium`), never from `playwright install`.
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
import uvicorn
from fastapi import FastAPI
from playwright.sync_api import Browser, Page, expect, sync_playwright

from approvals.service import ApprovalService
from approvals.store import SYSTEM, Actor, Store
from approvals.worker.resumer import AgentRegistry
from approvals_web.app import create_app
from approvals_web.settings import Settings

from ..pydanticai import agents as pydantic_ai_agents
from ..store.agents import email_agent
from ..store.conftest import db_url, postgres_url, sqlite_template  # noqa: F401 - fixtures shared with the store tests
from ..web.conftest import PASSWORDS, ROLES
from .agents import support_agent
from .xss import xss_agent

T = TypeVar("T")
CHROMIUM = os.environ.get("APPROVALS_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SERVICE = Actor("svc-helpdesk", "reviewer")
DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Playwright's sync API keeps an event loop running in this thread while it is open, so it
    is closed after each module: the async tests that follow need the thread's loop free."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"No Chromium at {CHROMIUM}: run `apt-get install -y chromium` (or set APPROVALS_CHROMIUM)")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@dataclass
class LiveServer:
    """The app served over HTTP, and a way to run coroutines on its event loop."""

    url: str
    app: FastAPI
    loop: asyncio.AbstractEventLoop
    tool_log: Path
    """Where the test agents' tools note what ran (the `log` in their deps)."""

    @property
    def store(self) -> Store:
        store: Store = self.app.state.context.store
        return store

    def call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run `coroutine` on the server's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout=30)

    def start_run(self, agent: str, prompt: str) -> str:
        service: ApprovalService = self.app.state.context.service
        return self.call(service.start_run(agent, prompt, actor=SERVICE, deps={"log": str(self.tool_log)}))

    def login(self, page: Page, username: str) -> None:
        page.goto(self.url + "/login")
        page.get_by_label("Username").fill(username)
        page.get_by_label("Password").fill(PASSWORDS[username])
        page.get_by_role("button", name="Log in").click()
        expect(page.locator(".who")).to_contain_text(username)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextmanager
def serving(database_url: str, tmp_path: Path, registry: AgentRegistry) -> Iterator[LiveServer]:
    """The app with `registry`'s agents under uvicorn, its in-process worker on, the test users created."""
    app = create_app(
        Settings(database_url=database_url, worker=True, secret_key="browser-test-secret"), registry=registry
    )
    port = _free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", lifespan="on", timeout_graceful_shutdown=2
    )
    uvicorn_server = uvicorn.Server(config)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(uvicorn_server.serve(),), daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not uvicorn_server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            pytest.fail("the app did not start")
        time.sleep(0.05)
    live = LiveServer(url=f"http://127.0.0.1:{port}", app=app, loop=loop, tool_log=tmp_path / "tool-log")
    for name, role in ROLES.items():
        live.call(live.store.create_user(name, PASSWORDS[name], role=role, actor=SYSTEM))
    try:
        yield live
    finally:
        uvicorn_server.should_exit = True
        thread.join(timeout=20)
        loop.close()


@pytest.fixture
def server(db_url: str, tmp_path: Path) -> Iterator[LiveServer]:  # noqa: F811 - the shared fixture
    registry = AgentRegistry([support_agent, email_agent, xss_agent, pydantic_ai_agents.helpdesk])
    with serving(db_url, tmp_path, registry) as live:
        yield live


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1360, "height": 900}, device_scale_factor=1)
    context.set_default_timeout(15_000)
    yield context.new_page()
    context.close()


@pytest.fixture
def screenshots(tmp_path: Path) -> Path:
    """Where screenshots go: docs/ when APPROVALS_UPDATE_SCREENSHOTS=1, else the test's temporary folder."""
    return DOCS if os.environ.get("APPROVALS_UPDATE_SCREENSHOTS") == "1" else tmp_path
