"""The audit page's questions at millions of events on PostgreSQL: p50 and p95 of the store's query.

Target (issue 39): keyset pagination that stays fast at 10 million events. A fresh database
(migrated with the real alembic scripts) is filled with `INSERT ... SELECT generate_series`:
events spread over a year, 60 people, rules, services, the system and workers as actors, 200
tools, 20 agents, decisions with a channel. Then each question is asked the way the page asks
it (`Store.audit.audit_events(query=..., limit=50)`, the SQL, the driver and the rows):

- the first page, unfiltered; a deep keyset page (the cursor of the middle event);
- "what did alice approve last week" (person, verdict, time);
- "every call a rule allowed on tool X" (actor kind, verdict, tool);
- decisions made on Slack (a JSON field of the details);
- a text search for a rare string (bounded by the search timeout: reported, never a stall).

Hashes are filler (the chain is not what is measured here). `APPROVALS_BENCH_AUDIT_EVENTS=1000000,10000000`
picks the sizes (default 1,000,000); `APPROVALS_BENCH_PG_URL` the server.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _databases import create_pg_database, drop_pg_database

from approvals.audit.search import parse_query
from approvals.exceptions import UserError
from approvals.store import Database, Store
from approvals.store.queries import encode_cursor

REPEATS = 25
BATCH = 1_000_000

FILL = """
INSERT INTO audit_events (at, actor, action, subject_type, subject_id, run_id, agent_name, tool_name,
                          details, prev_hash, hash)
SELECT now() - interval '365 days' + (i::float / %(total)s) * interval '365 days',
       CASE WHEN i %% 10 < 5 THEN 'person-' || ((i / 7) %% 60)
            WHEN i %% 10 = 5 THEN 'rule:rule-' || (i %% 30)
            WHEN i %% 10 = 6 THEN 'token:service-' || (i %% 5)
            WHEN i %% 10 = 7 THEN 'system'
            ELSE 'host-' || (i %% 4) || ':' || (1000 + i %% 7) || ':a1b2c3' END,
       (ARRAY['call.requested','call.approved','call.denied','call.edited','call.executing',
              'call.succeeded','run.started','run.paused','call.reminded','call.answered'])[1 + (i / 10) %% 10],
       'call', md5(i::text), md5((i / 7)::text), 'agent-' || (i %% 20), 'tool-' || ((i / 100) %% 200),
       jsonb_build_object('channel', (ARRAY['web','slack','api','email'])[1 + (i / 3) %% 4],
                          'args_digest', md5(i::text), 'order', 'A-' || i),
       md5((i - 1)::text) || md5((i - 1)::text), md5(i::text) || md5(i::text)
FROM generate_series(%(start)s, %(stop)s) AS i
"""

QUESTIONS: dict[str, dict[str, str]] = {
    "first page, unfiltered": {},
    "what did person-7 approve last week": {"actor": "person-7", "verdict": "approved", "since": "7d"},
    "every call a rule allowed on tool-42": {"by": "rule", "verdict": "approved", "tool": "tool-42"},
    "approvals on Slack": {"channel": "slack", "verdict": "approved"},
    "every edit of tool-42 this month": {"verdict": "edited", "tool": "tool-42", "since": "30d"},
    "text 'A-4242' (rare)": {"text": "A-4242"},
}


def fill(url: str, total: int) -> float:
    started = time.perf_counter()
    with psycopg.connect(url.replace("postgresql+psycopg", "postgresql"), autocommit=True) as conn:
        for start in range(1, total + 1, BATCH):
            conn.execute(FILL, {"total": total, "start": start, "stop": min(total, start + BATCH - 1)})
        conn.execute("VACUUM ANALYZE audit_events")
    return time.perf_counter() - started


async def timed(ask: Callable[[], Awaitable[object]]) -> tuple[float, float, str]:
    """p50 and p95 in milliseconds (after one warm-up), or the error a reader would get."""
    try:
        await ask()
    except UserError as exc:
        return 0.0, 0.0, str(exc)
    samples = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        await ask()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples), statistics.quantiles(samples, n=20)[18], ""


async def measure(url: str, total: int) -> None:
    database = Database(url)
    store = Store(database)
    try:
        middle = encode_cursor(total // 2)
        cases: dict[str, Callable[[], Awaitable[object]]] = {
            "deep keyset page (middle of the log)": lambda: store.audit.audit_events(after=middle, limit=50),
        }
        for name, params in QUESTIONS.items():
            query = parse_query(params)
            cases[name] = lambda query=query: store.audit.audit_events(query=query, limit=50)  # type: ignore[misc]
        for name, ask in cases.items():
            p50, p95, problem = await timed(ask)
            shown = f"refused: {problem}" if problem else f"p50 {p50:8.1f} ms   p95 {p95:8.1f} ms"
            print(f"  {total:>11,} events  {name:<40} {shown}", flush=True)
    finally:
        await database.dispose()


def main() -> None:
    sizes = [int(s) for s in os.environ.get("APPROVALS_BENCH_AUDIT_EVENTS", "1000000").split(",")]
    for total in sizes:
        url = create_pg_database()
        try:
            seconds = fill(url, total)
            print(f"PostgreSQL, {total:,} audit events filled in {seconds:.0f} s", flush=True)
            anyio.run(measure, url, total)
        finally:
            drop_pg_database(url)


if __name__ == "__main__":
    main()
