"""Runs one scripted scenario of one engine through the real worker, as the suite's tests read it.

Everything goes through public doors: `ApprovalService` starts runs and validates edits, the
store decides calls and reads them back, and `Resumer` (the worker) continues the runs.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from approvals.engines.view import ModelRequest, ModelResponse
from approvals.service import ApprovalService
from approvals.store import Actor, Store
from approvals.store.models import RunRow, ToolCallRow
from approvals.worker.resumer import AgentRegistry, Resumer

from .harnesses import Harness
from .script import AGENT, Told, Turn, logged, told_from_output

STARTER = Actor("svc", "reviewer", person=False)
ROOT = Path(__file__).resolve().parents[3]


@dataclass
class Driver:
    """One engine's agent on one database, and the worker that continues its runs."""

    harness: Harness
    store: Store
    db_url: str
    log: Path
    turns: list[Turn] = field(default_factory=list)
    registry: AgentRegistry = field(default_factory=AgentRegistry)

    @property
    def service(self) -> ApprovalService:
        return ApprovalService(self.store, self.registry)

    def worker(self, worker_id: str = "conformance-worker") -> Resumer:
        return Resumer(self.store, self.registry, worker_id=worker_id)

    async def start(self, *turns: Turn, **deps: Any) -> str:
        """Start a run whose model makes `turns`, and let the worker take it as far as it goes."""
        self.turns = list(turns)
        self.registry = AgentRegistry([self.harness.agent(AGENT, self.turns)])
        run_id = await self.service.start_run(AGENT, "Refund A-1", actor=STARTER, deps={"log": str(self.log), **deps})
        assert await self.worker().resume() == run_id
        return run_id

    async def resume(self) -> str | None:
        """One pass of the worker: the run it continued, or None when none was ready."""
        return await self.worker().resume()

    async def run(self, run_id: str) -> RunRow:
        return await self.store.runs.get_run(run_id)

    async def calls(self, run_id: str) -> list[ToolCallRow]:
        return sorted(await self.store.calls.run_calls(run_id), key=lambda call: call.tool_call_id)

    async def told(self, run_id: str) -> list[Told]:
        """What the model said it received, once the run completed."""
        run = await self.run(run_id)
        assert run.status == "completed", run.error
        return told_from_output(run.output)

    def logged(self) -> list[str]:
        return logged(self.log)

    async def view(self, run_id: str) -> list[ModelRequest | ModelResponse]:
        """The run's history as the run page and the API read it, whatever engine stored it."""
        return await self.service.history(run_id)

    def worker_process(self, *, lease_seconds: float) -> subprocess.CompletedProcess[str]:
        """A worker in a process of its own, with the same engine and script, until it stops or dies."""
        command = [sys.executable, "-m", "tests.engines.conformance.worker_process"]
        harness = f"{type(self.harness).__module__}:{type(self.harness).__qualname__}"
        arguments = [self.db_url, harness, json.dumps(self.turns), str(lease_seconds)]
        return subprocess.run(
            [*command, *arguments], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
        )
