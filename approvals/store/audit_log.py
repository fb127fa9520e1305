"""The audit log's reads: events by filter (the questions reviewers ask), the log's head, the chain verified.

`AuditLog` is the aggregate (`Store.audit`). Events are written by the operations that change
state, each in its own transaction (`Transaction.record`); the chain is `audit.py`'s.

Every filter of `AuditQuery` is one SQL condition, pages are keyset pages on the event id, so
the first page and the ten-thousandth cost the same. A search that would walk most of a large
log on PostgreSQL (a rare text, no time range) is stopped at `SEARCH_TIMEOUT_MS` with a clear
`UserError` naming how to narrow it, never a stalled page.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import ColumnElement, String, and_, cast, func, not_, or_, select
from sqlalchemy.exc import OperationalError

from ..exceptions import UserError
from ._base import StoreBase
from .audit import AuditVerification, verify_audit_chain
from .models import AuditEventRow, RunRow, ToolCallRow
from .queries import Page, decode_cursor, encode_cursor, page_of

__all__ = ("ACTOR_KINDS", "SEARCH_TIMEOUT_MS", "VERDICT_ACTIONS", "AuditLog", "AuditQuery", "SubjectFacts")

E = AuditEventRow
ActorKind = Literal["person", "service", "rule", "system"]
ACTOR_KINDS: tuple[ActorKind, ...] = ("person", "service", "rule", "system")
VERDICT_ACTIONS: dict[str, tuple[str, ...]] = {
    "approved": ("call.approved", "call.edited"),
    "edited": ("call.edited",),
    "denied": ("call.denied",),
    "answered": ("call.answered",),
    "expired": ("call.expired",),
}
"""A verdict as the actions that record it: an edit is an approval with changed arguments."""
SEARCH_TIMEOUT_MS = 5_000


@dataclass(frozen=True, kw_only=True)
class AuditQuery:
    """A question asked of the log: every given filter must hold."""

    since: dt.datetime | None = None
    until: dt.datetime | None = None
    actor: str | None = None
    """Exactly this actor id: a username, `rule:<name>`, `token:<name>`."""
    actor_kind: ActorKind | None = None
    """Who acted: a person, a service (a token), a rule, the system (or a worker)."""
    actions: tuple[str, ...] = ()
    verdict: str | None = None
    """A key of `VERDICT_ACTIONS`."""
    agent: str | None = None
    tool: str | None = None
    engine: str | None = None
    rule: str | None = None
    """Events a rule made, about a rule, or that name it (a call it routed, reminded or escalated)."""
    channel: str | None = None
    """Where a decision was made: `web`, `api`, `slack`, `email`."""
    run_id: str | None = None
    subject_type: str | None = None
    subject_id: str | None = None
    text: str | None = None
    """Text in the event's details, or in the arguments of the event's call."""

    def conditions(self) -> list[ColumnElement[bool]]:
        """The query as SQL conditions on `audit_events`."""
        found: list[ColumnElement[bool]] = []
        for column, value in (
            (E.actor, self.actor),
            (E.agent_name, self.agent),
            (E.tool_name, self.tool),
            (E.run_id, self.run_id),
            (E.subject_type, self.subject_type),
            (E.subject_id, self.subject_id),
        ):
            if value:
                found.append(column == value)
        actions = set(self.actions)
        if self.verdict:
            verdict_actions = set(VERDICT_ACTIONS[self.verdict])
            actions = actions & verdict_actions if actions else verdict_actions
            if not actions:
                actions = {"-"}  # the action and the verdict disagree: nothing matches
        if actions:
            found.append(E.action.in_(sorted(actions)) if len(actions) > 1 else E.action == next(iter(actions)))
        if self.since:
            found.append(E.at >= self.since)
        if self.until:
            found.append(E.at < self.until)
        if self.actor_kind:
            found.append(_actor_kind(self.actor_kind))
        if self.engine:
            found.append(E.run_id.in_(select(RunRow.id).where(RunRow.engine == self.engine)))
        if self.rule:
            found.append(
                or_(
                    E.actor == f"rule:{self.rule}",
                    and_(E.subject_type == "rule", E.subject_id == self.rule),
                    E.details["rule"].as_string() == self.rule,
                )
            )
        if self.channel:
            found.append(E.details["channel"].as_string() == self.channel)
        if self.text:
            pattern = "%" + self.text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            calls = select(ToolCallRow.id).where(cast(ToolCallRow.args, String).ilike(pattern, escape="\\"))
            found.append(
                or_(
                    and_(E.subject_type == "call", E.subject_id.in_(calls)),
                    cast(E.details, String).ilike(pattern, escape="\\"),
                )
            )
        return found


def _actor_kind(kind: ActorKind) -> ColumnElement[bool]:
    rule, service = E.actor.like("rule:%"), E.actor.like("token:%")
    system = or_(E.actor == "system", and_(E.actor.like("%:%:%"), not_(rule), not_(service)))
    if kind == "rule":
        return rule
    if kind == "service":
        return service
    if kind == "system":
        return system
    return not_(or_(rule, service, system))


@dataclass(frozen=True, kw_only=True)
class SubjectFacts:
    """What an event's call or run adds to its sentence: the call's arguments, the run's gate session."""

    args: dict[str, Any] | None = None
    session_id: str | None = None
    engine: str | None = None


