"""Runs: a run's life in the store (start, claim, execute approved calls, append steps, pause, finish,
cancel) and its reads. `Runs` is the aggregate (`Store.runs`).

Each method is one transaction. A worker holds a run through a lease (owner + expiry); every
write a worker makes checks it still holds the lease, so a worker that stalled past its
lease cannot overwrite the work of the one that took over.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from functools import cached_property
from typing import Any, cast

from sqlalchemy import Table, bindparam, func, insert, select, tuple_

from .. import tracing
from ..calls.actors import Actor
from ..calls.engine_state import Snapshot
from ..calls.states import CallStatus, RunStatus
from ..calls.stored_history import load_stored_history
from ..calls.tools import DeferredToolRequests
from ..exceptions import Conflict, Forbidden, NotFound
from . import run_cancel
from .audit import run_event
from .backend import Finish
from .claims import Claim, ClaimedRun, ModelMessage, StaleLeaseCheck
from .models import STORED_TEXT, MessageRow, RunRow, RunStateRow
from .paused_runs import PausedRun, insert_paused_run, paused_write
from .policy_evaluation import UnderRules
from .queries import MAX_PAGE, Page, decode_cursor, encode_cursor, page_of
from .run_plan import (
    Interrupted,
    RulesChanged,
    RunEvent,
    RunWrite,
    utcnow,
)
from .run_sql import (
    Step,
    Tx,
    hold_run,
)
from .wakeups import READY_CHANNEL, RUNS_CHANNEL

_RUN_COLUMNS = cast(Table, RunRow.__table__).c
_INSERT_RUN = insert(RunRow).values(
    {
        name: bindparam(name, type_=_RUN_COLUMNS[name].type)
        for name in (
            "id",
            "agent_name",
            "engine",
            "status",
            "prompt",
            "deps",
            "started_by",
            "trace_context",
            "message_count",
            "created_at",
            "updated_at",
        )
    }
)
"""A new run, queued (`start_run`)."""

CallOutcomes = Mapping[str, tuple[CallStatus, Any]]
"""Executed calls' outcomes by tool call id: `(CallStatus.SUCCEEDED, result)` or `(CallStatus.FAILED, message)`."""


def _lease_end(seconds: float) -> dt.datetime:
    return utcnow() + dt.timedelta(seconds=seconds)


