"""The statements of a decision, built once from the tables: both databases run these same expressions.

SQLite runs them through SQLAlchemy. PostgreSQL sends them compiled for psycopg
(`backends.postgres_statements`) in a pipeline, two round trips a decision
(`backends.postgres_decisions`); there a plan's writes are one statement (`plan_write`):
each write of `plan_statements` a CTE of the statement that appends the audit events and
sends the wake-ups (which SQLAlchemy's transaction makes on SQLite), as every statement
costs psycopg a send and a result to process.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from functools import cache
from typing import Any, cast

from sqlalchemy import Connection, Table, bindparam, func, insert, select, update
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import aliased
from sqlalchemy.orm.instrumentation import manager_of_class
from sqlalchemy.sql.elements import BindParameter
from sqlalchemy.sql.expression import Executable
from sqlalchemy.sql.selectable import HasCTE
from sqlalchemy.sql.visitors import ExternallyTraversible, replacement_traverse

from ..calls.actors import Actor
from ..calls.states import CallStatus, RunStatus
from ..calls.verdicts import Verdict
from ..exceptions import NotFound
from .audit import server_event
from .backend import Transaction
from .decision_rules import CallFacts, DecisionPlan, plan_decision
from .hot_path_sql import function_name
from .models import STANDING, DecisionRow, RunRow, ToolCallRow, UTCDateTime

CALLS = cast(Table, ToolCallRow.__table__)
RUNS = cast(Table, RunRow.__table__)
DECISIONS = cast(Table, DecisionRow.__table__)
_OTHER = aliased(ToolCallRow, name="other_call")


def _param(name: str, type_: Any = None) -> Any:
    """A named parameter every execution supplies (no value here, so it compiles without one)."""
    return bindparam(name, None, type_=type_)


LOCK_RUN = (
    select(RunRow.started_by, RunRow.status, RunRow.engine, RunRow.trace_context)
    .where(RunRow.id == select(CALLS.c.run_id).where(CALLS.c.id == _param("call_id")).scalar_subquery())
    .with_for_update()
)
"""The call's run, locked first: every writer of a run's calls holds its run, so they take turns.

Its trace context comes along for the decision's span (`tracing.deciding`): a column of a row
read anyway, where a read of its own cost a decision on SQLite half again its time."""
LOCK_CALL = (
    select(
        CALLS,
        select(_OTHER.id)
        .where(_OTHER.run_id == CALLS.c.run_id, _OTHER.id != CALLS.c.id, _OTHER.is_open)
        .exists()
        .label("others_open"),
    )
    .where(CALLS.c.id == _param("call_id"))
    .with_for_update(of=CALLS)
)
"""The call, locked, and whether another call of its run waits for a person."""
LOCK_CALL_COLUMNS = tuple(LOCK_CALL.selected_columns.keys())
"""The names of `LOCK_CALL`'s columns, in order: psycopg would build 24 `Column` objects a decision to say them."""
STANDING_APPROVERS = select(DecisionRow.actor, DecisionRow.args_digest).where(
    DecisionRow.call_id == _param("call_id"), STANDING
)
RUN_MOVES_ON = (
    update(RUNS)
    .where(RUNS.c.id == _param("run_id"), RUNS.c.status == RunStatus.AWAITING_APPROVAL)
    .values(status=_param("next_status"), updated_at=_param("now", UTCDateTime))
)
"""A run waiting for people whose calls are all decided takes its next status (`status_once_decided`)."""


@cache
def insert_decision(columns: tuple[str, ...]) -> Executable:
    return insert(DECISIONS).values({column: _param(column) for column in columns})


@cache
def update_call(columns: tuple[str, ...]) -> Executable:
    return update(CALLS).where(CALLS.c.id == _param("target_id")).values({c: _param(c) for c in columns})


@cache
def audit_and_wake(events: int, wake_ups: int) -> Executable:
    """PostgreSQL: append `events` to the audit chain in the server (hot path SQL) and send the wake-ups."""
    head: Any = getattr(func, function_name("audit_head"))()
    for i in range(events):
        head = getattr(func, function_name("audit_append"))(
            head,
            _param(f"e{i}_at", UTCDateTime),
            _param(f"e{i}_at_text"),
            _param(f"e{i}_actor"),
            _param(f"e{i}_run_id"),
            _param(f"e{i}_agent_name"),
            _param(f"e{i}_event", JSONB),
        )
    notify = [func.pg_notify(_param(f"w{i}_channel"), _param(f"w{i}_payload")) for i in range(wake_ups)]
    return select(head, *notify)


def prefixed(statement: Executable, prefix: str) -> Executable:
    """`statement` with each named parameter renamed `prefix + name`, so statements can share one without a clash."""

    def rename(element: Any, **_: Any) -> Any:
        if isinstance(element, BindParameter) and not element.unique:
            return bindparam(prefix + element.key, element.value, type_=element.type)
        return None

    return cast(Executable, replacement_traverse(cast(ExternallyTraversible, statement), {}, rename))


