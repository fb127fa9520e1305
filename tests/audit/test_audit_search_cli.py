"""`approvals audit search` on SQLite and PostgreSQL: the same questions as the page, in a terminal or as JSON Lines."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
from typer.testing import CliRunner

from approvals.cli import app
from approvals.store import Database, Store

from ..store import conftest as store_fixtures
from .sentences_scenario import a_day

db_url, postgres_url, sqlite_template = (
    store_fixtures.db_url,
    store_fixtures.postgres_url,
    store_fixtures.sqlite_template,
)
runner = CliRunner()


def a_day_in(url: str, log: Path) -> None:
    async def fill() -> None:
        database = Database(url)
        try:
            await a_day(Store(database), log)
        finally:
            await database.dispose()

    anyio.run(fill)


def search(url: str, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["audit", "search", *args, "--database-url", url])
    return result.exit_code, result.stdout, result.stderr


def test_a_question_in_the_terminal_and_as_json_lines(db_url: str, tmp_path: Path) -> None:
    a_day_in(db_url, tmp_path / "log")
    code, out, _ = search(db_url, "--actor", "alice", "--verdict", "approved", "--since", "7d")
    assert code == 0, out
    (line,) = out.splitlines()
    assert line.endswith("alice approved ship (order A-1005) via the API")
    code, out, _ = search(db_url, "--verdict", "edited", "--format", "jsonl")
    (event,) = [json.loads(line) for line in out.splitlines()]
    assert event["actor"] == "bob" and event["summary"].startswith("bob edited send_email: subject 'Refund'")
    code, out, _ = search(db_url, "--by", "rule", "--tool", "refund", "--verdict", "approved", "--text", "A-1001")
    assert code == 0 and "rule small-refunds v1 allowed refund" in out


def test_pages_in_the_terminal_follow_the_cursor(db_url: str, tmp_path: Path) -> None:
    a_day_in(db_url, tmp_path / "log")
    code, first, more = search(db_url, "--by", "person", "--limit", "3")
    assert code == 0 and len(first.splitlines()) == 3 and more.startswith("more: --after ")
    code, second, _ = search(db_url, "--by", "person", "--limit", "3", "--after", more.split()[-1])
    assert code == 0 and int(second.split()[0]) < int(first.splitlines()[-1].split()[0])


def test_bad_input_is_a_clear_error(db_url: str) -> None:
    for args, problem in (
        (("--verdict", "maybe"), "verdict must be one of"),
        (("--since", "yesterday"), "since must be a date and time"),
        (("--format", "xml"), "--format must be table or jsonl"),
        (("--after", "garbage"), "Invalid page cursor"),
    ):
        code, _, err = search(db_url, *args)
        assert code == 1 and problem in err, (args, err)


def test_the_export_carries_each_events_sentence(db_url: str, tmp_path: Path) -> None:
    a_day_in(db_url, tmp_path / "log")
    exported = tmp_path / "audit.jsonl"
    result = runner.invoke(app, ["audit", "export", "--output", str(exported), "--database-url", db_url])
    assert result.exit_code == 0, result.output
    events = [json.loads(line) for line in exported.read_text().splitlines()]
    edit = next(e for e in events if e["action"] == "call.edited")
    assert edit["summary"].startswith("bob edited send_email: subject 'Refund' → 'Refund for A-1002'")
    assert all(e["summary"] for e in events)
