"""A worker process for one engine's scripted agent: it resumes every ready run once, then stops.

Usage: python -m tests.engines.conformance.worker_process DATABASE_URL HARNESS TURNS_JSON LEASE_SECONDS

HARNESS is the harness class as `module:name`: only that engine is imported, as in a deployment of it.
"""

from __future__ import annotations

import importlib
import json
import sys

import anyio

from approvals.store import Database, Store
from approvals.worker.resumer import AgentRegistry, Resumer

from .harnesses import Harness
from .script import AGENT


async def main(url: str, harness_path: str, turns: str, lease_seconds: str) -> None:
    module, _, name = harness_path.partition(":")
    harness: Harness = getattr(importlib.import_module(module), name)()
    scripted = [[(tool, args) for tool, args in turn] for turn in json.loads(turns)]
    database = Database(url)
    registry = AgentRegistry([harness.agent(AGENT, scripted)])
    resumer = Resumer(Store(database), registry, worker_id="process", lease_seconds=float(lease_seconds))
    while (resumed := await resumer.resume()) is not None:
        sys.stdout.write(f"resumed {resumed}\n")
    await database.dispose()


if __name__ == "__main__":
    url, harness_path, turns, lease_seconds = sys.argv[1:5]
    anyio.run(main, url, harness_path, turns, lease_seconds)
