"""The database's half of the metrics: triggers that write a delta for every change to a reported figure.

Each figure `/metrics` reports from rows (pending calls, decisions, runs by status, ...) is a
count of the rows a condition picks, grouped by some columns. A row's *facts* are the
(metric, keys, value) it counts under; a trigger on the row's table writes `metric_deltas`
rows for the facts an INSERT adds (+1), a DELETE removes (-1) and an UPDATE changes (old -1,
new +1). The triggers run in the writing transaction, whoever writes (the ORM, the hot path's
statements, a raw UPDATE), so the rollups a scrape folds the deltas into equal the full-history
aggregates for any history. Audit events only add: resumes and hook fallbacks are counted as
they are appended, so retention deleting old events takes nothing back.

Version 1 (migration 0028). Triggers are installed by migrations: change a fact and you write
a new version and a migration that replaces the triggers and backfills again.

The two databases differ in how a trigger is written, how seconds between timestamps are
computed and how a JSON field is read; the SQL of each is made here from one list of facts,
for the migration to pick by the database it runs on (migrations, like backends, may ask).
All of it is made of this module's constants, never of input (hence the `noqa: S608`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, String, insert, text

from ..calls.actors import SYSTEM_ACTOR_ID
from .metric_rollups import BUCKETS, RESUME_ACTIONS, SETTLE_ACTIONS, Entry, merge, rollup_rows
from .models import MetricOpenResumeRow, MetricRollupRow, UTCDateTime

__all__ = ("DIALECTS", "Dialect", "backfill", "create_triggers", "drop_triggers", "install")

VERSION = 1


@dataclass(frozen=True)
class Dialect:
    """What differs between the databases in the triggers' SQL."""

    seconds: Callable[[str, str], str]
    """Seconds from the first timestamp to the second, as a float (the backends' `seconds_between`)."""
    json_text: Callable[[str, str], str]
    """A JSON column's top-level field as text."""
    no_value: str
    no_time: str
    triggers: Callable[[str, str, str, str, str], list[str]]
    """(table, facts with `{r}` for the row, columns whose update matters or "" for inserts only, version, a
    condition on NEW that an insert must meet to run the trigger at all or "") → DDL."""
    drop: Callable[[str, str], list[str]]


def _facts_of_row(facts: str, row: str) -> str:
    return facts.replace("{r}", row)


def _postgres_triggers(table: str, facts: str, columns: str, version: str, when: str) -> list[str]:
    function = f"metric_facts_{table}_v{version}"
    insert = "INSERT INTO metric_deltas (metric, key1, key2, key3, amount, value, at) SELECT metric, key1, key2, key3"
    new, old = _facts_of_row(facts, "NEW"), _facts_of_row(facts, "OLD")
    body = f"""
        IF TG_OP = 'INSERT' THEN
            {insert}, 1, value, at FROM ({new}) AS f;
        ELSIF TG_OP = 'DELETE' THEN
            {insert}, -1, value, at FROM ({old}) AS f;
        ELSE
            {insert}, -1, value, at FROM (SELECT * FROM ({old}) AS o EXCEPT SELECT * FROM ({new}) AS n) AS f;
            {insert}, 1, value, at FROM (SELECT * FROM ({new}) AS n EXCEPT SELECT * FROM ({old}) AS o) AS f;
        END IF;"""  # noqa: S608
    events = f"INSERT OR DELETE OR UPDATE OF {columns}" if columns else "INSERT"
    return [
        f"CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $$\nBEGIN{body}\n    RETURN NULL;\nEND\n$$",
        f"CREATE TRIGGER metric_facts_{table} AFTER {events} ON {table} FOR EACH ROW"
        + (f" WHEN ({when})" if when else "")
        + f" EXECUTE FUNCTION {function}()",
    ]


def _postgres_drop(table: str, version: str) -> list[str]:
    return [
        f"DROP TRIGGER IF EXISTS metric_facts_{table} ON {table}",
        f"DROP FUNCTION IF EXISTS metric_facts_{table}_v{version}()",
    ]


def _sqlite_triggers(table: str, facts: str, columns: str, version: str, when: str) -> list[str]:
    insert = "INSERT INTO metric_deltas (metric, key1, key2, key3, amount, value, at) SELECT metric, key1, key2, key3"
    new, old = _facts_of_row(facts, "NEW"), _facts_of_row(facts, "OLD")
    statements = [
        f"CREATE TRIGGER metric_facts_{table}_insert AFTER INSERT ON {table}"
        + (f" WHEN {when}" if when else "")
        + " BEGIN\n"
        f"    {insert}, 1, value, at FROM ({new});\nEND"
    ]
    if columns:
        statements += [
            f"CREATE TRIGGER metric_facts_{table}_delete AFTER DELETE ON {table} BEGIN\n"
            f"    {insert}, -1, value, at FROM ({old});\nEND",
            f"CREATE TRIGGER metric_facts_{table}_update AFTER UPDATE OF {columns} ON {table} BEGIN\n"  # noqa: S608
            f"    {insert}, -1, value, at FROM (SELECT * FROM ({old}) EXCEPT SELECT * FROM ({new}));\n"
            f"    {insert}, 1, value, at FROM (SELECT * FROM ({new}) EXCEPT SELECT * FROM ({old}));\nEND",
        ]
    return statements


