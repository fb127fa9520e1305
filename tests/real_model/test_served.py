"""The product end to end on a real model: API, inbox, decisions and the worker of `approvals serve`.

`approvals serve` runs as its own process with an agent on the local model server; a
client starts runs over HTTP, finds their calls in `/api/calls`, decides them, and the
in-process worker finishes each run with the model's answer. Then the demo, served on the
same real model, must answer at once while its runs are still being worked on.
"""

from __future__ import annotations

import re
from functools import partial
from pathlib import Path
from typing import Any

import httpx
from typer.testing import CliRunner

from approvals.cli import app

from ..llm_server import MODEL_ALIAS, LocalModelServer
from ..store.conftest import db_url, postgres_url, sqlite_template  # noqa: F401 - fixtures shared with the store tests
from .served import served, wait_for

PROMPT = "Please refund order A-1, 25 euros."
SETTLED = ("awaiting_approval", "completed", "failed", "cancelled")


def token(database_url: str, name: str, *, person: bool = False) -> str:
    """A service token, or (`person`) a reviewer's own: only people may approve."""
    cli = CliRunner()
    owner: list[str] = []
    if person:
        added = cli.invoke(app, ["users", "add", name, "--role", "reviewer", "--database-url", database_url])
        assert added.exit_code == 0, added.output
        owner = ["--user", name]
    command = ["tokens", "create", name, "--role", "reviewer", *owner, "--database-url", database_url]
    result = cli.invoke(app, command)
    assert result.exit_code == 0, result.output
    return result.output.strip()


def pending_call(client: httpx.Client, run_id: str) -> dict[str, Any]:
    calls = client.get(f"/api/runs/{run_id}/calls").json()["items"]
    run = client.get(f"/api/runs/{run_id}").json()
    assert run["status"] not in ("failed", "cancelled", "completed"), run
    return next((c for c in calls if c["status"] == "pending"), {})


def settled_run(client: httpx.Client, run_id: str) -> dict[str, Any]:
    run: dict[str, Any] = client.get(f"/api/runs/{run_id}").json()
    return run if run["status"] in SETTLED else {}


def test_runs_started_over_the_api_pause_and_finish_after_each_verdict(
    llm_server: LocalModelServer,
    db_url: str,  # noqa: F811 - the shared fixture: SQLite and PostgreSQL
    tmp_path: Path,
) -> None:
    env = {"APPROVALS_TEST_LLM_BASE_URL": llm_server.base_url}
    args = ["--agent", "tests.real_model.agents:refund_agent", "--database-url", db_url]
    with served(args, env, tmp_path / "serve.log") as app_process:
        starter = {"Authorization": f"Bearer {token(db_url, 'shop-backend')}"}
        reviewer = {"Authorization": f"Bearer {token(db_url, 'rita', person=True)}"}
        with (
            httpx.Client(base_url=app_process.base_url, headers=starter, timeout=30) as backend,
            httpx.Client(base_url=app_process.base_url, headers=reviewer, timeout=30) as review,
        ):
            runs = {}
            for verdict in ("approve", "deny", "edit"):
                started = backend.post("/api/runs", json={"agent": "real-refunds", "prompt": PROMPT})
                assert started.status_code == 201, started.text
                runs[verdict] = started.json()["id"]

            decisions = {
                "approve": {"verdict": "approve"},
                "deny": {"verdict": "deny", "reason": "Refunds above 20 euros need a manager."},
                "edit": {"verdict": "edit", "args": {"order_id": "A-1", "amount": 20}},
            }
            for verdict, run_id in runs.items():
                call = wait_for(partial(pending_call, review, run_id), f"the {verdict} run's call")
                assert call["tool"] == "refund"
                assert call in review.get("/api/calls", params={"status": "pending"}).json()["items"]
                decided = review.post(f"/api/calls/{call['id']}/decision", json=decisions[verdict])
                assert decided.status_code == 200, decided.text

            for verdict, run_id in runs.items():
                run = wait_for(partial(settled_run, review, run_id), f"the {verdict} run to finish")
                assert run["status"] == "completed", run
                assert isinstance(run["output"], str)
                [call] = review.get(f"/api/runs/{run_id}/calls").json()["items"]
                assert call["status"] == {"approve": "succeeded", "deny": "denied", "edit": "succeeded"}[verdict]
                messages = review.get(f"/api/runs/{run_id}/messages").json()["messages"]
                assert messages[-1]["model_name"] == MODEL_ALIAS

            edited = review.get(f"/api/runs/{runs['edit']}/calls").json()["items"][0]
            assert "Refunded 20.0 EUR on order A-1" in str(edited["result"])
    assert "Traceback" not in app_process.output()


def test_the_demo_on_a_real_model_serves_at_once_and_says_when_no_approval_was_needed(
    llm_server: LocalModelServer, tmp_path: Path
) -> None:
    env = {
        "OPENAI_BASE_URL": llm_server.base_url,
        "APPROVALS_DEMO_OPENAI_MODEL": MODEL_ALIAS,
        "APPROVALS_ADMIN_PASSWORD": "demo-password-1",
    }
    database = f"sqlite:///{tmp_path / 'demo.db'}"
    with (
        served(["--demo", "--database-url", database], env, tmp_path / "serve.log") as demo,
        httpx.Client(base_url=demo.base_url, timeout=30) as client,
    ):
        page = client.get("/login")
        csrf = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
        assert csrf is not None
        login = {"username": "alice", "password": "demo-password-1", "csrf_token": csrf.group(1)}
        assert client.post("/login", data=login).status_code == 303
        runs = client.get("/api/runs", params={"agent": "shop-assistant"}).json()["items"]
        assert len(runs) == 5, "the demo's runs are queued before the app serves"

        def all_settled() -> list[dict[str, Any]]:
            items: list[dict[str, Any]] = client.get("/api/runs").json()["items"]
            return items if all(r["status"] in SETTLED for r in items) else []

        settled = wait_for(all_settled, "the demo's runs to settle on the real model", seconds=600)
        log = demo.output()
        first_run_line = min(log.find(f"run {r['id']}") for r in settled if f"run {r['id']}" in log)
        assert 0 <= log.index("approvals: serving") < first_run_line, "runs were worked on before serving"
        for run in settled:
            if run["status"] != "completed":
                continue
            calls = client.get(f"/api/runs/{run['id']}/calls").json()["items"]
            run_page = client.get(f"/runs/{run['id']}").text
            if not calls:
                assert "Completed without asking anyone" in run_page
                assert f"run {run['id']} (shop-assistant) completed without asking anyone" in log
            else:
                assert "Completed without asking anyone" not in run_page
    assert "Traceback" not in demo.output()
