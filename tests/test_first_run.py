"""A fresh installation: one per-user database whatever the current folder, and a first admin `serve` tells about.

Every command without a database URL uses `$XDG_DATA_HOME/approvals/approvals.db`
(`~/.local/share/approvals/approvals.db`); only `serve`, `worker`, `db upgrade` and `demo`
create it. The others say in one line what to run and leave no file behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from approvals.cli import app
from approvals.first_run import data_dir, default_database_url, first_admin_command, missing_database

from .processes import free_port

runner = CliRunner()


@pytest.fixture
def fresh_user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user with an empty HOME and no database settings: the per-user database lands under `HOME`."""
    home = tmp_path / "home"
    home.mkdir()
    for name in [name for name in os.environ if name.startswith("APPROVALS_")]:
        monkeypatch.delenv(name)
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.setenv("HOME", str(home))
    return home


def run_in(folder: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[int, str]:
    folder.mkdir(parents=True, exist_ok=True)
    monkeypatch.chdir(folder)
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


def test_the_data_directory_follows_xdg_data_home() -> None:
    assert data_dir({"HOME": "/home/me"}) == Path("/home/me/.local/share/approvals")
    assert data_dir({"HOME": "/home/me", "XDG_DATA_HOME": "/data"}) == Path("/data/approvals")
    assert data_dir({"HOME": "/home/me", "XDG_DATA_HOME": "relative"}) == Path("/home/me/.local/share/approvals")


def test_commands_in_different_folders_share_the_per_user_database(
    fresh_user: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    database = fresh_user / ".local" / "share" / "approvals" / "approvals.db"
    assert default_database_url() == f"sqlite:///{database}"
    code, out = run_in(tmp_path / "server", monkeypatch, "db", "upgrade")
    assert code == 0, out
    assert database.is_file()
    code, out = run_in(tmp_path / "project", monkeypatch, "users", "add", "me", "--role", "admin")
    assert code == 0, out
    assert out.startswith("added me (admin); password: ")
    code, out = run_in(tmp_path / "elsewhere", monkeypatch, "users", "list")
    assert code == 0, out
    assert out.split()[:2] == ["me", "admin"]
    assert not list(tmp_path.glob("*/approvals.db*"))  # nothing in the folders the commands ran in


def test_a_command_with_no_database_says_what_to_do_and_creates_nothing(
    fresh_user: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out = run_in(tmp_path / "project", monkeypatch, "tokens", "create", "claude-code", "--scope", "calls:ask")
    database = fresh_user / ".local" / "share" / "approvals" / "approvals.db"
    assert code == 1
    assert out == (
        f"error: No database at {database}: start `approvals serve` (it creates and migrates it) "
        "or run `approvals db upgrade`\n"
    )
    assert list(fresh_user.rglob("*")) == []  # not even the data directory
    assert list((tmp_path / "project").iterdir()) == []

    code, out = run_in(tmp_path / "project", monkeypatch, "db", "current")
    assert code == 1 and "No database at" in out
    assert list(fresh_user.rglob("*")) == []


def test_a_database_with_no_tables_says_to_migrate_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty.db"
    empty.touch()
    url = f"sqlite:///{empty}"
    code, out = run_in(tmp_path, monkeypatch, "users", "list", "--database-url", url)
    assert code == 1
    told = f"error: The database at {empty} has no tables yet: run `approvals db upgrade` (or start `approvals serve`)"
    assert out == told + "\n"
    assert empty.stat().st_size == 0
    code, out = run_in(tmp_path, monkeypatch, "db", "current", "--database-url", url)
    assert code == 0 and "current: empty" in out and "(run: approvals db upgrade)" in out
    assert missing_database("postgresql://somebody@db.internal/approvals") is None  # its own errors say so


def test_the_first_admin_command_keeps_the_database_serve_was_given() -> None:
    assert first_admin_command() == "approvals users add <you> --role admin"
    assert (
        first_admin_command("sqlite:////srv/a.db")
        == "approvals users add <you> --role admin --database-url 'sqlite:////srv/a.db'"
    )
    hidden = first_admin_command("postgresql://app:s3cret@db/approvals")
    assert "s3cret" not in hidden and "--database-url 'postgresql://app:***@db/approvals'" in hidden


def test_serve_on_a_fresh_machine_names_its_database_and_how_to_add_the_first_admin(
    fresh_user: Path, tmp_path: Path
) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("APPROVALS_")}
    env |= {"HOME": str(fresh_user), "PYTHONUNBUFFERED": "1"}
    env.pop("XDG_DATA_HOME", None)
    folder = tmp_path / "anywhere"
    folder.mkdir()
    command = [sys.executable, "-m", "approvals", "serve", "--port", str(free_port()), "--no-worker"]
    with subprocess.Popen(
        command, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as served:
        assert served.stdout is not None
        lines: list[str] = []
        deadline = time.monotonic() + 60
        while not (lines and lines[-1].startswith("approvals: serving")):
            assert time.monotonic() < deadline and served.poll() is None, lines
            lines.append(served.stdout.readline().rstrip("\n"))
        served.send_signal(signal.SIGTERM)
        served.wait(timeout=30)
    database = fresh_user / ".local" / "share" / "approvals" / "approvals.db"
    assert f"Database: sqlite:///{database}" in lines
    assert "    approvals users add <you> --role admin" in lines
    assert database.is_file() and list(folder.iterdir()) == []