def _sqlite_drop(table: str, version: str) -> list[str]:
    return [f"DROP TRIGGER IF EXISTS metric_facts_{table}_{kind}" for kind in ("insert", "delete", "update")]


DIALECTS: dict[str, Dialect] = {
    "postgresql": Dialect(
        seconds=lambda start, end: f"CAST(EXTRACT(EPOCH FROM ({end} - {start})) AS DOUBLE PRECISION)",
        json_text=lambda column, field: f"({column} ->> '{field}')",
        no_value="CAST(NULL AS DOUBLE PRECISION)",
        no_time="CAST(NULL AS TIMESTAMPTZ)",
        triggers=_postgres_triggers,
        drop=_postgres_drop,
    ),
    "sqlite": Dialect(
        seconds=lambda start, end: f"((julianday({end}) - julianday({start})) * 86400.0)",
        json_text=lambda column, field: f"json_extract({column}, '$.{field}')",
        no_value="NULL",
        no_time="NULL",
        triggers=_sqlite_triggers,
        drop=_sqlite_drop,
    ),
}
"""By SQLAlchemy's dialect name."""


@dataclass(frozen=True)
class Fact:
    """A row counts under `metric` and these keys (SQL over the row `{r}`) while `when` holds."""

    metric: str
    keys: tuple[str, str, str]
    when: str
    value: str | None = None
    at: str | None = None

    def select(self, dialect: Dialect, source: str = "") -> str:
        keys = ", ".join(f"CAST({key} AS TEXT) AS key{n}" for n, key in enumerate(self.keys, start=1))
        value = self.value or dialect.no_value
        return (
            f"SELECT CAST('{self.metric}' AS TEXT) AS metric, {keys}, {value} AS value, "
            f"{self.at or dialect.no_time} AS at{source} WHERE {self.when}"
        )


ENGINE = "(SELECT runs.engine FROM runs WHERE runs.id = {r}.run_id)"
BY_PERSON = (
    "{r}.decided_at IS NOT NULL AND {r}.decided_by IS NOT NULL AND {r}.decided_by NOT LIKE 'rule:%' "
    f"AND {{r}}.decided_by <> '{SYSTEM_ACTOR_ID}' AND {{r}}.status <> 'expired'"
)
"""A call a person settled (not a rule, not the system, not expiry): decision latency and gate waits."""


def _in(values: Iterable[str]) -> str:
    return ", ".join(f"'{value}'" for value in values)


@dataclass(frozen=True)
class TableFacts:
    table: str
    columns: str
    """The columns the facts read, whose UPDATE may change them ("" for an append-only table)."""
    facts: tuple[Fact, ...]
    only_when: str = ""
    """For an append-only table: the rows any fact can count (SQL over NEW), so the others never run the trigger;
    most audit events count for nothing, and every write appends some."""


TABLES = (
    TableFacts(
        "tool_calls",
        "status, agent_name, tool_name, decided_at, decided_by, created_at, rule_name, verdict, run_id",
        (
            Fact("pending", ("{r}.agent_name", "{r}.tool_name", "''"), "{r}.status IN ('pending', 'outcome_unknown')"),
            Fact("decided", (ENGINE, "''", "''"), BY_PERSON, value="{seconds}"),
            Fact(
                "rule",
                (ENGINE, "COALESCE({r}.rule_name, 'unknown')", "COALESCE({r}.verdict, '')"),
                "{r}.decided_by LIKE 'rule:%'",
            ),
            Fact("expired", (ENGINE, "''", "''"), "{r}.status = 'expired'"),
        ),
    ),
    TableFacts(
        "decisions",
        "actor, verdict, channel",
        (Fact("decision", ("{r}.verdict", "COALESCE({r}.channel, 'unknown')", "''"), "{r}.actor NOT LIKE 'rule:%'"),),
    ),
    TableFacts(
        "runs",
        "status, error",
        (
            Fact("run", ("{r}.status", "''", "''"), "{r}.status IS NOT NULL"),
            Fact("failure", ("COALESCE(SUBSTR({r}.error, 1, 120), '')", "''", "''"), "{r}.status = 'failed'"),
        ),
    ),
    TableFacts(
        "audit_events",
        "",
        (
            Fact(
                "fallback",
                (ENGINE, "COALESCE({fallback}, 'None')", "''"),
                f"{{r}}.action = 'call.fallback' AND {ENGINE} IS NOT NULL",
            ),
            Fact("resume", ("{r}.run_id", "{r}.action", "''"), f"{{r}}.action IN ({_in(RESUME_ACTIONS)})", at="{r}.at"),
        ),
        only_when=f"NEW.action IN ('call.fallback', {_in(RESUME_ACTIONS)})",
    ),
)


