"""SQLite's hot path: the prebuilt Core statements run straight on the `sqlite3` cursor.

Each statement is compiled once by SQLAlchemy's SQLite dialect (per set of inserted
columns, and per length of each `IN` list); its parameters and results go through the
same type processors SQLAlchemy would use (timestamps, JSON, statuses). What is left out
is SQLAlchemy's execution machinery, which costs several times the statement itself on a
short write. `DirectConnection` offers the few `Connection` methods the hot path's
statement functions call, so they run unchanged on either.
"""

from __future__ import annotations

import sqlite3
from collections import OrderedDict, namedtuple
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import Insert, Table
from sqlalchemy.engine import Dialect
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.dml import UpdateBase
from sqlalchemy.sql.elements import BindParameter, ClauseElement
from sqlalchemy.sql.selectable import ReturnsRows

Processor = Callable[[Any], Any] | None
_CACHE_SIZE = 500
"""Compiled statements kept: the hot path's few dozen are built once; one built per call is compiled per call."""


@dataclass(frozen=True)
class _Compiled:
    sql: str
    names: tuple[str, ...]
    """Parameter names in the order of the `?` marks."""
    literals: Mapping[str, Any]
    """Values the statement binds by itself (constants in its WHERE clause)."""
    binds: tuple[Processor, ...]
    expanding: tuple[bool, ...]
    """Which parameters are `IN` lists: compiled as a placeholder that `_sql` replaces with a mark per item."""
    row: Any
    """The named tuple a result row becomes, or None for a statement that returns nothing."""
    results: tuple[Processor, ...]
    defaults: Mapping[str, Any]
    """INSERT: the Python defaults (`ColumnDefault`) of the columns the rows leave out."""
    marks: tuple[tuple[str, Processor], ...]
    """`names` with their `binds`: what an execution walks, built once."""
    lengths: bool
    """Whether any parameter is an `IN` list."""


class DirectResult:
    """Rows of one statement, with the `Result` methods the hot path uses."""

    def __init__(self, rows: list[Any], keys: Sequence[str]) -> None:
        self._rows = rows
        self._keys = keys

    def __iter__(self) -> Iterator[Any]:
        return iter(self._rows)

    def all(self) -> list[Any]:
        return self._rows

    def one_or_none(self) -> Any:
        if len(self._rows) > 1:
            raise ValueError(f"expected at most one row, got {len(self._rows)}")
        return self._rows[0] if self._rows else None

    def scalar(self) -> Any:
        return self._rows[0][0] if self._rows else None

    def scalars(self) -> list[Any]:
        return [row[0] for row in self._rows]

    def mappings(self) -> DirectResult:
        return DirectResult([dict(zip(self._keys, row, strict=True)) for row in self._rows], self._keys)


class DirectConnection:
    """Runs Core statements on a `sqlite3` connection in a transaction someone else began and ends."""

    def __init__(self, connection: sqlite3.Connection, dialect: Dialect) -> None:
        self._connection = connection
        self.dialect = dialect

    def execute(self, statement: Any, params: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None) -> Any:
        if isinstance(params, Sequence):
            rows = list(params)
            if not rows:
                return DirectResult([], ())
            compiled = _compile(self.dialect, statement, rows[0])
            batch = [_bound(compiled, row) for row in rows]
            self._connection.executemany(_sql(compiled, batch[0][1]), [values for values, _ in batch])
            return DirectResult([], ())
        given = params or {}
        compiled = _compile(self.dialect, statement, given)
        values, lengths = _bound(compiled, given)
        cursor = self._connection.execute(_sql(compiled, lengths), values)
        if compiled.row is None:
            return DirectResult([], ())
        processors = compiled.results
        rows = [
            compiled.row._make(
                value if process is None else process(value) for process, value in zip(processors, raw, strict=True)
            )
            for raw in cursor.fetchall()
        ]
        return DirectResult(rows, compiled.row._fields)

    def scalar(self, statement: Any, params: Mapping[str, Any] | None = None) -> Any:
        return self.execute(statement, params).scalar()

    def scalars(self, statement: Any, params: Mapping[str, Any] | None = None) -> list[Any]:
        return cast(list[Any], self.execute(statement, params).scalars())


