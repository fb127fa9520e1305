"""The agent the chaos workers continue, and the hooks that let a worker say where it is or die there.

Every tool execution appends one line to an execution log named in the run's deps (one
`write` on an `O_APPEND` file, then `fsync`), so how often each call really ran is known
after the process that ran it was killed. A tool returns a fresh nonce and logs it, so a
stored result can be traced to the execution that produced it.

The script covers a safe call next to one that needs approval, three parallel calls that
need approval (one idempotent, one needing two reviewers), a step with only a safe call,
and a last approval before the final answer: four claims, five model requests and eight
tool executions per run.
"""

from __future__ import annotations

import json
import os
import random
import signal
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from approvals import Agent, RunContext
from approvals.engines.native.messages import ModelRequest, ModelResponse
from approvals.engines.native.models import TestModel
from approvals.engines.native.models.base import ModelRequestParameters, ModelSettings

__all__ = (
    "AGENT_NAME",
    "APPROVAL_TOOLS",
    "HOOK_POINTS",
    "IDEMPOTENT_TOOLS",
    "PROCESS",
    "SCRIPT",
    "Execution",
    "chaos_agent",
    "read_executions",
)

AGENT_NAME = "chaos"
SCRIPT: list[Any] = [
    [("lookup", {"item": "order"}), ("charge", {"amount": 5})],
    [("charge", {"amount": 7}), ("notify", {"text": "charged"}), ("ship", {"parcel": "p-1"})],
    ("lookup", {"item": "stock"}),
    [("refund", {"amount": 2}), ("lookup", {"item": "policy"})],
]
"""One step per model request; after it the model sums up the last results, which ends the run."""
APPROVAL_TOOLS = frozenset({"charge", "notify", "ship", "refund"})
IDEMPOTENT_TOOLS = frozenset({"lookup", "notify"})
HOOK_POINTS = (
    "claim:after",
    "model:before",
    "model:after",
    "tool:before",
    "tool:after",
    "mark_executing:before",
    "mark_executing:after",
    "append_step:before",
    "append_step:after",
    "pause:before",
    "pause:after",
    "finish:before",
    "finish:after",
    "commit",
)
"""Where a worker armed with `die_at` kills itself (`commit`: just before an ORM transaction commits)."""
PHASE_FILE_SIZE = 4096


@dataclass
class ChaosProcess:
    """This process's hooks: where each run in flight is (a file the driver reads after a kill), and where to die."""

    phase_fd: int | None = None
    die_at: str | None = None
    die_after: int = 0
    """Occurrences of `die_at` to pass before dying there."""
    latency: float = 0.0
    """Upper bound of the random sleeps in the model and the tools, in seconds."""
    rng: random.Random = field(default_factory=random.Random)
    where: dict[str, str] = field(default_factory=dict)
    """Run id -> the last point it passed, for each run in flight in this process."""
    passed: Counter[str] = field(default_factory=Counter)

    def configure(
        self, *, phase_file: str | None, die_at: str | None, die_after: int, latency: float, seed: int
    ) -> None:
        """Set up this process's hooks (a worker, right after it forked)."""
        if phase_file:
            self.phase_fd = os.open(phase_file, os.O_RDWR | os.O_CREAT, 0o644)
        self.die_at, self.die_after, self.latency = die_at, die_after, latency
        self.rng = random.Random(seed)
        self.where.clear()
        self.passed.clear()

    def at(self, run_id: str, point: str, *, done: bool = False) -> None:
        """Pass `point` in run `run_id` (`done`: the run left this process): record it, and die there if armed."""
        if done:
            self.where.pop(run_id, None)
        else:
            self.where[run_id] = point
        self._write_phases()
        self.cross(point)

    def cross(self, point: str) -> None:
        """Pass `point`, and die there if armed to."""
        self.passed[point] += 1
        if point == self.die_at and self.passed[point] > self.die_after:
            os.kill(os.getpid(), signal.SIGKILL)

    async def lag(self) -> None:
        """Sleep a random moment, like a model or an API call, so kills land inside it too."""
        if self.latency > 0:
            await anyio.sleep(self.rng.uniform(0, self.latency))

    def _write_phases(self) -> None:
        if self.phase_fd is None:
            return
        text = "".join(f"{run} {point}\n" for run, point in self.where.items())
        os.pwrite(self.phase_fd, text.encode()[: PHASE_FILE_SIZE - 1].ljust(PHASE_FILE_SIZE), 0)


