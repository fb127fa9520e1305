"""A worker process for one engine's scripted agent: it resumes every ready run once, then stops.

Usage: python -m tests.engines.conformance.worker_process DATABASE_URL ENGINE TURNS_JSON LEASE_SECONDS
"""

from __future__ import annotations

import json
import sys

import anyio

from approvals.store import Database, Store
from approvals.worker.resumer import AgentRegistry, Resumer

from .driver import AGENT
from .harnesses import HARNESSES


async def main(url: str, engine: str, turns: str, lease_seconds: str) -> None:
    database = Database(url)
    scripted = [[(tool, args) for tool, args in turn] for turn in json.loads(turns)]
    registry = AgentRegistry([HARNESSES[engine].agent(AGENT, scripted)])
    resumer = Resumer(Store(database), registry, worker_id="process", lease_seconds=float(lease_seconds))
    while (resumed := await resumer.resume()) is not None:
        sys.stdout.write(f"resumed {resumed}\n")
    await database.dispose()


if __name__ == "__main__":
    url, engine, turns, lease_seconds = sys.argv[1:5]
    anyio.run(main, url, engine, turns, lease_seconds)
