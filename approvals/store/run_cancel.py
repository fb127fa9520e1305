"""Cancelling a run, the one copy: an admin's cancel, and a deleted conversation's waiting run.

Calls that never ran are cancelled. A call the run was executing becomes `outcome_unknown`
(its tool may have run) for a person to settle, and one already waiting for that stays so.
The run's lease ends with it, so every later write of its worker is refused (`LeaseLost`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection
from functools import cache

from sqlalchemy import Update, bindparam, select, update

from ..calls.actors import Actor
from ..calls.options import RunRefusal, admin_refusal, run_options
from ..calls.states import FINAL_RUN_STATUSES, NOT_RUN_CALL_STATUSES, CallStatus, RunStatus
from ..exceptions import Conflict, Forbidden, NotFound
from .audit import run_event
from .models import RunRow, ToolCallRow
from .run_plan import utcnow
from .run_sql import Tx
from .wakeups import PENDING_CHANNEL, READY_CHANNEL, RUNS_CHANNEL

__all__ = ("cancel_in", "cancel_run", "retry_run")

INTERRUPTED = "the run was cancelled while the call ran; it may or may not have happened"

LOCK_RUN = select(RunRow.status, RunRow.agent_name).where(RunRow.id == bindparam("run_id")).with_for_update()
CANCEL_CALLS = (
    update(ToolCallRow)
    .where(ToolCallRow.run_id == bindparam("in_run"), ToolCallRow.status.in_(NOT_RUN_CALL_STATUSES))
    .values(status=CallStatus.CANCELLED, updated_at=bindparam("now"))
)
INTERRUPT_CALLS = (
    update(ToolCallRow)
    .where(ToolCallRow.run_id == bindparam("in_run"), ToolCallRow.status == CallStatus.EXECUTING)
    .values(status=CallStatus.OUTCOME_UNKNOWN, updated_at=bindparam("now"))
    .returning(ToolCallRow.id, ToolCallRow.tool_name)
)
_NOT_ENDED = tuple(status for status in RunStatus if status not in FINAL_RUN_STATUSES)


@cache
def _cancel_run_statement(statuses: tuple[RunStatus, ...]) -> Update:
    """Cancel the run if its status is one of `statuses` (built once per set)."""
    return (
        update(RunRow)
        .where(RunRow.id == bindparam("run_id"), RunRow.status.in_(statuses))
        .values(
            status=RunStatus.CANCELLED,
            error=bindparam("reason"),
            lease_owner=None,
            lease_expires_at=None,
            updated_at=bindparam("now"),
        )
        .returning(RunRow.id)
    )


def cancel_in(
    tx: Tx,
    run_id: str,
    agent_name: str,
    actor_id: str,
    reason: str | None,
    *,
    now: dt.datetime,
    only_if: Collection[RunStatus] = _NOT_ENDED,
) -> bool:
    """Cancel the run in this transaction if its status is one of `only_if`, audited and announced; whether it was."""
    params = {"run_id": run_id, "reason": reason, "now": now}
    if tx.session.execute(_cancel_run_statement(tuple(only_if)), params).one_or_none() is None:
        return False
    in_run = {"in_run": run_id, "now": now}  # `run_id` names a column of the calls' table
    tx.session.execute(CANCEL_CALLS, in_run)
    interrupted = tx.session.execute(INTERRUPT_CALLS, in_run).all()
    tx.record(run_event(actor_id, "run.cancelled", run_id, agent_name, {"reason": reason}, at=now))
    for call_id, tool_name in sorted(interrupted):
        tx.audit(
            actor_id,
            "call.outcome_unknown",
            "call",
            call_id,
            run_id=run_id,
            agent_name=agent_name,
            tool_name=tool_name,
            details={"reason": INTERRUPTED},
            at=now,
        )
    tx.announce(PENDING_CHANNEL, run_id)
    tx.announce(RUNS_CHANNEL, run_id)
    return True


def _locked_run(tx: Tx, run_id: str) -> tuple[RunStatus, str]:
    found = tx.session.execute(LOCK_RUN, {"run_id": run_id}).one_or_none()
    if found is None:
        raise NotFound(f"No run {run_id!r}")
    return RunStatus(found.status), found.agent_name


def _check_role(actor: Actor, doing: str) -> None:
    """Before the run is read: who may not manage runs learns nothing of which exist."""
    if admin_refusal(actor) is not None:
        raise Forbidden(f"{actor.id!r} ({actor.role}) may not {doing} runs")


def cancel_run(tx: Tx, run_id: str, actor: Actor, reason: str | None) -> None:
    """An admin stops a run that has not ended (`run_options`), even one a worker holds right now."""
    _check_role(actor, "cancel")
    status, agent_name = _locked_run(tx, run_id)
    if run_options(status, actor).cancel_refusal is RunRefusal.ENDED:
        raise Conflict(f"Run {run_id!r} already ended ({status})", status=status)
    cancel_in(tx, run_id, agent_name, actor.id, reason, now=utcnow())


def retry_run(tx: Tx, run_id: str, actor: Actor) -> None:
    """An admin sends a failed run back to the workers; it continues from its stored history."""
    _check_role(actor, "retry")
    status, agent_name = _locked_run(tx, run_id)
    if run_options(status, actor).retry_refusal is not None:
        raise Conflict(f"Run {run_id!r} is {status}; only failed runs can be retried", status=status)
    now = utcnow()
    tx.session.execute(
        update(RunRow).where(RunRow.id == run_id).values(status=RunStatus.READY, error=None, updated_at=now)
    )
    tx.record(run_event(actor.id, "run.retried", run_id, agent_name, at=now))
    tx.announce(READY_CHANNEL, run_id)
