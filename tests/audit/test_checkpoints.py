"""Signed checkpoints against a database rewritten for real: every kind of tampering is found online.

Each test makes real events, signs checkpoints into a directory (the copy outside the database),
then tampers with the database in SQL the way an administrator would (recomputing every later hash,
so the hash chain alone says "intact") and checks `verify_database` names the first bad event.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from approvals.audit.checkpoint_files import read_checkpoint_directory
from approvals.audit.checkpoints_verify import ChainReport, verify_database
from approvals.audit.signing import SigningKey
from approvals.store import Database, Store

from .checkpoint_helpers import (
    add_events,
    admin_delete_range,
    admin_reorder,
    admin_rewrite_details,
    admin_truncate,
    checkpointer,
    copy_database,
    drop_copy,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def key() -> SigningKey:
    return SigningKey.generate()


async def signed_log(store: Store, key: SigningKey, directory: Path, *, events: int = 120, every: int = 40) -> None:
    """`events` events with a checkpoint every `every`, written to `directory`."""
    maker = checkpointer(store, key, directory, every_events=every)
    for _ in range(events // every):
        await add_events(store, every)
        made = await maker.make()
        assert made, "a checkpoint falls due every `every` events"


async def verify(store: Store, key: SigningKey, directory: Path) -> ChainReport:
    return await verify_database(store.db, key.public, read_checkpoint_directory(directory))


async def test_an_untouched_log_matches_its_checkpoints(store: Store, key: SigningKey, tmp_path: Path) -> None:
    await signed_log(store, key, tmp_path)
    await add_events(store, 5)  # not yet covered
    report = await verify(store, key, tmp_path)
    assert report.ok, report.problem
    assert (report.checked, report.checkpoints, report.covered_up_to, report.uncovered) == (125, 3, 120, 5)
    assert "5 later event(s) not covered" in report.describe()
    assert (await store.audit.verify_audit()).ok


async def test_a_rewritten_event_is_found_though_every_later_hash_was_recomputed(
    store: Store, key: SigningKey, tmp_path: Path
) -> None:
    await signed_log(store, key, tmp_path)
    await admin_rewrite_details(store, 57, {"amount": "9999.00", "order_id": "A-57", "n": 57})
    assert (await store.audit.verify_audit()).ok, "the hash chain alone cannot tell"
    report = await verify(store, key, tmp_path)
    assert not report.ok
    assert report.first_bad_id == 57
    assert "event 57 differs from the one checkpoint 2 signed" in str(report.problem)


async def test_a_deleted_range_is_found(store: Store, key: SigningKey, tmp_path: Path) -> None:
    await signed_log(store, key, tmp_path)
    await admin_delete_range(store, 50, 60)
    assert (await store.audit.verify_audit()).ok
    report = await verify(store, key, tmp_path)
    assert (report.ok, report.first_bad_id) == (False, 50)
    assert "event 50, signed in checkpoint 2, is missing (it was deleted)" in str(report.problem)


async def test_reordered_events_are_found(store: Store, key: SigningKey, tmp_path: Path) -> None:
    await signed_log(store, key, tmp_path)
    await admin_reorder(store, 90, 95)
    assert (await store.audit.verify_audit()).ok
    report = await verify(store, key, tmp_path)
    assert (report.ok, report.first_bad_id) == (False, 90)


async def test_a_truncated_tail_is_found(store: Store, key: SigningKey, tmp_path: Path) -> None:
    await signed_log(store, key, tmp_path)
    await admin_truncate(store, 100)
    assert (await store.audit.verify_audit()).ok
    report = await verify(store, key, tmp_path)
    assert (report.ok, report.first_bad_id, report.bad_checkpoint) == (False, 101, 3)
    assert "the chain ends at event 100, but checkpoint 3" in str(report.problem)
    assert "the tail was cut" in str(report.problem)


async def test_a_database_restored_from_an_older_copy_is_found(
    store: Store, db_url: str, key: SigningKey, tmp_path: Path
) -> None:
    directory = tmp_path / "checkpoints"
    maker = checkpointer(store, key, directory, every_events=40)
    await add_events(store, 40)
    await maker.make()
    backup_url = copy_database(db_url, tmp_path)  # the backup an operator kept
    try:
        await add_events(store, 40)
        await maker.make()
        restored = Store(Database(backup_url))
        try:
            report = await verify(restored, key, directory)
            assert (report.ok, report.first_bad_id, report.bad_checkpoint) == (False, 41, 2)
            assert "restored from an older copy" in str(report.problem)
            await add_events(restored, 50, start=1000)  # and the restored database is written to since
            report = await verify(restored, key, directory)
            assert (report.ok, report.first_bad_id) == (False, 41)
            assert "restored from an older copy and written to since" in str(report.problem)
        finally:
            await restored.db.dispose()
    finally:
        drop_copy(backup_url)


async def test_an_edit_without_recomputed_hashes_is_found_by_the_chain_itself(
    store: Store, key: SigningKey, tmp_path: Path
) -> None:
    await signed_log(store, key, tmp_path)
    from .checkpoint_helpers import _sql

    sql = "UPDATE audit_events SET actor = 'mallory' WHERE id = 30"
    await _sql(store, [(sql, {})])
    report = await verify(store, key, tmp_path)
    assert (report.ok, report.first_bad_id) == (False, 30)
    assert "changed after it was written" in str(report.problem)
