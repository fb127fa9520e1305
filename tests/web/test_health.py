"""Health endpoints, and what clients get while the database is down; background tasks that die come back."""

from __future__ import annotations

import anyio
import httpx
import pytest

from approvals.store import SYSTEM
from approvals.store.migrate import upgrade
from approvals.worker.supervise import Supervisor
from approvals_web.app import create_app
from approvals_web.settings import Settings

from ..pg_cluster import own_cluster
from .conftest import WebApp

pytestmark = pytest.mark.anyio


async def test_healthz_answers_and_readyz_says_what_is_ready(web: WebApp) -> None:
    async with web.client() as client:
        assert (await client.get("/healthz")).json() == {"status": "ok"}
        ready = await client.get("/readyz")
    assert ready.status_code == 200, ready.text
    body = ready.json()
    assert body["status"] == "ready" and body["database"] == {"reachable": True}
    assert "worker" not in body, "this app runs no worker"
    assert body["background"]["follow-ups"]["state"] == "running"
    with anyio.fail_after(10):  # the reminders' scanner scans once at start, then every interval
        while (scanner := body["follow_ups"])["last_scan"] is None:
            await anyio.sleep(0.05)
            async with web.client() as client:
                body = (await client.get("/readyz")).json()
    assert scanner["outage"] is False and (scanner["reminded"], scanner["escalated"]) == (0, 0)


async def test_while_postgresql_is_down_clients_get_503_and_readyz_says_not_ready() -> None:
    with own_cluster() as cluster:
        url = cluster.database()
        upgrade(url)
        app = create_app(Settings(database_url=url, secret_key="test", worker_poll_interval=3600))
        async with app.router.lifespan_context(app):
            store = app.state.context.store
            token = await store.people.create_token("svc", role="reviewer", actor=SYSTEM)
            transport = httpx.ASGITransport(app=app)
            headers = {"Authorization": f"Bearer {token}"}
            async with httpx.AsyncClient(transport=transport, base_url="http://test", headers=headers) as client:
                with anyio.fail_after(30):
                    while (await client.get("/readyz")).status_code != 200:
                        await anyio.sleep(0.1)
                assert (await client.get("/api/runs")).status_code == 200

                cluster.stop()
                down = await client.get("/api/runs")
                assert down.status_code == 503, down.text
                assert down.headers["content-type"] == "application/problem+json"
                assert down.headers["retry-after"] == "5"
                assert down.json()["title"] == "Database unavailable"
                # a denial, which a service token may give: its approval is refused (403) without the database
                deny = {"verdict": "deny", "reason": "no"}
                decision = await client.post("/api/calls/nope/decision", json=deny)
                assert decision.status_code == 503, decision.text
                not_ready = await client.get("/readyz")
                assert not_ready.status_code == 503
                assert not_ready.json()["database"] == {"reachable": False}
                assert (await client.get("/healthz")).status_code == 200

                cluster.start()
                with anyio.fail_after(60):  # the worker backs off, reconnects, and reaches the database again
                    while (ready := await client.get("/readyz")).status_code != 200:
                        await anyio.sleep(0.2)
                assert ready.json()["worker"]["alive"] is True
                assert ready.json()["worker"]["state"] == "running"
                assert (await client.get("/api/runs")).status_code == 200


async def test_a_background_task_that_dies_is_started_again() -> None:
    attempts: list[int] = []
    running = anyio.Event()
    stop = anyio.Event()

    async def flaky() -> None:
        attempts.append(1)
        if len(attempts) < 3:
            raise RuntimeError(f"boom {len(attempts)}")
        running.set()
        await stop.wait()

    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            supervisor = Supervisor(group, stop, max_delay=0.5)
            state = supervisor.start("flaky", flaky)
            await running.wait()
            assert (state.state, state.restarts, state.last_failure) == ("running", 2, "RuntimeError: boom 2")
            stop.set()
    assert state.state == "stopped"
