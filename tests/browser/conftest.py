"""A real browser against a real server: Debian's headless Chromium driven by Playwright.

The app runs under uvicorn on 127.0.0.1 (a free port) in a background thread, with its
in-process worker on, so runs resume by themselves as in `approvals serve`; every test runs
on SQLite and on PostgreSQL (the store tests' `db_url`). Tests start runs on the server's
own event loop (`LiveServer.call`), as an API client in the same process would.

Chromium comes from Debian (`apt-get install chromium`), never from `playwright install`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from approvals.worker.resumer import AgentRegistry

from ..live_server import LiveServer, serving
from ..pydanticai import agents as pydantic_ai_agents
from ..store.agents import email_agent
from ..store.conftest import db_url, postgres_url, sqlite_template  # noqa: F401 - fixtures shared with the store tests
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


@pytest.fixture
def server(db_url: str, tmp_path: Path) -> Iterator[LiveServer]:  # noqa: F811 - the shared fixture
    registry = AgentRegistry([support_agent, email_agent, xss_agent, pydantic_ai_agents.helpdesk])
    with serving(db_url, tmp_path, registry) as live:
        yield live


expect.set_options(timeout=15_000)
"""Assertions wait as long as actions do: Playwright's own 5 s is short for a page served beside three busy
xdist workers on 2 cores."""


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
