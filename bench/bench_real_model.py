"""Our own overhead per resume against a real model: model time against everything else.

A worker (`Resumer`) resumes approved runs of an agent on the local model server
(llama.cpp's server with Gemma 3 270M; `make llm-server` builds it, `make bench` passes
where it is). Each sample is one resume after an approval: claim, run the approved tool,
ask the model for its answer, store the step and finish. The time inside the model
adapter's `request` is the model's; the rest is ours: database writes, history loading,
argument validation, tool execution, request mapping. Printed per database as medians of
RUNS resumes, with the time spent before the model server answers (HTTP and JSON) inside
the model's share, as a user would see it.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.llm_server starts the model server
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _databases import create_pg_database, drop_pg_database

from approvals.calls.verdicts import Approve
from approvals.engines.native.messages import ModelRequest, ModelResponse
from approvals.engines.native.models import ModelRequestParameters, ModelSettings
from approvals.engines.native.models.openai import OpenAIChatModel
from approvals.store import Actor, Database, Store
from approvals.store.migrate import upgrade
from approvals.worker.resumer import AgentRegistry, Resumer
from tests.llm_server import running_server
from tests.real_model.agents import make_refund_agent

RUNS = 12
WARMUP = 2
STARTER = Actor("shop-backend", "reviewer")
REVIEWER = Actor("alice", "reviewer")


class TimedModel(OpenAIChatModel):
    """The real adapter, with the time spent inside `request` added up."""

    spent = 0.0

    async def request(
        self,
        messages: Sequence[ModelRequest | ModelResponse],
        settings: ModelSettings | None,
        params: ModelRequestParameters,
    ) -> ModelResponse:
        started = time.perf_counter()
        try:
            return await super().request(messages, settings, params)
        finally:
            TimedModel.spent += time.perf_counter() - started


async def measure(url: str, base_url: str) -> tuple[list[float], list[float]]:
    agent = make_refund_agent(base_url)
    agent.model = TimedModel(agent.model.model_name if agent.model else "", base_url=base_url, max_retries=0)
    database = Database(url)
    store = Store(database)
    resumer = Resumer(store, AgentRegistry([agent]), worker_id="bench")
    totals: list[float] = []
    models: list[float] = []
    try:
        for index in range(RUNS + WARMUP):
            run_id = await store.runs.start_run(agent.name, "Please refund order A-1, 25 euros.", actor=STARTER)
            await resumer.resume(run_id)  # the model asks for the refund: the run pauses
            [call] = await store.calls.run_calls(run_id)
            await store.calls.decide(call.id, Approve(), actor=REVIEWER)
            TimedModel.spent = 0.0
            started = time.perf_counter()
            await resumer.resume(run_id)
            total = time.perf_counter() - started
            assert (await store.runs.get_run(run_id)).status == "completed"
            if index >= WARMUP:
                totals.append(total)
                models.append(TimedModel.spent)
    finally:
        await agent.model.close()
        await database.dispose()
    return totals, models


def report(name: str, totals: list[float], models: list[float]) -> None:
    ours = [t - m for t, m in zip(totals, models, strict=True)]
    total, model, own = (statistics.median(x) * 1e3 for x in (totals, models, ours))
    print(
        f"{name:<10} resume after approval: {total:7.1f} ms   model {model:7.1f} ms   "
        f"ours {own:5.1f} ms ({own / total:5.1%})   over {len(totals)} resumes"
    )


async def main() -> None:
    with tempfile.TemporaryDirectory() as folder, running_server(Path(folder)) as server:
        sqlite_url = f"sqlite:///{Path(folder) / 'bench.db'}"
        upgrade(sqlite_url)
        report("SQLite", *await measure(sqlite_url, server.base_url))
        pg_url = create_pg_database()
        try:
            report("PostgreSQL", *await measure(pg_url, server.base_url))
        finally:
            drop_pg_database(pg_url)


if __name__ == "__main__":
    anyio.run(main)
