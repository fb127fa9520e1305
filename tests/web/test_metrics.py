"""`/metrics` after a scripted sequence, parsed with prometheus_client's own parser, on SQLite and PostgreSQL.

The numbers are read from the database at scrape time, so a second app on the same database
(another process's worth) answers the same numbers.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text

from approvals.calls.verdicts import Approve
from approvals.policy import load_rules
from approvals.store import SYSTEM, Actor
from approvals.store.metrics_queries import failure_reason
from approvals.worker.resumer import AgentRegistry
from approvals_web.app import create_app
from approvals_web.settings import Settings

from ..processes import free_port, stop, wait_until_answering
from ..store.conftest import execute
from .conftest import WebApp
from .test_gate import asking_client, claude_input, gate_call, hook

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "docs" / "grafana-dashboard.json"
README = ROOT / "README.md"

pytestmark = pytest.mark.anyio

FIXED_NAMES = {
    "approvals_pending_calls",
    "approvals_oldest_pending_call_age_seconds",
    "approvals_decisions",
    "approvals_decision_latency_seconds",
    "approvals_rule_decisions",
    "approvals_expired_calls",
    "approvals_runs",
    "approvals_run_failures",
    "approvals_resumes",
    "approvals_resume_duration_seconds",
    "approvals_deliverer_lag_events",
    "approvals_gate_waits",
    "approvals_gate_wait_seconds",
    "approvals_gate_fallbacks",
    "approvals_gate_outcomes",
    "approvals_database_up",
}
"""The contract's names as the parser gives them (counters without `_total`)."""


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample by name and sorted labels."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def scrape(web: WebApp, app: Any = None) -> str:
    async with web.client() if app is None else _client(app) as client:
        response = await client.get("/metrics", headers={"Authorization": f"Bearer {web.tokens['admin']}"})
    assert response.status_code == 200, response.text
    return response.text


def _client(app: Any) -> Any:
    import httpx

    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://testserver")


async def _script(web: WebApp) -> None:
    """Four gate calls: one denied on the web page, one approved over the API, one expired, one left waiting;
    and a run that failed."""
    async with await asking_client(web) as agent:
        calls = []
        for n in range(4):
            body = gate_call(session_id=f"s-{n}", idempotency_key=f"k-{n}", approval_ttl=3600 if n == 2 else None)
            response = await agent.post("/api/gate/calls", json={k: v for k, v in body.items() if v is not None})
            assert response.status_code in (200, 201, 202), response.text
            calls.append(response.json()["call_id"])
    alice, csrf = await web.login("alice")
    denied = await alice.post(f"/calls/{calls[0]}/deny", data={"reason": "not this one", "csrf_token": csrf})
    assert denied.status_code < 400, denied.text
    await alice.aclose()
    async with web.api("reviewer") as reviewer:
        approved = await reviewer.post(f"/api/calls/{calls[1]}/decision", json={"verdict": "approve"})
        assert approved.status_code == 200, approved.text
    assert await web.store.calls.expire(now=dt.datetime.now(dt.UTC) + dt.timedelta(hours=2)) == 1
    run_id = (await web.store.calls.get_call(calls[3])).run_id
    # a failed run as the resumer writes it (`Type: message`); the scripted gate runs never fail on their own
    await execute(
        web.store, "UPDATE runs SET status = 'failed', error = :e WHERE id = :id", e="ValueError: x", id=run_id
    )


async def test_metrics_after_a_scripted_sequence(web: WebApp, db_url: str, tmp_path: Path) -> None:
    await _script(web)
    text = await scrape(web)
    got = samples(text)
    assert {family.name for family in text_string_to_metric_families(text)} >= FIXED_NAMES
    assert got[("approvals_database_up", ())] == 1
    assert got[("approvals_decisions_total", (("channel", "web"), ("verdict", "deny")))] == 1
    assert got[("approvals_decisions_total", (("channel", "api"), ("verdict", "approve")))] == 1
    assert sum(v for (name, _), v in got.items() if name == "approvals_decisions_total") == 2
    assert got[("approvals_expired_calls_total", ())] == 1
    assert got[("approvals_pending_calls", (("agent", "billing-service"), ("tool", "refund")))] == 1
    assert got[("approvals_oldest_pending_call_age_seconds", ())] >= 0
    assert got[("approvals_decision_latency_seconds_count", ())] == 2
    assert got[("approvals_decision_latency_seconds_bucket", (("le", "+Inf"),))] == 2
    assert got[("approvals_run_failures_total", (("reason", "ValueError"),))] == 1
    assert got[("approvals_runs", (("status", "failed"),))] == 1
    assert got[("approvals_gate_waits_total", (("engine", "gate"),))] == 2  # denied, approved: nobody waits on expiry
    assert got[("approvals_gate_wait_seconds_count", ())] == 2
    assert got[("approvals_gate_outcomes_total", (("engine", "gate"), ("outcome", "expired")))] == 1
    # another process: `approvals serve` on the same database answers the same numbers
    again = samples(await anyio.to_thread.run_sync(scrape_in_own_process, db_url, tmp_path))
    age = ("approvals_oldest_pending_call_age_seconds", ())
    assert {k: v for k, v in again.items() if k != age} == {k: v for k, v in got.items() if k != age}


