"""The chaos checks are not vacuous: an untouched run passes, and each kind of damage is caught."""

from __future__ import annotations

from pathlib import Path

import pytest

from approvals.calls.verdicts import Approve
from approvals.store import Store
from approvals.worker.resumer import AgentRegistry, Resumer
from tests.store.conftest import execute

from .agent import AGENT_NAME, chaos_agent, read_executions
from .checks import check_promises
from .driver import REVIEWERS, STARTER

pytestmark = pytest.mark.anyio


async def completed_run(store: Store, log: Path) -> str:
    """One run of the chaos agent, continued in this process, every call approved."""
    run_id = await store.runs.start_run(AGENT_NAME, "errand", actor=STARTER, deps={"log": str(log)})
    resumer = Resumer(store, AgentRegistry([chaos_agent]))
    while await resumer.resume(run_id) is not None:
        for call in await store.calls.run_calls(run_id):
            for reviewer in REVIEWERS[: call.approvals_required] if call.status == "pending" else []:
                await store.calls.decide(call.id, Approve(), actor=reviewer)
    assert (await store.runs.get_run(run_id)).status == "completed"
    return run_id


async def test_an_untouched_run_keeps_every_promise(store: Store, tmp_path: Path) -> None:
    log = tmp_path / "executions.log"
    run_id = await completed_run(store, log)
    findings = await check_promises(store, [run_id], log)
    assert findings.problems == []
    assert findings.stats["executions"] == len(read_executions(log)) == 8
    assert findings.stats["calls succeeded"] == 5


DAMAGE = {
    "executed twice": ("log", "executed 2 times"),
    "a message gap": ("DELETE FROM messages WHERE seq = 2", "message seqs"),
    "a step cut short": (
        "DELETE FROM messages WHERE seq = (SELECT MAX(seq) FROM messages); "
        "UPDATE runs SET message_count = message_count - 1",
        "the last message is not the final answer",
    ),
    "a broken chain": ("UPDATE audit_events SET actor = 'mallory' WHERE id = 3", "audit chain broken at event 3"),
    "a lease held": ("UPDATE runs SET lease_owner = 'ghost'", "still leased to ghost"),
    "a stuck run": ("UPDATE runs SET status = 'resuming'", "resuming, not completed"),
    "a forged result": (
        """UPDATE tool_calls SET result = '"refund:forged"' WHERE tool_name = 'refund'""",
        "which no execution returned",
    ),
    "an answered call that ran": (
        "UPDATE tool_calls SET status = 'answered' WHERE tool_name = 'refund'",
        "was answered instead of run, yet executed",
    ),
    "a call left open": ("UPDATE tool_calls SET status = 'outcome_unknown' WHERE tool_name = 'ship'", "left outcome"),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
async def test_the_checks_catch(damage: str, store: Store, tmp_path: Path) -> None:
    log = tmp_path / "executions.log"
    run_id = await completed_run(store, log)
    sql, expected = DAMAGE[damage]
    if sql == "log":
        charge = next(line for line in log.read_text().splitlines() if '"charge"' in line)
        with log.open("a") as file:
            file.write(charge + "\n")
    else:
        for statement in sql.split("; "):
            await execute(store, statement)
    findings = await check_promises(store, [run_id], log)
    assert any(expected in problem for problem in findings.problems), findings.problems


async def test_a_run_missing_from_the_database_is_lost(store: Store, tmp_path: Path) -> None:
    log = tmp_path / "executions.log"
    run_id = await completed_run(store, log)
    findings = await check_promises(store, [run_id, "0" * 32], log)
    assert findings.problems == [f"run {'0' * 32}: lost (the driver started it; the database has no such run)"]