PROCESS = ChaosProcess()
"""The hooks of the current process; inert until `configure` is called (the driver's process never does)."""


def read_phases(path: Path) -> list[str]:
    """The points the runs in flight of a (dead) worker last passed, from its phase file."""
    try:
        text = path.read_bytes().rstrip(b" \x00").decode(errors="replace")
    except FileNotFoundError:
        return []
    return [line.split(" ", 1)[1] for line in text.splitlines() if " " in line]


class ChaosModel(TestModel):
    """`TestModel` with a random latency and a hook before and after each request."""

    async def request(
        self,
        messages: Sequence[ModelRequest | ModelResponse],
        settings: ModelSettings | None,
        params: ModelRequestParameters,
    ) -> ModelResponse:
        run_id = (messages[-1].run_id if messages else None) or "-"
        PROCESS.at(run_id, "model:before")
        await PROCESS.lag()
        response = await super().request(messages, settings, params)
        PROCESS.at(run_id, "model:after")
        return response


chaos_agent: Agent[dict[str, Any]] = Agent(ChaosModel(SCRIPT), name=AGENT_NAME, instructions="You run errands.")


@dataclass(frozen=True)
class Execution:
    """One line of the execution log: a tool really ran."""

    run_id: str
    tool_call_id: str
    tool: str
    nonce: str
    pid: int


async def _execute(ctx: RunContext[dict[str, Any]]) -> str:
    """What every tool does: lag, record the execution durably, lag again, return the nonce."""
    assert ctx.tool_name is not None and ctx.tool_call_id is not None
    PROCESS.at(ctx.run_id, "tool:before")
    await PROCESS.lag()
    nonce = uuid.uuid4().hex[:12]
    line = {"run_id": ctx.run_id, "tool_call_id": ctx.tool_call_id, "tool": ctx.tool_name, "nonce": nonce}
    fd = os.open(ctx.deps["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps({**line, "pid": os.getpid()}) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    PROCESS.at(ctx.run_id, "tool:after")
    await PROCESS.lag()
    return f"{ctx.tool_name}:{nonce}"


@chaos_agent.tool(idempotent=True)
async def lookup(ctx: RunContext[dict[str, Any]], item: str) -> str:
    """Look something up (safe: needs nobody, may run twice)."""
    return await _execute(ctx)


@chaos_agent.tool(requires_approval=True)
async def charge(ctx: RunContext[dict[str, Any]], amount: int) -> str:
    """Charge the customer (must never run twice)."""
    return await _execute(ctx)


@chaos_agent.tool(requires_approval=True, idempotent=True)
async def notify(ctx: RunContext[dict[str, Any]], text: str) -> str:
    """Notify the customer (idempotent: a crash mid-call retries it)."""
    return await _execute(ctx)


@chaos_agent.tool(requires_approval=True, approvals_required=2)
async def ship(ctx: RunContext[dict[str, Any]], parcel: str) -> str:
    """Ship a parcel; two people must agree."""
    return await _execute(ctx)


@chaos_agent.tool(requires_approval=True)
async def refund(ctx: RunContext[dict[str, Any]], amount: int) -> str:
    """Refund the customer (must never run twice)."""
    return await _execute(ctx)


def read_executions(path: Path) -> list[Execution]:
    """Every execution the log records; a torn last line (impossible with one small write) fails loudly."""
    if not path.exists():
        return []
    return [Execution(**json.loads(line)) for line in path.read_text().splitlines() if line]
