"""Framework time per step of a run, as the history grows.

A `FunctionModel` calls a trivial tool K times (K = 1, 10, 100, 300), then answers. The time
between two consecutive model requests is everything the framework does for one step
(validate the call, run the tool, build the next request). Target (issue 3): under 1 ms,
and step 300 within 1.5x of step 10: the cost of a step must not grow with the history.
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Sequence
from typing import Any

import anyio

from approvals import Agent, UsageLimits
from approvals.engines.native.messages import ModelResponse, TextPart, ToolCallPart
from approvals.engines.native.models import AgentInfo, FunctionModel


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


async def add_async(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


async def step_times(tool: Any, k: int) -> list[float]:
    stamps: list[float] = []

    def model(messages: Sequence[Any], info: AgentInfo) -> ModelResponse:
        stamps.append(time.perf_counter())
        if len(stamps) > k:
            return ModelResponse(parts=[TextPart(content="done")])
        return ModelResponse(
            parts=[ToolCallPart(tool_name=tool.__name__, args={"a": 1, "b": 2}, tool_call_id=f"c{len(stamps)}")]
        )

    agent = Agent(FunctionModel(model), tools=[tool])
    await agent.run("go", usage_limits=UsageLimits(request_limit=None))
    return [b - a for a, b in itertools.pairwise(stamps)]


def window(times: list[float], around: int, width: int = 5) -> float:
    """Median step time around step `around` (1-based), in ms."""
    lo = max(0, around - width)
    return statistics.median(times[lo : around + width]) * 1e3


async def main() -> None:
    for tool in (add, add_async):
        kind = "sync tool (worker thread)" if tool is add else "async tool"
        print(f"-- {kind}")
        for k in (1, 10, 100, 300):
            runs = [await step_times(tool, k) for _ in range(5)]
            per_run = [sum(t) / len(t) * 1e3 for t in runs]
            print(f"K={k:<4} mean step {statistics.median(per_run):6.3f} ms", end="")
            if k >= 10:
                merged = [statistics.median(col) for col in zip(*runs, strict=True)]
                print(f"   step 10: {window(merged, 10):6.3f} ms   step {k}: {window(merged, k):6.3f} ms", end="")
            print()


if __name__ == "__main__":
    anyio.run(main)