@cache
def with_writes(audit: Executable, writes: tuple[Executable, ...]) -> Executable:
    """PostgreSQL: `audit` (an `audit_and_wake`) with `writes` as its CTEs, their parameters prefixed `s{i}_`.

    Every row the writes touch is locked already (the decision's first round trip), so the
    order in which the server runs them changes nothing.
    """
    ctes = [cast(HasCTE, prefixed(write, f"s{i}_")).cte(f"write_{i}") for i, write in enumerate(writes)]
    return cast(Executable, cast(HasCTE, audit).add_cte(*ctes))


def call_facts(run: Mapping[Any, Any], call: Mapping[Any, Any], standing: Iterable[tuple[str, str]]) -> CallFacts:
    """`CallFacts` from the rows `LOCK_RUN`, `LOCK_CALL` and `STANDING_APPROVERS` read."""
    fields = dict(call)
    others_open = bool(fields.pop("others_open"))
    fields["status"] = CallStatus(fields["status"])
    approvers: dict[str, set[str]] = {}
    for actor, approved in standing:
        approvers.setdefault(approved, set()).add(actor)
    return CallFacts(
        call=loaded_call(fields),
        started_by=run["started_by"],
        run_status=RunStatus(run["status"]),
        run_engine=run["engine"],
        run_trace_context=run["trace_context"],
        others_open=others_open,
        standing={approved: frozenset(actors) for approved, actors in approvers.items()},
    )


_CALLS_MANAGER = manager_of_class(ToolCallRow)


def loaded_call(fields: dict[str, Any]) -> ToolCallRow:
    """A `ToolCallRow` of `fields` (all its columns), filled as SQLAlchemy fills a row it loads, not by 24 sets.

    Through the constructor each column is an instrumented attribute set, 44 µs a call
    against 2 µs; the object is the same (transient, attributes read and set as usual).
    """
    call = _CALLS_MANAGER.new_instance()
    call.__dict__.update(fields)
    return call


def plan_statements(call: ToolCallRow, plan: DecisionPlan) -> list[tuple[Executable, dict[str, Any]]]:
    """The writes of a plan, with their parameters: the same on both databases (the audit chain apart)."""
    writes: list[tuple[Executable, dict[str, Any]]] = [
        (insert_decision(tuple(plan.decision)), plan.decision),
        (update_call(tuple(plan.call_changes)), {**plan.call_changes, "target_id": call.id}),
    ]
    if plan.run_next is not None:
        moved = {"run_id": call.run_id, "next_status": plan.run_next, "now": plan.decision["created_at"]}
        writes.append((RUN_MOVES_ON, moved))
    return writes


def plan_write(call: ToolCallRow, plan: DecisionPlan) -> tuple[Executable, dict[str, Any]]:
    """PostgreSQL: the plan's writes, audit appends and wake-ups as one statement, with its parameters."""
    writes = plan_statements(call, plan)
    audit, params = audit_and_wake_params(plan)
    for i, (_, write_params) in enumerate(writes):
        params |= {f"s{i}_{name}": value for name, value in write_params.items()}
    return with_writes(audit, tuple(write for write, _ in writes)), params


def audit_and_wake_params(plan: DecisionPlan) -> tuple[Executable, dict[str, Any]]:
    """PostgreSQL: the statement that appends the plan's events in the server and sends its wake-ups."""
    wake_ups = list(dict.fromkeys(plan.announcements))
    params: dict[str, Any] = {}
    for i, event in enumerate(plan.events):
        at, at_text, actor, run_id, agent_name, document = server_event(event)
        params |= {
            f"e{i}_at": at,
            f"e{i}_at_text": at_text,
            f"e{i}_actor": actor,
            f"e{i}_run_id": run_id,
            f"e{i}_agent_name": agent_name,
            f"e{i}_event": document,
        }
    for i, (channel, payload) in enumerate(wake_ups):
        params |= {f"w{i}_channel": channel, f"w{i}_payload": payload}
    return audit_and_wake(len(plan.events), len(wake_ups)), params


def decide_statements(
    tx: Transaction[Connection], call_id: str, verdict: Verdict, actor: Actor, now: dt.datetime
) -> tuple[CallFacts, DecisionPlan]:
    """A decision through SQLAlchemy: lock the run, then the call, plan by the rules, write the plan.

    SQLite's way (`SQLiteBackend.decide`); PostgreSQL sends the same statements in a pipeline.
    """
    run = tx.session.execute(LOCK_RUN, {"call_id": call_id}).mappings().one_or_none()
    call = tx.session.execute(LOCK_CALL, {"call_id": call_id}).mappings().one_or_none()
    if run is None or call is None:
        raise NotFound(f"No call {call_id!r}")
    standing = [(r[0], r[1]) for r in tx.session.execute(STANDING_APPROVERS, {"call_id": call_id})]
    facts = call_facts(run, call, standing)
    plan = plan_decision(facts, verdict, actor, now)
    for statement, params in plan_statements(facts.call, plan):
        tx.session.execute(statement, params)
    tx.events.extend(plan.events)  # chained by the transaction, as every SQLite write's
    tx.announcements.extend(plan.announcements)
    return facts, plan