class AuditLog(StoreBase):
    """Reading and verifying the audit log."""

    async def audit_events(
        self,
        *,
        since: dt.datetime | None = None,
        until: dt.datetime | None = None,
        actor: str | None = None,
        action: str | None = None,
        agent_name: str | None = None,
        tool_name: str | None = None,
        run_id: str | None = None,
        subject_id: str | None = None,
        query: AuditQuery | None = None,
        after: str | None = None,
        limit: int = 100,
        newest_first: bool = True,
    ) -> Page[AuditEventRow]:
        """Audit events matching every given filter (the keyword ones and `query`'s), a keyset page at a time."""
        limit = max(1, min(limit, 10_000))
        simple = AuditQuery(
            since=since,
            until=until,
            actor=actor,
            actions=(action,) if action else (),
            agent=agent_name,
            tool=tool_name,
            run_id=run_id,
            subject_id=subject_id,
        )
        order = E.id.desc() if newest_first else E.id
        statement = select(E).where(*simple.conditions(), *(query.conditions() if query else ())).order_by(order)
        if after:
            (last_id,) = decode_cursor(after, [int])
            statement = statement.where(E.id < last_id if newest_first else E.id > last_id)
        bounded = query is not None and (query.text or query.channel or query.rule or query.actor_kind)
        async with self.db.read() as session:
            if bounded:
                await self.backend.limit_statement_time(session, SEARCH_TIMEOUT_MS)
            try:
                rows = list((await session.scalars(statement.limit(limit + 1))).all())
            except OperationalError as exc:
                if not self.backend.timed_out(exc):
                    raise
                raise UserError(
                    f"This search reads too much of the log (stopped after {SEARCH_TIMEOUT_MS // 1000} s): "
                    "narrow it with a time range, a person, a tool or an action"
                ) from None
        return page_of(rows, limit, lambda r: encode_cursor(r.id))

    async def audit_event(self, event_id: int) -> AuditEventRow | None:
        """One event by its id (its place in the chain)."""
        async with self.db.read() as session:
            return await session.get(AuditEventRow, event_id)

    async def subject_facts(
        self, call_ids: Collection[str], run_ids: Collection[str]
    ) -> tuple[dict[str, SubjectFacts], dict[str, SubjectFacts]]:
        """The facts the sentences of a page of events need, in two queries: by call id, and by run id."""
        calls: dict[str, SubjectFacts] = {}
        runs: dict[str, SubjectFacts] = {}
        async with self.db.read() as session:
            if call_ids:
                found = await session.execute(
                    select(ToolCallRow.id, ToolCallRow.args, RunRow.session_id, RunRow.engine)
                    .join(RunRow, RunRow.id == ToolCallRow.run_id)
                    .where(ToolCallRow.id.in_(sorted(set(call_ids))))
                )
                for call_id, args, session_id, engine in found:
                    calls[call_id] = SubjectFacts(
                        args=args if isinstance(args, dict) else None, session_id=session_id, engine=engine
                    )
            if run_ids:
                found = await session.execute(
                    select(RunRow.id, RunRow.session_id, RunRow.engine).where(RunRow.id.in_(sorted(set(run_ids))))
                )
                for run_id, session_id, engine in found:
                    runs[run_id] = SubjectFacts(session_id=session_id, engine=engine)
        return calls, runs

    async def last_audit_event_id(self) -> int:
        """The id of the newest audit event; 0 while the log is empty."""
        async with self.db.read() as session:
            return await session.scalar(select(func.max(AuditEventRow.id))) or 0

    async def verify_audit(self) -> AuditVerification:
        """Check the audit log's hash chain end to end."""
        async with self.db.read() as session:
            return await verify_audit_chain(session)
