"""Worker processes SIGKILLed at random points while runs go on: every promise must still hold.

`CHAOS_TRIALS` kills per database (30 by default; `make chaos` runs 300), `CHAOS_SEED`
replays a schedule; see `driver` for how kill points are chosen and `checks` for the promises.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from approvals.store import Database, Store

from .checks import check_promises
from .conftest import REPORTS
from .driver import Chaos, ChaosConfig, ChaosFailure, summary

pytestmark = pytest.mark.anyio


async def test_workers_killed_at_random_lose_no_run_run_no_call_twice_and_leave_no_gap(
    db_url: str, tmp_path: Path
) -> None:
    backend = "postgresql" if db_url.startswith("postgresql") else "sqlite"
    config = ChaosConfig.from_env()
    database = Database(db_url)
    store = Store(database)
    try:
        chaos = Chaos(store, db_url, tmp_path, config)
        failure: str | None = None
        try:
            tally = await chaos.run()
        except ChaosFailure as exc:
            failure = str(exc)
        if failure is not None:
            REPORTS.append(f"{backend}: FAILED, {config.replay(backend)}")
            pytest.fail(f"{config.replay(backend)}\n{failure}", pytrace=False)
        findings = await check_promises(store, chaos.run_ids, chaos.log_path)
        REPORTS.append(summary(backend, config, tally, findings.stats))
        journal = "\n".join(chaos.journal[-80:])
        assert not findings.problems, (
            f"{config.replay(backend)}\n{len(findings.problems)} broken promises:\n"
            + "\n".join(findings.problems[:40])
            + f"\nlatest events:\n{journal}"
        )
        assert tally.kills >= config.kills
    finally:
        await database.dispose()
