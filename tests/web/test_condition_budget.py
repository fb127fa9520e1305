"""A costly rule condition never stalls the server (issue 36), on SQLite and PostgreSQL, over real HTTP.

Two adversarial rules: one saved before the cost check existed (written straight into the
table: the issue's five comprehensions over 60 elements), and one the check accepts but that
is slow for a long list in the call. While both exist, `/healthz` answers within 100 ms
throughout listing the rules and asking calls they match; the old one asks a person for its
calls and says why, the slow one's calls outlast the budget, ask a person, and flag the rule.
"""

from __future__ import annotations

import os
import time

import anyio
import pytest

from approvals.store.models import PolicyRuleRow

from .conftest import WebApp
from .test_rules_api import ask

pytestmark = pytest.mark.anyio

SIXTY = "[" + ",".join(str(i) for i in range(60)) + "]"
OLD = SIXTY + ".all(a, " + SIXTY + ".all(b, " + SIXTY + ".all(c, " + SIXTY + ".all(d, " + SIXTY
OLD += ".all(e, a + b + c + d + e >= 0)))))"
SLOW = "args.items.all(a, args.items.exists(b, b < 0) || a >= 0)"
HEALTHY = 0.1 if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) <= 1 else 2.0
"""How fast /healthz must answer: 100 ms alone; beside three busy xdist workers on 2 cores the scheduler alone
costs up to a second, still far from the minutes the issue's condition would have stalled the server for."""


async def test_healthz_answers_within_100_ms_while_adversarial_rules_are_listed_and_matched(web: WebApp) -> None:
    async with web.store.db.write() as session:  # an old row: saved before conditions had a cost limit
        definition = {"name": "old-allow", "tool": ["refund"], "when": OLD, "effect": "allow"}
        session.add(PolicyRuleRow(name="old-allow", version=1, kind="standing", definition=definition, author="ada"))
    async with web.api("admin") as admin:
        saved = await admin.put("/api/rules/scan-ok", json={"tool": "scan", "when": SLOW, "effect": "allow"})
        assert saved.status_code == 201, saved.text
        refused = await admin.put("/api/rules/old-again", json={"tool": "refund", "when": OLD, "effect": "allow"})
        assert refused.status_code == 422 and "may take too long" in refused.text

    latencies: list[float] = []
    done = anyio.Event()

    async def watch() -> None:
        async with web.client() as client:
            while not done.is_set():
                started = time.perf_counter()
                assert (await client.get("/healthz")).status_code == 200
                latencies.append(time.perf_counter() - started)
                await anyio.sleep(0.01)

    async with anyio.create_task_group() as group:
        group.start_soon(watch)
        async with web.api("viewer") as viewer:
            listed = [(await viewer.get("/api/rules")).json() for _ in range(3)]
        slow = [await ask(web, "scan", {"items": list(range(5000))}, f"scan-{n}") for n in range(2)]
        old = await ask(web, "refund", {"amount": 5}, "refund-1")
        small = await ask(web, "scan", {"items": [1, 2]}, "scan-small")
        async with web.api("viewer") as viewer:
            after = {r["name"]: r for r in (await viewer.get("/api/rules")).json()["items"]}
        done.set()

    assert len(latencies) >= 10 and max(latencies) < HEALTHY, f"/healthz took up to {max(latencies):.3f} s"
    assert {r["name"] for r in listed[0]["items"]} == {"old-allow", "scan-ok"}
    assert [call["decision"] for call in slow] == ["pending", "pending"]  # over budget: a person decides
    assert old["decision"] == "pending" and small["decision"] == "approved"
    assert "time budget" in after["scan-ok"]["last_error"]
    assert any("its condition failed at" in flag and "time budget" in flag for flag in after["scan-ok"]["flags"])
    assert any("may take too long" in flag for flag in after["old-allow"]["flags"])  # it asks, and says why
