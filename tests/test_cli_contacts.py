"""`approvals users add --email` and `approvals users contact`, in-process against a real SQLite file."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from approvals.cli import app, with_store

from .databases import DATABASES

runner = CliRunner()


@pytest.fixture
def db(tmp_path: Path) -> str:
    """A migrated SQLite file of the test's own: a copy of the process's template (tests/databases.py), not
    a migration per test (~0.5 s); test_cli.py's test_db_upgrade_and_current runs `approvals db upgrade`."""
    return DATABASES.fresh("sqlite", tmp_path)[0]


def run(db: str, *args: str) -> tuple[int, str]:
    result = runner.invoke(app, [*args, "--database-url", db])
    return result.exit_code, result.output


def test_a_user_is_added_with_an_address_and_linked_to_slack(db: str) -> None:
    code, out = run(db, "users", "add", "alice", "--email", "Alice@Example.com", "--password", "pw")
    assert (code, out) == (0, "added alice (reviewer, alice@example.com)\n")
    assert run(db, "users", "contact", "alice") == (0, "alice: e-mail alice@example.com; Slack not linked\n")
    assert run(db, "users", "contact", "alice", "--slack-id", "U024BE7LH") == (
        0,
        "alice: e-mail alice@example.com; Slack U024BE7LH\n",
    )
    assert run(db, "users", "contact", "alice", "--email", "", "--slack-id", "") == (
        0,
        "alice: e-mail none; Slack not linked\n",
    )
    code, out = run(db, "users", "list")
    assert out.split() == ["alice", "reviewer", "active", "-", "-"]


def test_bad_addresses_and_ids_are_refused_clearly_and_change_nothing(db: str) -> None:
    code, out = run(db, "users", "add", "alice", "--email", "not an address")
    assert code == 2 and "is not an e-mail address" in out
    assert "No user" in run(db, "users", "contact", "alice")[1]  # nothing was added
    assert run(db, "users", "add", "alice", "--email", "a@example.com", "--password", "pw")[0] == 0
    assert run(db, "users", "add", "bob", "--password", "pw")[0] == 0
    code, out = run(db, "users", "contact", "bob", "--email", "A@example.com")
    assert code == 1 and "Another user already has email 'a@example.com'" in out
    code, out = run(db, "users", "contact", "bob", "--slack-id", "bob")
    assert code == 1 and "is not a Slack member id" in out
    code, out = run(db, "users", "contact", "nobody", "--email", "n@example.com")
    assert code == 1 and "No user 'nobody'" in out
    bob = with_store(db, lambda store: store.people.get_user("bob"))
    assert (bob.email, bob.slack_user_id) == (None, None)