def _sql(fact: Fact, dialect: Dialect, source: str = "") -> str:
    sql = fact.select(dialect, source)
    sql = sql.replace("{seconds}", dialect.seconds("{r}.created_at", "{r}.decided_at"))
    return sql.replace("{fallback}", dialect.json_text("{r}.details", "fallback"))


def facts_sql(table: TableFacts, dialect: Dialect, source: str = "") -> str:
    """The UNION ALL of a table's facts over `{r}` (a trigger's NEW or OLD, or `source`'s rows)."""
    return " UNION ALL ".join(_sql(fact, dialect, source) for fact in table.facts)


def create_triggers(execute: Callable[[str], Any], dialect_name: str, tables: Iterable[str] | None = None) -> None:
    """Install the triggers of version 1 on the four tables (or on `tables`, after a migration rebuilt them)."""
    dialect = DIALECTS[dialect_name]
    for table in TABLES if tables is None else [t for t in TABLES if t.table in set(tables)]:
        ddl = dialect.triggers(table.table, facts_sql(table, dialect), table.columns, str(VERSION), table.only_when)
        for statement in ddl:
            execute(statement)


def drop_triggers(execute: Callable[[str], Any], dialect_name: str) -> None:
    """Remove the triggers (a downgrade, or a bulk load that backfills afterwards)."""
    dialect = DIALECTS[dialect_name]
    for table in TABLES:
        for statement in dialect.drop(table.table, str(VERSION)):
            execute(statement)


def _bucket_case(value: str) -> str:
    cells = " ".join(f"WHEN {value} <= {bound} THEN {n}" for n, bound in enumerate(BUCKETS))
    return f"CASE WHEN {value} IS NULL THEN 0 {cells} ELSE {len(BUCKETS)} END"


def backfill(connection: Connection, dialect_name: str) -> None:
    """Fill empty rollups from the rows and events already there (an upgraded database, or a bulk load).

    Each table's facts over all its rows are aggregated in SQL; resumes come from the window over
    the audit log that `/metrics` used to run at every scrape, and a run's last resume with no
    settle event yet becomes an open resume that a later settle event ends.
    """
    dialect = DIALECTS[dialect_name]
    entries: list[Entry] = []
    for table in TABLES:
        facts = tuple(fact for fact in table.facts if fact.metric != "resume")
        rows = TableFacts(table.table, table.columns, facts)
        union = facts_sql(rows, dialect, f" FROM {table.table} AS r").replace("{r}", "r")
        grouped = connection.execute(
            text(
                f"SELECT metric, key1, key2, key3, {_bucket_case('value')} AS bucket, COUNT(*), "  # noqa: S608
                f"COALESCE(SUM(value), 0.0) FROM ({union}) AS f GROUP BY metric, key1, key2, key3, bucket"
            )
        )
        entries += [Entry.of(*row) for row in grouped]
    steps = (
        "SELECT run_id, action, at, LEAD(action) OVER (PARTITION BY run_id ORDER BY id) AS next_action, "  # noqa: S608
        "LEAD(at) OVER (PARTITION BY run_id ORDER BY id) AS next_at "
        f"FROM audit_events WHERE action IN ({_in(RESUME_ACTIONS)})"
    )
    seconds = dialect.seconds("s.at", "s.next_at")
    settled = f"CASE WHEN s.next_action IN ({_in(SETTLE_ACTIONS)}) THEN {seconds} END"
    resumes = connection.execute(
        text(
            f"SELECT CASE WHEN d.seconds IS NULL THEN {len(BUCKETS)} ELSE {_bucket_case('d.seconds')} END AS bucket, "  # noqa: S608
            f"COUNT(*), COALESCE(SUM(d.seconds), 0.0) FROM (SELECT {settled} AS seconds FROM ({steps}) AS s "
            "WHERE s.action = 'run.resumed') AS d GROUP BY bucket"
        )
    )
    entries += [Entry.of("resume", "", "", "", *row) for row in resumes]
    sums = rollup_rows(merge({}, entries))
    if sums:
        connection.execute(insert(MetricRollupRow), sums)
    open_resumes = text(
        f"SELECT s.run_id, s.at FROM ({steps}) AS s WHERE s.action = 'run.resumed' AND s.next_action IS NULL"  # noqa: S608
    ).columns(run_id=String(), at=UTCDateTime())
    opened = [{"run_id": run_id, "resumed_at": at} for run_id, at in connection.execute(open_resumes)]
    if opened:
        connection.execute(insert(MetricOpenResumeRow), opened)


def install(connection: Connection, dialect_name: str) -> None:
    """Triggers, then the rollups of what is already there (migration 0028's upgrade)."""
    create_triggers(lambda statement: connection.execute(text(statement)), dialect_name)
    backfill(connection, dialect_name)
