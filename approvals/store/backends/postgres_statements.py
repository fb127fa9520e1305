"""PostgreSQL: a Core statement compiled once for psycopg, its parameters in order, prepared on the server.

What each statement costs the client counts more than anything else the hot path does.
Here a statement is compiled by SQLAlchemy once (per statement object, and the hot path
builds each once), to SQL text with PostgreSQL's own marks (`$1`) and the names in their
order; an execution then only puts its values in that order, wrapping JSON columns' values
as JSONB and statuses as their text. psycopg sends the SQL as it is (`raw_cursor`: no parse
for `%s` marks, which it caches only for queries under 4 KB) with a list of values, and prepares the
statement on the server at its first execution on a connection (`PREPARE`, then only `Bind`
and `Execute`), where its default waits for the fifth.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from typing import Any, cast

import psycopg
from psycopg.types.json import Jsonb
from sqlalchemy import JSON, bindparam
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import BindParameter, ClauseElement
from sqlalchemy.sql.expression import Executable
from sqlalchemy.sql.visitors import ExternallyTraversible, replacement_traverse

from ..models import json_text

__all__ = ("PREPARE", "Positional", "positional", "raw_cursor")

PREPARE = True
"""Every hot-path statement is prepared at its first execution on a connection: the hot path's
statements are a few dozen shapes, each run thousands of times (psycopg keeps up to 100 per connection)."""
_DIALECT = PGDialect_psycopg(paramstyle="format")  # type: ignore[no-untyped-call]  # SQLAlchemy's dialects are not annotated


@dataclass(frozen=True)
class Positional:
    """A statement as psycopg runs it: its SQL with `$1` marks, and how to put an execution's values in order."""

    sql: bytes
    named: tuple[tuple[str, Any], ...]
    """Each mark's parameter name, and the value the statement binds by itself (None for those an execution gives)."""
    json_at: tuple[int, ...]
    """The marks of JSON columns' values, sent as JSONB."""

    def args(self, values: Mapping[str, Any]) -> list[Any]:
        """The execution's values in order: JSON as JSONB, statuses as their text."""
        get = values.get
        ordered = [get(name, default) for name, default in self.named]
        for i, value in enumerate(ordered):
            if isinstance(value, StrEnum):
                ordered[i] = value.value
        for i in self.json_at:
            ordered[i] = Jsonb(ordered[i], dumps=json_text)
        return ordered


@cache
def positional(statement: Executable) -> Positional:
    """`statement` compiled for psycopg with positional marks; once per statement object.

    An `IN` of constants is rendered with a mark per item (`render_postcompile`), which needs
    every parameter to have a value: the named ones are given None here, and each execution
    supplies them.
    """

    def optional(element: Any, **_: Any) -> Any:
        if isinstance(element, BindParameter) and element.required:
            return bindparam(element.key, None, type_=element.type)
        return None

    valued = cast(ClauseElement, replacement_traverse(cast(ExternallyTraversible, statement), {}, optional))
    compiled = cast(SQLCompiler, valued.compile(dialect=_DIALECT, compile_kwargs={"render_postcompile": True}))
    names = tuple(compiled.positiontup or ())
    binds = compiled.binds
    own = compiled.construct_params(_check=False)
    return Positional(
        sql=_dollar_marks(str(compiled)).encode(),
        named=tuple((name, own.get(name)) for name in names),
        json_at=tuple(
            i for i, name in enumerate(names) if name in binds and isinstance(binds[name].type, JSON | JSONB)
        ),
    )


def _dollar_marks(sql: str) -> str:
    """`sql`'s `%s` marks as `$1`, `$2`, ... and `%%` as `%`: what psycopg makes of it before each execution.

    Each mark its own parameter, as psycopg's are (a name used twice is two parameters, each
    typed where it stands). The SQL is SQLAlchemy's, whose only `%` are these two forms.
    """
    count = 0

    def mark(found: re.Match[str]) -> str:
        nonlocal count
        if found.group() == "%%":
            return "%"
        count += 1
        return f"${count}"

    return _MARKS.sub(mark, sql)


_MARKS = re.compile(r"%%|%s")


def raw_cursor(connection: psycopg.AsyncConnection[Any]) -> psycopg.AsyncRawCursor[Any]:
    """A cursor that sends a `Positional`'s SQL as it is: its marks are PostgreSQL's own (`$1`), so psycopg
    does not parse the query for `%s` marks at each execution (it caches that only for queries under 4 KB)."""
    return psycopg.AsyncRawCursor(connection)