def _bound(compiled: _Compiled, given: Mapping[str, Any]) -> tuple[list[Any], tuple[int, ...]]:
    """The positional values for one execution, and the length of each `IN` list among them."""
    if compiled.defaults:  # as SQLAlchemy fills them in: fresh for every row
        fresh = {
            key: default.arg(None) if default.is_callable else default.arg for key, default in compiled.defaults.items()
        }
        given = {**given, **fresh}
    literals = compiled.literals
    if not compiled.lengths:  # no IN list: one value per mark
        return [
            (value if process is None else process(value))
            for name, process in compiled.marks
            for value in (given[name] if name in given else literals[name],)
        ], ()
    values: list[Any] = []
    lengths: list[int] = []
    for (name, process), expanding in zip(compiled.marks, compiled.expanding, strict=True):
        value = given[name] if name in given else literals[name]
        items = list(value) if expanding else [value]
        if expanding:
            lengths.append(len(items))
        values.extend(items if process is None else [process(item) for item in items])
    return values, tuple(lengths)


def _sql(compiled: _Compiled, lengths: tuple[int, ...]) -> str:
    """The statement's SQL with each `IN` list given as many marks as it has items."""
    if not lengths:
        return compiled.sql
    sql = _EXPANDED.get((compiled.sql, lengths))
    if sql is None:
        sql = compiled.sql
        names = [name for name, expanding in zip(compiled.names, compiled.expanding, strict=True) if expanding]
        for name, length in zip(names, lengths, strict=True):
            sql = sql.replace(f"__[POSTCOMPILE_{name}]", ", ".join("?" * length), 1)
        _EXPANDED[(compiled.sql, lengths)] = sql
    return sql


_EXPANDED: dict[tuple[str, tuple[int, ...]], str] = {}


_CACHE: OrderedDict[tuple[int, tuple[str, ...]], tuple[Any, _Compiled]] = OrderedDict()


def _compile(dialect: Dialect, statement: Any, given: Mapping[str, Any]) -> _Compiled:
    """`statement` compiled once (an INSERT once per set of columns `given`).

    The statement is kept with it, so its id stays its own while cached.
    """
    keys = tuple(given) if isinstance(statement, Insert) else ()
    cache_key = (id(statement), keys)
    cached = _CACHE.get(cache_key)
    if cached is not None:
        _CACHE.move_to_end(cache_key)
        return cached[1]
    defaults: dict[str, Any] = {}
    column_keys = None
    if isinstance(statement, Insert):
        table = cast(Table, statement.table)
        for column in table.columns:
            if column.key not in keys and column.default is not None:
                defaults[column.key] = column.default
        column_keys = [*keys, *defaults]
    compiled = cast(SQLCompiler, cast(ClauseElement, statement).compile(dialect=dialect, column_keys=column_keys))
    names = tuple(compiled.positiontup or ())
    binds: dict[str, BindParameter[Any]] = compiled.binds
    row: Any = None
    results: tuple[Processor, ...] = ()
    if compiled.returning or not isinstance(statement, UpdateBase):
        returned = cast(ReturnsRows, statement).exported_columns  # what it selects, or returns
        row = cast(Any, namedtuple)("Row", list(returned.keys()), rename=True)
        results = tuple(column.type.dialect_impl(dialect).result_processor(dialect, None) for column in returned)
    processors = tuple(binds[name].type.dialect_impl(dialect).bind_processor(dialect) for name in names)
    expanding = tuple(binds[name].expanding for name in names)
    result = _Compiled(
        sql=str(compiled),
        names=names,
        literals={name: bind.effective_value for name, bind in binds.items() if not bind.required},
        binds=processors,
        expanding=expanding,
        row=row,
        results=results,
        defaults=defaults,
        marks=tuple(zip(names, processors, strict=True)),
        lengths=any(expanding),
    )
    _CACHE[cache_key] = (statement, result)
    if len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return result
