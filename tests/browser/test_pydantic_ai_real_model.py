"""A pydantic-ai agent on the real local model server, through pydantic-ai's OpenAI provider, decided in a browser.

Runs are started over the API, one at a time; the reviewer approves one call, edits another
and denies the third in the inbox; the app's worker hands the decisions to pydantic-ai, which runs the
approved refunds once each and finishes every run with the model's answer (issue 16).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect
from pydantic_ai.models.openai import OpenAIChatModel

from approvals.store import SYSTEM
from approvals.store.models import RunRow
from approvals.worker.resumer import AgentRegistry

from ..live_server import LiveServer, serving
from ..llm_server import LocalModelServer
from ..real_model.pydantic_ai_agents import REFUNDS, make_pydantic_ai_refund_agent

PROMPT = "Please refund order A-1, 25 euros."


@pytest.fixture
def real_server(llm_server: LocalModelServer, db_url: str, tmp_path: Path) -> Iterator[LiveServer]:
    REFUNDS.clear()
    agent = make_pydantic_ai_refund_agent(llm_server.base_url)
    with serving(db_url, tmp_path, AgentRegistry([agent])) as live:
        yield live
        model = agent.model
        assert isinstance(model, OpenAIChatModel)
        live.call(model.client.close())  # its connections belong to the server's loop, which ends next


def settled(server: LiveServer, run_id: str, statuses: tuple[str, ...], *, seconds: float = 180) -> RunRow:
    """The run once its status is one of `statuses`; a timeout says where it stood (status, error, lease)."""
    deadline = time.monotonic() + seconds
    while (run := server.call(server.store.runs.get_run(run_id))).status not in statuses:
        assert time.monotonic() < deadline, (
            f"run {run_id} still {run.status} after {seconds} s (error {run.error!r}, "
            f"lease {run.lease_owner} until {run.lease_expires_at}); the model server's log: {server_log_tail()}"
        )
        time.sleep(0.3)
    return run


def server_log_tail() -> str:
    logs = sorted(Path(tempfile.gettempdir()).glob("pytest-of-*/pytest-*/llm*/llama-server.log"), key=os.path.getmtime)
    return logs[-1].read_text()[-3000:] if logs else "(not found)"


def test_a_pydantic_ai_agent_on_the_real_model_is_approved_edited_and_denied_in_the_browser(
    real_server: LiveServer, page: Page
) -> None:
    """One run at a time: llama-cpp-python's server answers one request at a time anyway."""
    server = real_server
    token = server.call(server.store.people.create_token("shop-backend", role="reviewer", actor=SYSTEM, user="bob"))
    server.login(page, "alice")
    for verdict in ("approve", "edit", "deny"):
        started = httpx.post(
            f"{server.url}/api/runs",
            json={"agent": "real-pydantic-ai", "prompt": PROMPT},
            headers={"Authorization": f"Bearer {token}"},
            timeout=10,
        )
        assert started.status_code == 201, started.text
        run_id = started.json()["id"]
        assert settled(server, run_id, ("awaiting_approval", "failed", "completed")).status == "awaiting_approval"

        page.goto(f"{server.url}/?run={run_id}")
        expect(page.locator("tr[data-call]", has_text="refund").first).to_be_visible()
        (call,) = server.call(server.store.calls.run_calls(run_id))
        page.goto(f"{server.url}/calls/{call.id}")
        refund = page.locator(".slot.current article.call-card")
        expect(refund.locator("h2")).to_have_text("refund")
        if verdict == "approve":
            refund.get_by_role("button", name="Approve", exact=True).click()
            expect(refund.locator(".outcome")).to_contain_text("Approved by alice")
        elif verdict == "edit":
            refund.locator("summary", has_text="Edit & approve").click()
            refund.locator("input[name='args.order_id']").fill("A-1")
            refund.locator("input[name='args.amount']").fill("20")
            refund.get_by_role("button", name="Approve with these arguments").click()
            expect(refund.locator(".outcome")).to_contain_text("Edited and approved by alice")
        else:
            refund.locator("summary", has_text="Deny").click()
            refund.get_by_label("Reason (the model reads it)").fill("Refunds above 20 euros need a manager.")
            refund.get_by_role("button", name="Deny").click()
            expect(refund.locator(".outcome")).to_contain_text("Denied by alice")

        run = settled(server, run_id, ("completed", "failed", "cancelled"))
        assert run.status == "completed", run.error
        page.goto(f"{server.url}/runs/{run_id}")
        expect(page.locator("#run h1 .badge")).to_have_text("completed")
        expect(page.locator("ol.timeline .entry.text").last).not_to_be_empty()
        (call,) = server.call(server.store.calls.run_calls(run_id))
        assert call.status == {"approve": "succeeded", "edit": "succeeded", "deny": "denied"}[verdict]
    assert ("A-1", 20.0) in REFUNDS and len(REFUNDS) == 2  # the approved and the edited refund, once each
