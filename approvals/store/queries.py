"""Reads of calls (`CallReads`, the calls aggregate's), and the keyset pages every list of the store uses.

Lists use keyset pagination (`after` the last row's sort key), so page 1,000 costs what
page 1 costs. Cursors are opaque strings. The inbox's "for me" view (`approvable_by`) is
`approvals.calls.options` written as SQL, so the list shows the calls whose page would
offer that reviewer the Approve button.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sqlalchemy import ColumnElement, String, and_, cast, exists, false, func, or_, select, tuple_

from ..calls.actors import Actor
from ..calls.options import CallOptions, call_options, reviewer_refusal
from ..calls.states import CallStatus
from ..calls.tools import ToolDefinition
from ..exceptions import NotFound, UserError
from ._base import StoreBase
from .models import (
    STANDING,
    DecisionRow,
    RunRow,
    ToolCallRow,
    ToolDefinitionRow,
)
from .run_plan import tool_definition_from_row

T = TypeVar("T")
MAX_PAGE = 500
COUNT_CAP = 10_000
"""Counts of calls by status stop here (`count_calls_by_status`): past it a reviewer needs "more than", not a sum."""
"""The longest page a list returns."""


@dataclass(frozen=True)
class ReviewFacts:
    """What a reviewer's options on a call read besides the call itself (`approvals.calls.options`)."""

    started_by: str | None
    """Who started the call's run."""
    standing: dict[str, frozenset[str]]
    """Who holds a standing approval of the call (`DecisionRow.is_standing`), by the digest they approved."""
    engine: str | None = None
    """The engine of the call's run: whether its framework can run edited arguments."""

    def options(self, actor: Actor, call: ToolCallRow) -> CallOptions:
        """What `actor` may do with `call` by the rules of `call_options`, from the call and these facts."""
        return call_options(
            actor,
            call.status,
            started_by=self.started_by,
            requested_by=call.requested_by,
            approvals_required=call.approvals_required,
            digest=call.current_digest,
            standing=self.standing,
            approver_groups=call.approver_groups,
            engine=self.engine,
        )


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a list and the cursor for the next (None on the last page)."""

    items: list[T]
    next_cursor: str | None


def encode_cursor(*values: Any) -> str:
    raw = json.dumps([v.isoformat() if isinstance(v, dt.datetime) else v for v in values])
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


_UNSTORABLE_TEXT = re.compile("[\x00\ud800-\udfff]")
"""NUL (PostgreSQL refuses it in text) and lone surrogates (not UTF-8): never sent to the database."""


def decode_cursor(cursor: str, kinds: Sequence[type]) -> list[Any]:
    """Parse a cursor made by `encode_cursor`; a malformed one is a clear `UserError`."""
    try:
        values = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        if not isinstance(values, list) or len(values) != len(kinds):
            raise ValueError("wrong shape")
        return [_cursor_value(value, kind) for value, kind in zip(values, kinds, strict=True)]
    except (ValueError, TypeError) as exc:
        raise UserError(f"Invalid page cursor {cursor!r}") from exc


def _cursor_value(value: Any, kind: type) -> Any:
    """One cursor value, checked so that the database never sees something it would reject."""
    if kind is dt.datetime:
        parsed = dt.datetime.fromisoformat(value)
        if parsed.tzinfo is None:
            raise ValueError("naive datetime")
        return parsed
    if kind is int:
        if type(value) is not int or not 0 <= value < 2**63:
            raise ValueError("integer out of range")
        return value
    if not isinstance(value, str) or len(value) > 200 or _UNSTORABLE_TEXT.search(value):
        raise ValueError("bad string")
    return value


class CallReads(StoreBase):
    """Reads of calls: one, a run's, the inbox's pages and counts, their decisions and a reviewer's options."""

    async def get_call(self, call_id: str) -> ToolCallRow:
        async with self.db.read() as session:
            call = await session.get(ToolCallRow, call_id)
            if call is None:
                raise NotFound(f"No call {call_id!r}")
            return call

    async def run_calls(self, run_id: str) -> list[ToolCallRow]:
        """Every approval-gated call of a run, oldest first."""
        async with self.db.read() as session:
            rows = await session.scalars(
                select(ToolCallRow).where(ToolCallRow.run_id == run_id).order_by(ToolCallRow.created_at, ToolCallRow.id)
            )
            return list(rows.all())

    async def calls_by_tool_call_id(self, run_id: str, tool_call_ids: Sequence[str]) -> dict[str, ToolCallRow]:
        async with self.db.read() as session:
            rows = await session.scalars(
                select(ToolCallRow).where(ToolCallRow.run_id == run_id, ToolCallRow.tool_call_id.in_(tool_call_ids))
            )
            return {row.tool_call_id: row for row in rows}

    async def decisions_for(self, call_id: str) -> list[DecisionRow]:
        async with self.db.read() as session:
            rows = await session.scalars(
                select(DecisionRow).where(DecisionRow.call_id == call_id).order_by(DecisionRow.id)
            )
            return list(rows.all())

    async def decisions_for_run(self, run_id: str) -> list[DecisionRow]:
        """Every reviewer verdict on the calls of one run, oldest first (one query for a run's timeline)."""
        async with self.db.read() as session:
            rows = await session.scalars(
                select(DecisionRow)
                .join(ToolCallRow, ToolCallRow.id == DecisionRow.call_id)
                .where(ToolCallRow.run_id == run_id)
                .order_by(DecisionRow.id)
            )
            return list(rows.all())

    async def review_facts(self, call_ids: Sequence[str]) -> dict[str, ReviewFacts]:
        """For each call: who started its run and who approved which arguments, in one query (a page's calls)."""
        if not call_ids:
            return {}
        query = (
            select(ToolCallRow.id, RunRow.started_by, RunRow.engine, DecisionRow.actor, DecisionRow.args_digest)
            .join(RunRow, RunRow.id == ToolCallRow.run_id)
            .outerjoin(DecisionRow, and_(DecisionRow.call_id == ToolCallRow.id, STANDING))
            .where(ToolCallRow.id.in_(call_ids))
        )
        started_by: dict[str, tuple[str | None, str]] = {}
        standing: dict[str, dict[str, set[str]]] = {}
        async with self.db.read() as session:
            for call_id, starter, engine, approver, approved in await session.execute(query):
                started_by[call_id] = starter, engine
                by_digest = standing.setdefault(call_id, {})
                if approver is not None:
                    by_digest.setdefault(approved, set()).add(approver)
        return {
            call_id: ReviewFacts(starter, {d: frozenset(who) for d, who in standing[call_id].items()}, engine)
            for call_id, (starter, engine) in started_by.items()
        }

    async def tool_definition(self, version: str) -> ToolDefinition:
        async with self.db.read() as session:
            row = await session.get(ToolDefinitionRow, version)
            if row is None:
                raise NotFound(f"No tool definition {version!r}")
            return tool_definition_from_row(row.definition)

    async def list_calls(
        self,
        *,
        status: str | None = "pending",
        agent_name: str | None = None,
        tool_name: str | None = None,
        search: str | None = None,
        approvable_by: Actor | None = None,
        after: str | None = None,
        limit: int = 50,
    ) -> Page[ToolCallRow]:
        """The inbox: calls oldest first, filtered, one keyset page at a time.

        `approvable_by`: only the calls that actor may approve now (the "for me" view).
        """
        limit = max(1, min(limit, MAX_PAGE))
        query = select(ToolCallRow).order_by(ToolCallRow.created_at, ToolCallRow.id).limit(limit + 1)
        if status:
            query = query.where(ToolCallRow.status == status)
        if agent_name:
            query = query.where(ToolCallRow.agent_name == agent_name)
        if tool_name:
            query = query.where(ToolCallRow.tool_name == tool_name)
        if search:
            pattern = "%" + search.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            query = query.where(cast(ToolCallRow.args, String).ilike(pattern, escape="\\"))
        if approvable_by is not None:
            query = query.where(self._approvable_by(approvable_by))
        if after:
            created_at, call_id = decode_cursor(after, [dt.datetime, str])
            query = query.where(tuple_(ToolCallRow.created_at, ToolCallRow.id) > tuple_(created_at, call_id))
        async with self.db.read() as session:
            rows = list((await session.scalars(query)).all())
        return page_of(rows, limit, lambda r: encode_cursor(r.created_at, r.id))

    async def count_calls_by_status(
        self,
        *,
        agent_name: str | None = None,
        tool_name: str | None = None,
        approvable_by: Actor | None = None,
        cap: int = COUNT_CAP,
    ) -> dict[str, int]:
        """How many calls have each status (statuses with none left out), counted up to `cap`: a status with
        more says `cap + 1`. Each status is counted by an index range that stops there, so a million pending
        calls cost what ten thousand do, where a full count would read them all at every inbox refresh."""
        conditions: list[ColumnElement[bool]] = []
        if agent_name:
            conditions.append(ToolCallRow.agent_name == agent_name)
        if tool_name:
            conditions.append(ToolCallRow.tool_name == tool_name)
        if approvable_by is not None:
            conditions.append(self._approvable_by(approvable_by))

        def counted(status: CallStatus) -> Any:
            some = select(ToolCallRow.id).where(ToolCallRow.status == status, *conditions).limit(cap + 1)
            return select(func.count()).select_from(some.subquery()).scalar_subquery()

        statuses = list(CallStatus)
        async with self.db.read() as session:
            row = (await session.execute(select(*(counted(status) for status in statuses)))).one()
        return {status.value: int(count) for status, count in zip(statuses, row, strict=True) if count}

    def _approvable_by(self, actor: Actor) -> ColumnElement[bool]:
        """The calls `actor` may approve now, by the rules of `call_options`, as one condition.

        Open; not asked for by the actor, nor of a run they started; routed to no group or to one of theirs; not
        already approved by them with its current arguments (a quorum takes different people).
        """
        if reviewer_refusal(actor, approving=True) is not None:
            return false()
        own_run = exists().where(RunRow.id == ToolCallRow.run_id, RunRow.started_by == actor.id)
        approved = exists().where(
            DecisionRow.call_id == ToolCallRow.id,
            DecisionRow.actor == actor.id,
            DecisionRow.args_digest == ToolCallRow.current_digest,
            STANDING,
        )
        own_call = ToolCallRow.requested_by == actor.id
        return and_(
            ToolCallRow.is_open,
            or_(ToolCallRow.requested_by.is_(None), ~own_call),
            ~own_run,
            ~approved,
            self._routed_to(actor.groups),
        )

    def _routed_to(self, groups: Collection[str]) -> ColumnElement[bool]:
        """Calls routed to no group (SQL NULL, JSON null or []) or to one of `groups`.

        `approver_groups` is JSON on SQLite (read with `json_each`) and JSONB on PostgreSQL (`?|`).
        """
        return self.backend.routed_to(ToolCallRow.approver_groups, groups)


def page_of(rows: list[T], limit: int, cursor_of: Any) -> Page[T]:
    if len(rows) > limit:
        return Page(items=rows[:limit], next_cursor=cursor_of(rows[limit - 1]))
    return Page(items=rows, next_cursor=None)
