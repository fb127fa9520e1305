"""What one `/metrics` scrape costs at 10 000, 100 000 and 1 000 000 runs (issue 41), and what it cost before.

Each database is built in SQL (`generate_series` on PostgreSQL, a recursive CTE on SQLite)
with the metric triggers off, then its rollups are backfilled as migration 0028 does for an
upgraded database. A realistic mix: one call a run and a second for every fourth run; people
decide most calls (a decision row each), rules some, a few expire, 3 % wait; native runs were
resumed and settled (audit events), some hooks fell back. Printed per size:

- steady: p50/p95 of `read_metrics` with nothing new to fold (the rollups and two index reads);
- after N: p50 of the first scrape after N new runs were written with the triggers on (it folds
  their deltas first);
- old: p50 of the full-history queries every scrape ran before (`read_metrics_from_history`),
  at 10 000 and 100 000 runs only (at 1 000 000 they take tens of seconds).

The machine is shared with other work, so the numbers are noisy; old and new are measured in
the same run on the same database. `python bench/bench_metrics_scrape.py [sizes...]`.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Awaitable, Callable

import anyio
from _databases import migrated_database
from sqlalchemy import Connection, create_engine, pool, text

from approvals.engines.gate import API_ENGINES, HOOK_ENGINES
from approvals.store import Database, normalize_url
from approvals.store.metric_history import read_metrics_from_history
from approvals.store.metric_schema import backfill, create_triggers, drop_triggers
from approvals.store.metrics_queries import read_metrics

SIZES = {"postgresql": (10_000, 100_000, 1_000_000), "sqlite": (10_000, 100_000)}
OLD_UP_TO = 100_000
SCRAPES = 21
OLD_SCRAPES = 3
NEW_RUNS = 1_000
GATES = (*API_ENGINES, *HOOK_ENGINES)


def _series(kind: str, first: int, last: int) -> str:
    if kind == "postgresql":
        return f"generate_series({first}, {last}) AS s(g)"
    return (
        f"(WITH RECURSIVE s(g) AS (SELECT {first} UNION ALL SELECT g + 1 FROM s WHERE g < {last}) SELECT g FROM s) AS s"
    )


def _at(kind: str, seconds: str) -> str:
    if kind == "postgresql":
        return f"(TIMESTAMPTZ '2026-01-01 00:00:00+00' + ({seconds}) * INTERVAL '1 second')"
    return f"strftime('%Y-%m-%d %H:%M:%f', '2026-01-01 00:00:00', '+' || ({seconds}) || ' seconds')"


def history_sql(kind: str, first: int, last: int) -> list[str]:
    """INSERT … SELECT statements writing runs `first`..`last` with their calls, decisions and audit events."""
    series = _series(kind, first, last)

    def at(seconds: str) -> str:
        return _at(kind, seconds)

    person = "CASE WHEN g % 2 = 0 THEN 'alice' ELSE 'bob' END"
    waiting = "g % 100 BETWEEN 94 AND 96"

    def calls(prefix: str, where: str) -> str:
        kind_of = "g % 20"
        return (
            "INSERT INTO tool_calls (id, run_id, tool_call_id, agent_name, tool_name, tool_version, args, args_digest, "
            "status, approvals_required, idempotent, verdict, decided_by, decided_at, rule_name, created_at, updated_at) "
            f"SELECT '{prefix}' || g, 'run-' || g, '{prefix}tc-' || g, "
            "CASE g % 3 WHEN 0 THEN 'shop' WHEN 1 THEN 'billing' ELSE 'support' END, "
            "CASE g % 4 WHEN 0 THEN 'refund' WHEN 1 THEN 'delete_user' WHEN 2 THEN 'send_email' ELSE 'charge' END, "
            "'v1', '{}', 'd', "
            f"CASE WHEN {waiting} THEN 'pending' WHEN {kind_of} IN (12, 13, 17) THEN 'denied' "
            f"WHEN {kind_of} = 18 THEN 'expired' ELSE 'succeeded' END, 1, FALSE, "
            f"CASE WHEN {waiting} OR {kind_of} = 18 THEN NULL WHEN {kind_of} IN (12, 13, 17) THEN 'deny' "
            "ELSE 'approve' END, "
            f"CASE WHEN {waiting} THEN NULL WHEN {kind_of} BETWEEN 14 AND 17 THEN 'rule:small' "
            f"WHEN {kind_of} = 18 THEN 'system' ELSE {person} END, "
            f"CASE WHEN {waiting} THEN NULL ELSE {at('g * 30 + (g % 7) * 97')} END, "
            f"CASE WHEN {kind_of} BETWEEN 14 AND 17 THEN 'small' END, {at('g * 30')}, {at('g * 30')} "
            f"FROM {series} WHERE {where}"
        )

    return [
        "INSERT INTO runs (id, agent_name, engine, status, error, message_count, created_at, updated_at) "
        "SELECT 'run-' || g, CASE g % 3 WHEN 0 THEN 'shop' WHEN 1 THEN 'billing' ELSE 'support' END, "
        "CASE WHEN g % 10 < 6 THEN 'native' WHEN g % 10 < 9 THEN 'gate' ELSE 'claude_code' END, "
        "CASE WHEN g % 100 < 90 THEN 'completed' WHEN g % 100 < 94 THEN 'failed' "
        "WHEN g % 100 < 97 THEN 'awaiting_approval' WHEN g % 100 < 99 THEN 'cancelled' ELSE 'running' END, "
        "CASE WHEN g % 100 BETWEEN 90 AND 93 THEN CASE WHEN g % 2 = 0 THEN 'ValueError: bad order ' || g "
        "ELSE 'httpx.ReadTimeout: slow' END END, "
        f"0, {at('g * 30')}, {at('g * 30 + 600')} FROM {series}",
        calls("call-", "1 = 1"),
        calls("call2-", "g % 4 = 0"),
        "INSERT INTO decisions (call_id, actor, verdict, args_digest, channel, created_at) "
        "SELECT id, decided_by, CASE WHEN status = 'denied' THEN 'deny' ELSE 'approve' END, 'd', "
        "CASE WHEN length(id) % 3 = 0 THEN 'web' WHEN length(id) % 3 = 1 THEN 'api' ELSE 'slack' END, decided_at "
        f"FROM tool_calls WHERE decided_by IN ('alice', 'bob') AND run_id IN (SELECT 'run-' || g FROM {series})",
        _events(kind, series, "call.requested", "call", "'call-' || g", "g * 30", "1 = 1"),
        _events(kind, series, "run.resumed", "run", "'run-' || g", "g * 30 + 700", "g % 10 < 6 AND g % 100 < 94"),
        _events(
            kind,
            series,
            "run.completed",
            "run",
            "'run-' || g",
            "g * 30 + 700.25 + g % 13 + (g % 1000) / 1000.0",
            "g % 10 < 6 AND g % 100 < 94",
        ),
        _events(kind, series, "call.fallback", "call", "'call-' || g", "g * 30 + 650", "g % 10 = 9 AND g % 50 = 9"),
    ]


def _events(kind: str, series: str, action: str, subject: str, subject_id: str, seconds: str, where: str) -> str:
    details = '\'{"fallback": "deny"}\'' if action == "call.fallback" else "NULL"
    return (
        "INSERT INTO audit_events (at, actor, action, subject_type, subject_id, run_id, agent_name, details, "
        f"prev_hash, hash) SELECT {_at(kind, seconds)}, 'system', '{action}', '{subject}', {subject_id}, "
        f"'run-' || g, 'shop', {details}, 'x', 'x' FROM {series} WHERE {where}"
    )


TOOL_DEFINITION = "INSERT INTO tool_definitions (version, name, definition, created_at) VALUES ('v1', 'refund', '{}', CURRENT_TIMESTAMP)"


def build(url: str, kind: str, runs: int) -> float:
    """Write `runs` runs with the triggers off, then backfill the rollups (migration 0028's way); seconds taken."""
    started = time.perf_counter()
    engine = create_engine(normalize_url(url, sync=True), poolclass=pool.NullPool)
    try:
        with engine.begin() as conn:
            if kind == "postgresql":
                conn.execute(text("SET LOCAL session_replication_role = replica"))  # no triggers, no FK checks
            else:
                drop_triggers(lambda sql: conn.execute(text(sql)), kind)
            conn.execute(text(TOOL_DEFINITION))
            for statement in history_sql(kind, 1, runs):
                conn.execute(text(statement))
            if kind == "sqlite":
                create_triggers(lambda sql: conn.execute(text(sql)), kind)
            backfill(conn, kind)
        _analyze(engine, kind)
    finally:
        engine.dispose()
    return time.perf_counter() - started


def _analyze(engine: object, kind: str) -> None:
    with engine.connect() as conn:  # type: ignore[attr-defined]
        if kind == "postgresql":
            conn.execution_options(isolation_level="AUTOCOMMIT").execute(text("VACUUM ANALYZE"))
        else:
            conn.execute(text("ANALYZE"))
            conn.commit()


def add_runs(url: str, kind: str, first: int, count: int) -> None:
    """`count` new runs with their calls, decisions and events, written with the triggers on (deltas to fold)."""
    engine = create_engine(normalize_url(url, sync=True), poolclass=pool.NullPool)
    try:
        with engine.begin() as conn:
            _write(conn, history_sql(kind, first, first + count - 1))
    finally:
        engine.dispose()


def _write(conn: Connection, statements: list[str]) -> None:
    for statement in statements:
        conn.execute(text(statement))


async def timed(work: Callable[[], Awaitable[object]]) -> float:
    started = time.perf_counter()
    await work()
    return (time.perf_counter() - started) * 1000


async def measure(url: str, kind: str, runs: int) -> dict[str, float]:
    db = Database(url)
    try:
        await read_metrics(db, GATES)  # warm the pool
        steady = [await timed(lambda: read_metrics(db, GATES)) for _ in range(SCRAPES)]
        after = []
        for n in range(3):
            await anyio.to_thread.run_sync(add_runs, url, kind, runs + 1 + n * NEW_RUNS, NEW_RUNS)
            after.append(await timed(lambda: read_metrics(db, GATES)))
        result = {
            "steady p50": statistics.median(steady),
            "steady p95": statistics.quantiles(steady, n=20)[-1],
            f"after {NEW_RUNS} runs": statistics.median(after),
        }
        if runs <= OLD_UP_TO:
            old = [await timed(lambda: read_metrics_from_history(db, GATES)) for _ in range(OLD_SCRAPES)]
            result["old p50"] = statistics.median(old)
            new, history = await read_metrics(db, GATES), await read_metrics_from_history(db, GATES)
            result["same figures"] = float(_same(new, history))
        return result
    finally:
        await db.dispose()


def _same(new: object, old: object) -> bool:
    """The same figures; histogram sums to a millionth (SQLite's julianday arithmetic in the old queries is not exact)."""
    import dataclasses
    import math

    a, b = dataclasses.asdict(new), dataclasses.asdict(old)  # type: ignore[call-overload]
    for key in a:
        x, y = a[key], b[key]
        if key == "oldest_pending_age":
            continue
        if isinstance(x, list):
            x, y = sorted(map(tuple, x)), sorted(map(tuple, y))
        elif isinstance(x, dict) and "total" in x:
            totals = x.pop("total"), y.pop("total")
            x["total"], y["total"] = math.isclose(*totals, rel_tol=1e-6), True
        if x != y:
            return False
    return True


WRITE_ROUNDS = 8
WRITES_PER_ROUND = 40


def write_cost(url: str, kind: str) -> tuple[float, float]:
    """p50 ms of one run's writes in one transaction (its run, calls, decisions and events, then a call
    settled) without and with the metric triggers, interleaved round by round on one database."""
    engine = create_engine(normalize_url(url, sync=True))
    times: dict[bool, list[float]] = {False: [], True: []}
    installed, n = True, 1_000_000
    try:
        with engine.begin() as conn:
            conn.execute(text(TOOL_DEFINITION))
        for round_ in range(WRITE_ROUNDS):
            for on in (True, False) if round_ % 2 else (False, True):
                if on != installed:
                    with engine.begin() as conn:
                        (create_triggers if on else drop_triggers)(lambda sql: conn.execute(text(sql)), kind)
                    installed = on
                for _ in range(WRITES_PER_ROUND):
                    n += 1
                    started = time.perf_counter()
                    with engine.begin() as conn:
                        _write(conn, history_sql(kind, n, n))
                        conn.execute(text(f"UPDATE tool_calls SET status = 'failed' WHERE id = 'call-{n}'"))
                    times[on].append((time.perf_counter() - started) * 1000)
    finally:
        engine.dispose()
    return statistics.median(times[False]), statistics.median(times[True])


def main() -> None:
    """`bench_metrics_scrape.py [sizes...]`: those sizes only; `writes`: the triggers' cost on writes only."""
    if sys.argv[1:] == ["writes"]:
        return print_write_cost()
    wanted = {int(size) for size in sys.argv[1:]}
    print("one /metrics scrape, ms (p50 unless said; 2 shared cores, noisy)")
    print(
        f"  {'database':10} {'runs':>9} {'build s':>8} {'steady p50':>11} {'steady p95':>11} "
        f"{'after ' + str(NEW_RUNS):>11} {'old p50':>9}  same figures"
    )
    for kind, sizes in SIZES.items():
        for runs in sizes:
            if wanted and runs not in wanted:
                continue
            with migrated_database(kind) as url:
                built = build(url, kind, runs)
                got = anyio.run(measure, url, kind, runs)
            old = f"{got['old p50']:9.1f}" if "old p50" in got else f"{'-':>9}"
            same = {1.0: "yes", 0.0: "NO"}.get(got.get("same figures", -1), "-")
            print(
                f"  {kind:10} {runs:>9,} {built:8.1f} {got['steady p50']:11.1f} {got['steady p95']:11.1f} "
                f"{got[f'after {NEW_RUNS} runs']:11.1f} {old}  {same}",
                flush=True,
            )
    if not wanted:
        print_write_cost()


def print_write_cost() -> None:
    print("\none run's writes in one transaction (9 statements), p50 ms, interleaved")
    for kind in SIZES:
        with migrated_database(kind) as url:
            off, on = write_cost(url, kind)
        print(f"  {kind:10} triggers off {off:6.2f}   on {on:6.2f}   ({on - off:+.2f} ms)", flush=True)


if __name__ == "__main__":
    main()