def scrape_in_own_process(db_url: str, tmp_path: Path) -> str:
    """`/metrics` of `approvals serve` started as its own process on `db_url` (metrics public, no worker)."""
    port, log = free_port(), tmp_path / "served.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("APPROVALS_")}
    env |= {"APPROVALS_DATABASE_URL": db_url, "APPROVALS_METRICS_PUBLIC": "true", "APPROVALS_SECRET_KEY": "s"}
    with log.open("w") as output:
        served = subprocess.Popen(
            [sys.executable, "-m", "approvals.cli", "serve", "--port", str(port), "--no-worker"],
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until_answering(served, f"http://127.0.0.1:{port}/healthz", log, seconds=120)
        response = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30)
    finally:
        stop(served)
    assert response.status_code == 200, response.text
    return response.text


async def test_metrics_need_the_scope(web: WebApp) -> None:
    async with web.client() as nobody:
        assert (await nobody.get("/metrics")).status_code == 401
    reader = await web.store.people.create_token("reader", role="viewer", actor=SYSTEM, scopes=["runs:read"])
    scraper = await web.store.people.create_token("scraper", role="viewer", actor=SYSTEM, scopes=["metrics:read"])
    async with web.client(headers={"Authorization": f"Bearer {reader}"}) as client:
        assert (await client.get("/metrics")).status_code == 403
    async with web.client(headers={"Authorization": f"Bearer {scraper}"}) as client:
        assert (await client.get("/metrics")).status_code == 200


async def test_public_metrics_and_a_database_outage(db_url: str, tmp_path: Any) -> None:
    settings = Settings(database_url=db_url, worker=False, secret_key="test-secret", metrics_public=True)
    app = create_app(settings, registry=AgentRegistry())
    async with app.router.lifespan_context(app), _client(app) as client:
        assert samples((await client.get("/metrics")).text)[("approvals_database_up", ())] == 1
        await app.state.context.db.dispose()
        original = app.state.context.db.read

        def down() -> Any:
            raise OSError("connection refused")

        app.state.context.db.read = down
        try:
            response = await client.get("/metrics")
        finally:
            app.state.context.db.read = original
    assert response.status_code == 200
    assert samples(response.text) == {("approvals_database_up", ()): 0}


async def test_a_decision_records_its_channel(web: WebApp) -> None:
    async with await asking_client(web) as agent:
        call_id = (await agent.post("/api/gate/calls", json=gate_call())).json()["call_id"]
    call = await web.store.calls.get_call(call_id)
    slack = Actor(id="bob", role="reviewer", channel="slack")
    await web.store.calls.decide(call_id, Approve(args_digest=call.current_digest), actor=slack)
    got = samples(await scrape(web))
    assert got[("approvals_decisions_total", (("channel", "slack"), ("verdict", "approve")))] == 1
    trail = await web.store.audit.audit_events(action="call.approved", run_id=call.run_id)
    assert [(event.details or {}).get("channel") for event in trail.items] == ["slack"]
    async with web.store.db.read() as session:
        channels = (
            await session.execute(text("SELECT channel FROM decisions WHERE call_id = :c"), {"c": call_id})
        ).all()
    assert [row[0] for row in channels] == ["slack"]


async def test_resumes_and_hook_fallbacks_are_counted(web: WebApp, tmp_path: Path) -> None:
    """A native run paused, approved and resumed is two resumes with their durations; a hook that nobody answered
    within its wait is one fallback, by engine and fallback."""
    service = web.app.state.context.service
    starter = Actor("svc", "reviewer")
    run_id = await service.start_run("shop", "refund A-1", actor=starter, deps={"log": str(tmp_path / "tools.log")})
    await service.resumer.resume(run_id)
    calls = {call.tool_name: call for call in await web.store.calls.run_calls(run_id)}
    alice, bob = Actor("alice", "reviewer", channel="api"), Actor("bob", "reviewer", channel="api")
    await service.decide(calls["refund"].id, Approve(args_digest=calls["refund"].current_digest), actor=alice)
    for reviewer in (alice, bob):
        digest = calls["delete_customer"].current_digest
        await service.decide(calls["delete_customer"].id, Approve(args_digest=digest), actor=reviewer)
    await service.resumer.resume(run_id)
    assert (await web.store.runs.get_run(run_id)).status == "completed"
    async with await asking_client(web) as agent:
        for cli, fallback in (("claude-code", "ask"), ("claude-code", "deny"), ("codex", "deny")):
            body = claude_input(session_id=f"{cli}-{fallback}", tool_use_id=f"toolu_{fallback}")
            await hook(agent, body, cli, fallback=fallback)
    got = samples(await scrape(web))
    assert got[("approvals_resumes_total", ())] == 2
    assert got[("approvals_resume_duration_seconds_count", ())] == 2
    assert got[("approvals_resume_duration_seconds_bucket", (("le", "1.0"),))] == 2
    assert got[("approvals_resume_duration_seconds_sum", ())] > 0
    assert got[("approvals_runs", (("status", "completed"),))] == 1
    fallbacks = {labels: v for (name, labels), v in got.items() if name == "approvals_gate_fallbacks_total"}
    assert fallbacks == {
        (("engine", "claude_code"), ("fallback", "ask")): 1,
        (("engine", "claude_code"), ("fallback", "deny")): 1,
        (("engine", "codex"), ("fallback", "deny")): 1,
    }
    assert (await web.store.audit.audit_events(action="call.fallback", run_id=run_id)).items == []  # asked no hook
    trail = (await web.store.audit.audit_events(action="call.fallback")).items
    assert sorted((e.details or {})["fallback"] for e in trail) == ["ask", "deny", "deny"]
    assert all((e.details or {})["waited_seconds"] >= 0 and e.subject_type == "call" for e in trail)


