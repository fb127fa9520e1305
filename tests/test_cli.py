"""The `approvals` command, run in-process against real SQLite files: clear output and clear errors."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from approvals.cli import app, with_store
from approvals.store.migrate import head_revision

from .databases import DATABASES

runner = CliRunner()


@pytest.fixture
def db(tmp_path: Path) -> str:
    """A migrated SQLite file of the test's own: a copy of the process's template (tests/databases.py), not
    a migration per test (~0.5 s); test_cli.py's test_db_upgrade_and_current runs `approvals db upgrade`."""
    return DATABASES.fresh("sqlite", tmp_path)[0]


def run(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


def test_db_upgrade_and_current(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'cli.db'}"
    code, out = run("db", "upgrade", "--database-url", db)
    assert code == 0, out
    code, out = run("db", "current", "--database-url", db)
    assert code == 0
    head = head_revision()
    assert out.startswith(f"current: {head}  latest: {head}")


def test_users_and_tokens(db: str) -> None:
    code, out = run("users", "add", "carol", "--role", "admin", "--database-url", db)
    assert code == 0
    assert out.startswith("added carol (admin); password: ")
    code, out = run("users", "add", "carol", "--database-url", db)
    assert code == 1
    assert "already exists" in out
    code, out = run("users", "disable", "carol", "--database-url", db)
    assert code == 0
    code, out = run("users", "list", "--database-url", db)
    assert "carol" in out and "disabled" in out
    code, token = run("tokens", "create", "ci", "--role", "reviewer", "--database-url", db)
    assert code == 0
    assert token.strip().startswith("apv_")
    code, out = run("tokens", "list", "--database-url", db)
    assert "ci" in out and "active" in out and token.strip() not in out  # the value is never shown again
    code, out = run("tokens", "revoke", "1", "--database-url", db)
    assert code == 0
    code, out = run("tokens", "revoke", "1", "--database-url", db)
    assert code == 1
    assert "No active token 1" in out


@pytest.mark.parametrize("command", [["password", "carol", "--password", "new-password-1"], ["disable", "carol"]])
def test_cli_user_changes_end_the_users_web_sessions(db: str, command: list[str]) -> None:
    assert run("users", "add", "carol", "--password", "carol-pw-1234", "--database-url", db)[0] == 0
    session_id = with_store(db, lambda store: store.people.open_session("carol", max_age=3600))
    assert with_store(db, lambda store: store.people.session_user(session_id)) is not None
    code, out = run("users", *command, "--database-url", db)
    assert code == 0, out
    assert with_store(db, lambda store: store.people.session_user(session_id)) is None


def test_demo_seeds_pending_calls_and_audit_verifies(db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("APPROVALS_ADMIN_PASSWORD", "demo-password-1")
    code, out = run("demo", "--runs", "3", "--database-url", db)
    assert code == 0, out
    assert "Created users admin (admin), alice and bob" in out
    assert "demo-password-1" not in out  # a password taken from the environment is not echoed
    code, out = run("audit", "verify", "--database-url", db)
    assert code == 0
    assert out.startswith("audit log intact: ")


def test_runs_start_takes_a_run_to_its_first_pause(db: str) -> None:
    code, out = run("runs", "start", "shop-assistant", "Customer 42 asked us to delete their account.", "--demo",
                    "--database-url", db)  # fmt: skip
    assert code == 0, out
    assert out.strip().endswith(": awaiting_approval")


def test_clear_errors(db: str, tmp_path: Path) -> None:
    code, out = run("db", "current", "--database-url", "mysql://x@localhost/db")
    assert code == 1
    assert "Unsupported database 'mysql'" in out
    code, out = run("db", "upgrade", "--database-url", "postgresql://nobody@127.0.0.1:1/none")
    assert code == 1
    assert out.startswith("error: cannot migrate the database: ")
    code, out = run("worker", "--agent", "no_such_module:agent", "--database-url", db)
    assert code == 1
    assert "Cannot import 'no_such_module'" in out
    code, out = run("runs", "start", "shop-assistant", "hi", "--demo", "--deps", "{not json", "--database-url", db)
    assert code == 1
    assert "--deps is not valid JSON" in out
    code, out = run("runs", "start", "nobody", "hi", "--database-url", db)
    assert code == 1
    assert "No agent named 'nobody'" in out


def test_serve_refuses_a_port_in_use(db: str) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code, out = run("serve", "--port", str(port), "--database-url", db)
    assert code == 1
    assert f"cannot listen on 127.0.0.1:{port}" in out


def test_settings_from_a_config_file(tmp_path: Path, db: str) -> None:
    config = tmp_path / "approvals.env"
    config.write_text(f"APPROVALS_DATABASE_URL={db}\n")
    code, out = run("db", "current", "--config", str(config))
    assert code == 0
    assert out.startswith(f"current: {head_revision()}")


def test_worker_refuses_a_concurrency_below_one(db: str) -> None:
    code, out = run("worker", "--demo", "--concurrency", "0", "--database-url", db)
    assert code == 2
    assert "Invalid value for '--concurrency'" in out


def test_worker_stops_cleanly_on_sigterm(db: str) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    with subprocess.Popen(
        [sys.executable, "-m", "approvals.cli", "worker", "--demo", "--concurrency", "2", "--database-url", db],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    ) as worker:
        assert worker.stdout is not None
        first_line = worker.stdout.readline()
        assert "up to 2 runs at once; waiting for ready runs" in first_line
        time.sleep(0.5)
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=20) == 0


def test_the_csv_export_never_hands_a_spreadsheet_a_formula(db: str, tmp_path: Path) -> None:
    import csv

    code, out = run("users", "add", "=HYPERLINK(1)", "--role", "viewer", "--database-url", db)
    assert code == 0, out
    exported = tmp_path / "audit.csv"
    code, out = run("audit", "export", "--format", "csv", "--output", str(exported), "--database-url", db)
    assert code == 0, out
    with exported.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    created = next(r for r in rows if r["action"] == "user.created")
    assert created["subject_id"] == "'=HYPERLINK(1)"
    assert set(rows[0]) >= {"id", "actor", "agent", "tool", "details", "prev_hash", "hash"}


def test_tokens_for_a_person_with_scopes(db: str) -> None:
    code, out = run("users", "add", "dana", "--role", "reviewer", "--database-url", db)
    assert code == 0, out
    code, token = run(
        "tokens", "create", "dana-cli", "--user", "dana", "--scope", "calls:read", "--scope", "calls:decide",
        "--database-url", db,
    )  # fmt: skip
    assert code == 0 and token.strip().startswith("apv_"), token
    code, out = run("tokens", "create", "x", "--scope", "everything", "--database-url", db)
    assert code == 1 and "Unknown token scopes" in out
    code, out = run("tokens", "create", "x", "--user", "nobody", "--database-url", db)
    assert code == 1 and "nobody" in out