class Runs(UnderRules):
    """Writes that move a run through its statuses, and reads of runs.

    Given the store's one `PolicyEvaluation` (a pause lets the rules decide its calls first) and
    the set of tool definitions this process stored, shared with `Calls`.
    """

    @cached_property
    def _stale_leases(self) -> StaleLeaseCheck:
        """When (monotonic) a claim last looked for runs whose worker's lease expired."""
        return StaleLeaseCheck()

    async def write_run(self, write: RunWrite) -> None:
        """A worker's write to the run it holds, in one transaction: the same statements on both databases."""
        self.notifier.publish(await self.backend.write_run(self.db, write, self._stored_tool_versions))

    async def start_run(
        self,
        agent_name: str,
        prompt: str,
        *,
        actor: Actor,
        deps: Any = None,
        run_id: str | None = None,
        engine: str = "native",
    ) -> str:
        """Queue a new run; a worker (or `resume`) picks it up. Returns the run id.

        `engine`: the engine of the agent (`pydantic_ai` for a pydantic-ai agent), which rules may match on.
        """
        if not actor.can("reviewer"):
            raise Forbidden(f"{actor.id!r} ({actor.role}) may not start runs")
        run_id = run_id or uuid.uuid4().hex
        now = utcnow()
        with tracing.starting_run(agent_name, run_id) as trace_context:
            row = {
                "id": run_id,
                "agent_name": agent_name,
                "engine": engine,
                "status": RunStatus.READY,
                "prompt": prompt,
                "deps": deps,
                "started_by": actor.id,
                "trace_context": trace_context,
                "message_count": 0,
                "created_at": now,
                "updated_at": now,
            }
            started = Finish(
                run_id,
                events=[run_event(actor.id, "run.started", run_id, agent_name, {"prompt": prompt}, at=now)],
                announcements=[(READY_CHANNEL, run_id), (RUNS_CHANNEL, run_id)],
            )
            # the plain statements' path (SQLite's cursor, PostgreSQL's pipeline), not the ORM's: 8 ms -> 1 ms
            _, wake_ups = await self.backend.checked_write(self.db, [Step(_INSERT_RUN, row)], lambda _rows: started)
        self.notifier.publish(wake_ups)
        return run_id

    async def start_paused_run(self, run: PausedRun, *, actor: Actor) -> str:
        """Store `run` waiting for people, in one transaction (`paused_runs`); returns its id."""
        if not actor.can("reviewer"):
            raise Forbidden(f"{actor.id!r} ({actor.role}) may not start runs")
        outcomes = await self.policy.new_run_outcomes(
            run.agent_name, run.requests, engine=run.engine, session=run.session_id or run.run_id, requester=actor.id
        )
        run = replace(run, outcomes=outcomes)
        return await self.run_statements(lambda tx: insert_paused_run(tx, run, actor.id))

    async def claim(
        self,
        worker_id: str,
        *,
        lease_seconds: float = 60.0,
        run_id: str | None = None,
        agent_names: Sequence[str] | None = None,
        known: Mapping[str, int] | None = None,
    ) -> ClaimedRun | None:
        """Lease one ready run (or one whose worker's lease expired); None when there is none.

        A run left behind by a dead worker has calls stuck in `executing`: idempotent
        tools get to run again, the others become `outcome_unknown` for a person to settle.
        `known` says how many messages of which runs the worker already holds: the claimed
        run's history comes from there on (`ClaimedRun.history_from`), as history never changes.
        """
        ask = Claim(worker_id, lease_seconds, run_id, agent_names, known or {})
        claimed, wake_ups = await self.backend.claim(self.db, ask, self._stale_leases)
        self.notifier.publish(wake_ups)
        return claimed

    async def next_lease_end(self, agent_names: Sequence[str] | None = None) -> dt.datetime | None:
        """When the soonest lease on a run being resumed runs out; an idle worker wakes up then.

        Nothing announces a lease running out (its worker may be dead), so this is how a
        dead worker's run is taken over within a lease, not at the next poll.
        """
        query = select(func.min(RunRow.lease_expires_at)).where(RunRow.status == RunStatus.RESUMING)
        if agent_names is not None:
            query = query.where(RunRow.agent_name.in_(agent_names))
        async with self.db.read() as session:
            ends: dt.datetime | None = await session.scalar(query)
        return ends

    async def renew_lease(self, run_id: str, worker_id: str, *, lease_seconds: float = 60.0) -> None:
        """Extend this worker's lease; `LeaseLost` if it no longer holds the run."""
        lease_end = _lease_end(lease_seconds)
        await self.run_statements(lambda tx: hold_run(tx, run_id, worker_id, lease_expires_at=lease_end))

    async def mark_executing(self, run_id: str, worker_id: str, tool_call_ids: Sequence[str]) -> None:
        """Commit that these approved calls are about to run, and consume their approvals, before any runs."""
        await self.write_run(RunWrite(run_id=run_id, worker_id=worker_id, start_executing=tool_call_ids))

    async def append_step(
        self,
        run_id: str,
        worker_id: str,
        messages: Sequence[ModelMessage],
        *,
        lease_seconds: float = 60.0,
        results: CallOutcomes | None = None,
    ) -> None:
        """Append a step's messages, record the outcomes of approved calls, renew the lease.

        `results` are the outcomes the run's engine read in the step, for the calls this worker
        marked executing (`approvals.resumer.call_outcomes`); the store writes them as given and
        never reads the messages for them. A step without any costs no extra query.
        """
        await self.write_run(
            RunWrite(
                run_id=run_id,
                worker_id=worker_id,
                messages=messages,
                changes={"lease_expires_at": _lease_end(lease_seconds)},
                results=_results(results),
            )
        )

    async def pause(
        self,
        run_id: str,
        worker_id: str,
        messages: Sequence[ModelMessage],
        requests: DeferredToolRequests,
        *,
        results: CallOutcomes | None = None,
        snapshot: Snapshot | None = None,
    ) -> None:
        """The run stops for people: its last messages, its pending calls and its status, in one transaction.

        `results` are the outcomes of executed calls the messages report, as for `append_step`;
        `snapshot`, a `SNAPSHOT` engine's state to resume from, replaces the stored one.
        The standing rules decide the calls first, by the rules this process holds; the write
        checks they are still the rules in force, so a pause costs no read of them.
        """
        asked_for = [(request.tool_name, request.tool_call_id) for request in requests.approvals]
        with tracing.requesting_calls(asked_for, run_id=run_id) as traced:  # in the run's trace, as it runs
            for _ in range(5):  # the rules change rarely, and never five times while a run pauses
                rule_set = await self.policy.held_rules()
                outcomes = await self.policy.pause_outcomes(run_id, requests, rule_set)
                write = paused_write(run_id, worker_id, requests, now=utcnow(), outcomes=outcomes, traced=traced)
                write.messages = messages
                write.results = _results(results)
                write.rules_revision = rule_set.revision
                write.snapshot = snapshot
                try:
                    await self.write_run(write)
                    return
                except RulesChanged:
                    await self.policy.rules_in_force()  # read them again, and decide the calls again
        raise Conflict(f"Run {run_id!r}: the rules kept changing while it paused; it pauses at its next try")

    async def finish(
        self,
        run_id: str,
        worker_id: str,
        messages: Sequence[ModelMessage],
        *,
        output: Any = None,
        error: str | None = None,
        failed_tool_call_id: str | None = None,
        results: CallOutcomes | None = None,
        released: Collection[str] = (),
        snapshot: Snapshot | None = None,
    ) -> None:
        """The run ended: completed with `output`, or failed with `error`; a `snapshot` replaces the stored state.

        `results` are the outcomes of executed calls the messages report, as for `append_step`.
        When it failed, calls marked executing that never ran (`released`) are approved again,
        so a retry runs them; the call that failed the run ends `failed`, and any other call
        caught mid-execution `outcome_unknown`.
        """
        failed = error is not None
        await self.write_run(
            RunWrite(
                run_id=run_id,
                worker_id=worker_id,
                messages=messages,
                changes={
                    "status": RunStatus.FAILED if failed else RunStatus.COMPLETED,
                    "output": output,
                    "error": error,
                    "lease_owner": None,
                    "lease_expires_at": None,
                },
                results=_results(results),
                released=list(released),
                interrupted=Interrupted(failed_tool_call_id, error) if error is not None else None,
                snapshot=snapshot,
                events=[
                    RunEvent(
                        "run.failed" if failed else "run.completed",
                        "run",
                        run_id,
                        details={"error": error} if error is not None else {"output": output},
                    )
                ],
                announcements=[(RUNS_CHANNEL, run_id)],
            )
        )

    async def release(self, run_id: str, worker_id: str) -> None:
        """Hand a held run back (graceful shutdown before it started work)."""

        def hand_back(tx: Tx) -> None:
            run = hold_run(tx, run_id, worker_id, status=RunStatus.READY, lease_owner=None, lease_expires_at=None)
            tx.record(run_event(worker_id, "run.released", run_id, run.agent_name))
            tx.announce(READY_CHANNEL, run_id)

        await self.run_statements(hand_back)

    async def cancel_run(self, run_id: str, *, actor: Actor, reason: str | None = None) -> None:
        """An admin stops a run that has not ended, even one a worker holds right now (`run_cancel`).

        Calls that never ran are cancelled; one the run was executing becomes `outcome_unknown`
        for a person to settle. Every write its worker makes from now on is refused (`LeaseLost`).
        """
        await self.run_statements(lambda tx: run_cancel.cancel_run(tx, run_id, actor, reason))

    async def retry_run(self, run_id: str, *, actor: Actor) -> None:
        """An admin sends a failed run back to the workers; it continues from its stored history."""
        await self.run_statements(lambda tx: run_cancel.retry_run(tx, run_id, actor))

    # -- reading --------------------------------------------------------------------------------

    async def load_history(self, run_id: str) -> list[Any]:
        """A run's whole message history, in order."""
        async with self.db.read() as session:
            rows = await session.execute(
                select(STORED_TEXT, MessageRow.format_version)
                .where(MessageRow.run_id == run_id)
                .order_by(MessageRow.seq)
            )
            return load_stored_history((data, version) for data, version in rows)

    async def load_state(self, run_id: str) -> Snapshot | None:
        """A `SNAPSHOT` engine's stored run state (`RunStateRow`); None before its first pause."""
        async with self.db.read() as session:
            found = (
                await session.execute(select(RunStateRow.version, RunStateRow.data).where(RunStateRow.run_id == run_id))
            ).one_or_none()
        return None if found is None else Snapshot(version=found.version, data=found.data)

    async def get_run(self, run_id: str) -> RunRow:
        async with self.db.read() as session:
            run = await session.get(RunRow, run_id)
            if run is None:
                raise NotFound(f"No run {run_id!r}")
            return run

    async def list_runs(
        self, *, status: str | None = None, agent_name: str | None = None, after: str | None = None, limit: int = 50
    ) -> Page[RunRow]:
        """Runs, newest first."""
        limit = max(1, min(limit, MAX_PAGE))
        query = select(RunRow).order_by(RunRow.created_at.desc(), RunRow.id.desc()).limit(limit + 1)
        if status:
            query = query.where(RunRow.status == status)
        if agent_name:
            query = query.where(RunRow.agent_name == agent_name)
        if after:
            created_at, run_id = decode_cursor(after, [dt.datetime, str])
            query = query.where(tuple_(RunRow.created_at, RunRow.id) < tuple_(created_at, run_id))
        async with self.db.read() as session:
            rows = list((await session.scalars(query)).all())
        return page_of(rows, limit, lambda r: encode_cursor(r.created_at, r.id))


def _results(results: CallOutcomes | None) -> dict[str, tuple[str, Any]]:
    """What a write records of the outcomes it was given."""
    return dict[str, tuple[str, Any]](results) if results else {}