def test_failure_reasons() -> None:
    assert failure_reason("ValueError: bad") == "ValueError"
    assert failure_reason("httpx.ReadTimeout: slow") == "ReadTimeout"
    assert failure_reason("the database refused to store the run's latest step: x") == "database"
    assert failure_reason("model said no") == "other"
    assert failure_reason(None) == "unknown"


async def test_a_rule_allow_counts_for_its_rule_not_for_people(web: WebApp) -> None:
    rules = "rules:\n  - name: small-refunds\n    tool: refund\n    when: args.amount < 50\n    effect: allow\n"
    await web.store.rules.apply_rules(load_rules(rules), actor=SYSTEM)
    async with await asking_client(web) as agent:
        response = await agent.post("/api/gate/calls", params={"wait": 0}, json=gate_call())
    assert response.json()["decided_by"] == "rule:small-refunds"
    got = samples(await scrape(web))
    assert got[("approvals_rule_decisions_total", (("effect", "allow"), ("rule", "small-refunds")))] == 1
    assert not [name for name, _ in got if name == "approvals_decisions_total"]
    assert got[("approvals_decision_latency_seconds_count", ())] == 0


async def test_gate_waits_count_only_calls_a_person_decided(web: WebApp) -> None:
    """Issue 41, fault 2: gate calls a rule allowed or denied, or that expired, waited for nobody; they are
    `approvals_gate_outcomes_total`, and the wait histogram holds only the call a person decided."""
    rules = (
        "rules:\n"
        "  - name: small-refunds\n    tool: refund\n    when: args.amount < 50\n    effect: allow\n"
        "  - name: huge-refunds\n    tool: refund\n    when: args.amount > 5000\n    effect: deny\n"
        "    reason: too big for an agent\n"
    )
    await web.store.rules.apply_rules(load_rules(rules), actor=SYSTEM)
    asked = {}
    async with await asking_client(web) as agent:
        for n, (amount, ttl) in enumerate(((10, None), (9000, None), (100, 3600), (200, None))):
            body = gate_call(session_id=f"s-{n}", idempotency_key=f"k-{n}", approval_ttl=ttl)
            body["args"] = {"order_id": f"A-{n}", "amount": amount}
            response = await agent.post(
                "/api/gate/calls", params={"wait": 0}, json={k: v for k, v in body.items() if v is not None}
            )
            assert response.status_code in (200, 201, 202), response.text
            asked[amount] = response.json()["call_id"]
    assert await web.store.calls.expire(now=dt.datetime.now(dt.UTC) + dt.timedelta(hours=2)) == 1
    async with web.api("reviewer") as reviewer:
        approved = await reviewer.post(f"/api/calls/{asked[200]}/decision", json={"verdict": "approve"})
        assert approved.status_code == 200, approved.text
    got = samples(await scrape(web))
    assert got[("approvals_gate_waits_total", (("engine", "gate"),))] == 1
    assert got[("approvals_gate_wait_seconds_count", ())] == 1
    assert got[("approvals_gate_wait_seconds_bucket", (("le", "+Inf"),))] == 1
    outcomes = {labels: v for (name, labels), v in got.items() if name == "approvals_gate_outcomes_total"}
    assert outcomes == {
        (("engine", "gate"), ("outcome", "rule_allowed")): 1,
        (("engine", "gate"), ("outcome", "rule_denied")): 1,
        (("engine", "gate"), ("outcome", "expired")): 1,
    }
    assert got[("approvals_decision_latency_seconds_count", ())] == 1


async def test_every_metric_the_dashboard_and_the_readme_name_is_served(web: WebApp) -> None:
    """docs/grafana-dashboard.json and the README's table query only what `/metrics` serves, so no panel stays empty."""
    served = {family.name for family in text_string_to_metric_families(await scrape(web))}
    served |= {f"{name}_total" for name in served}  # the parser names a counter without its _total
    named = set(re.findall(r"approvals_[a-z_]+", DASHBOARD.read_text()))
    section = README.read_text().split("## Running it in production", 1)[1].split("\n## ", 1)[0]
    named |= set(re.findall(r"`(approvals_[a-z_]+)", section))
    bare = {re.sub(r"_(bucket|count|sum)$", "", name) for name in named}
    assert sorted(bare - served) == []
