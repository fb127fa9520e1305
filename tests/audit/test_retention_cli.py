"""`approvals audit archive` on SQLite and PostgreSQL, then `audit verify` (online, with checkpoints, the bundle
offline) and the remaining events listed by `audit search`; refusals are one-line errors that delete nothing."""

from __future__ import annotations

from pathlib import Path

import anyio
from typer.testing import CliRunner

from approvals.audit.signing import SigningKey
from approvals.calls import clock
from approvals.cli import app
from approvals.store import Database, Store

from ..store import conftest as store_fixtures
from .checkpoint_helpers import add_events, checkpointer

db_url, postgres_url, sqlite_template = (
    store_fixtures.db_url,
    store_fixtures.postgres_url,
    store_fixtures.sqlite_template,
)
runner = CliRunner()


def cli(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


async def signed_log(store: Store, key: SigningKey, directory: Path) -> str:
    """Checkpoints 1 (1..40) and 2 (..80) before the date returned (ISO), checkpoint 3 (..100) and 5 events after."""
    maker = checkpointer(store, key, directory)
    for _ in range(2):
        await add_events(store, 40)
        assert await maker.make(force=True)
    date = clock.now().isoformat()
    await add_events(store, 20)
    assert await maker.make(force=True)
    await add_events(store, 5)
    return date


def signed_log_in(url: str, key: SigningKey, directory: Path) -> str:
    async def fill() -> str:
        database = Database(url)
        try:
            return await signed_log(Store(database), key, directory)
        finally:
            await database.dispose()

    return anyio.run(fill)


def test_archive_then_verify_online_with_checkpoints_and_the_bundle_offline(db_url: str, tmp_path: Path) -> None:
    key = SigningKey.generate()
    public = tmp_path / "audit-key.pem"
    public.write_text(key.public.pem())
    date = signed_log_in(db_url, key, tmp_path / "cp")
    bundle = tmp_path / "2026-archive.jsonl"
    on = ("--database-url", db_url)
    code, out, err = cli("audit", "archive", "--before", date, "--bundle", str(bundle), "--public-key", str(public),
                         "--actor", "ada", *on)  # fmt: skip
    assert code == 0, err
    assert out.startswith("archived 80 events (1..80, up to signed checkpoint 2) to ")

    code, out, err = cli("audit", "verify", *on)
    assert code == 0, err
    assert "audit log intact: 26 events" in out and "the chain starts at signed checkpoint 2" in out
    assert "signature not checked" in out
    code, out, err = cli("audit", "verify", "--public-key", str(public), *on)
    assert code == 0 and "its signature checked" in out, err
    code, out, err = cli("audit", "verify", "--checkpoints", str(tmp_path / "cp"), "--public-key", str(public), *on)
    assert code == 0, err
    assert "intact: 26 events" in out and "matches 1 signed checkpoint(s)" in out and "were archived" in out
    code, out, err = cli("audit", "verify", "--bundle", str(bundle), "--public-key", str(public))
    assert code == 0 and "intact: 80 events" in out, err

    code, out, err = cli("audit", "search", "--limit", "100", *on)  # the remaining events are listed
    lines = out.splitlines()
    assert code == 0 and len(lines) == 26 and int(lines[-1].split()[0]) == 81
    assert "ada archived 80 events (1..80, up to signed checkpoint 2)" in lines[0]

    code, _, err = cli("audit", "archive", "--before", date, "--bundle", str(tmp_path / "again.jsonl"), *on)
    assert code == 1 and "no events before" in err


def test_refusals_are_one_line_errors_and_delete_nothing(db_url: str, tmp_path: Path) -> None:
    async def unsigned() -> None:
        database = Database(db_url)
        try:
            await add_events(Store(database), 10)
        finally:
            await database.dispose()

    anyio.run(unsigned)
    on = ("--database-url", db_url)
    bundle = str(tmp_path / "a.jsonl")
    code, _, err = cli("audit", "archive", "--before", clock.now().isoformat(), "--bundle", bundle, *on)
    assert code == 1 and "no signed checkpoint covers the events before" in err and "approvals audit checkpoint" in err
    code, _, err = cli("audit", "archive", "--before", "last tuesday", "--bundle", bundle, *on)
    assert code == 1 and "--before is not an ISO 8601 date" in err
    code, out, _ = cli("audit", "verify", *on)
    assert code == 0 and "audit log intact: 10 events" in out
    assert not Path(bundle).exists()
