"""Resume one run in a separate process: a fresh engine and a fresh agent object.

Usage: python -m tests.store.resume_in_subprocess DATABASE_URL RUN_ID LEASE_SECONDS
"""

from __future__ import annotations

import sys

import anyio

from approvals.store import Database, Store
from approvals.worker.resumer import AgentRegistry, Resumer


async def main(url: str, run_id: str, lease_seconds: str) -> None:
    database = Database(url)
    registry = AgentRegistry()
    registry.load("tests.store.agents:shop_agent")
    registry.load("tests.store.agents:email_agent")
    registry.load("tests.pydanticai.agents:shop")
    resumed = await Resumer(
        Store(database), registry, worker_id="subprocess", lease_seconds=float(lease_seconds)
    ).resume(run_id)
    await database.dispose()
    sys.stdout.write(f"resumed {resumed}\n")


if __name__ == "__main__":
    url, run_id, lease_seconds = sys.argv[1:4]
    anyio.run(main, url, run_id, lease_seconds)
