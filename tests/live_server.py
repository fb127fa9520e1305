"""The app served over real HTTP: uvicorn on 127.0.0.1 (a free port) in a background thread.

The browser tests and the coding-CLI tests use it; `LiveServer.call` runs coroutines on the
server's own event loop, as an API client in the same process would.
"""

from __future__ import annotations

import asyncio
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

from approvals.service import ApprovalService
from approvals.store import SYSTEM, Actor, Store
from approvals.worker.resumer import AgentRegistry
from approvals_web.app import create_app
from approvals_web.settings import Settings

from .processes import free_port
from .web.conftest import PASSWORDS, ROLES

T = TypeVar("T")
SERVICE = Actor("svc-helpdesk", "reviewer")


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

    def login(self, page: Any, username: str) -> None:
        """Log `username` in on a Playwright page."""
        from playwright.sync_api import expect

        page.goto(self.url + "/login")
        page.get_by_label("Username").fill(username)
        page.get_by_label("Password").fill(PASSWORDS[username])
        page.get_by_role("button", name="Log in").click()
        expect(page.locator(".who")).to_contain_text(username)


@contextmanager
def serving(
    database_url: str,
    tmp_path: Path,
    registry: AgentRegistry,
    *,
    port: int | None = None,
    users: bool = True,
    graceful_shutdown: int = 2,
    **settings: Any,
) -> Iterator[LiveServer]:
    """The app with `registry`'s agents under uvicorn on `port` (a free one), its in-process worker on, the test
    users created (`users`). On leaving, requests still open get `graceful_shutdown` seconds to end before they are
    cancelled: a test that leaves one open on purpose (a long poll) need not wait. `settings` are more of the app's
    settings (single sign-on providers, say)."""
    app = create_app(
        Settings(database_url=database_url, worker=True, secret_key="browser-test-secret", **settings),
        registry=registry,
    )
    port = port or free_port()
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        lifespan="on",
        timeout_graceful_shutdown=graceful_shutdown,
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
    for name, role in ROLES.items() if users else ():
        live.call(live.store.people.create_user(name, PASSWORDS[name], role=role, actor=SYSTEM))
    try:
        yield live
    finally:
        uvicorn_server.should_exit = True
        thread.join(timeout=20)
        loop.close()
