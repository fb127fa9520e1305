"""Bundles checked offline: the database tampered with for real, then exported, and the bundle file edited.

A bundle exported from a rewritten database still carries the checkpoints signed before the
rewrite, so the check finds it without the database; with the directory's checkpoints (which
carry their leaves) it names the first bad event.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from approvals.audit.bundle import verify_bundle, write_bundle
from approvals.audit.checkpoint_files import read_checkpoint_directory
from approvals.audit.signing import SigningKey
from approvals.store import Database, Store
from approvals.store.audit import GENESIS_HASH, event_hash

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
    maker = checkpointer(store, key, directory, every_events=every)
    for _ in range(events // every):
        await add_events(store, every)
        assert await maker.make()


async def test_a_bundle_of_an_untouched_range_verifies_offline(store: Store, key: SigningKey, tmp_path: Path) -> None:
    await signed_log(store, key, tmp_path / "cp")
    await add_events(store, 3)
    bundle = tmp_path / "range.jsonl"
    written = await write_bundle(store.db, bundle, from_id=50, to_id=60)
    assert (written.first, written.last, written.events, written.checkpoints) == (41, 80, 40, 1)
    await store.db.dispose()  # offline: the database is not used again
    report = verify_bundle(bundle, key.public)
    assert report.ok, report.problem
    assert (report.checked, report.checkpoints, report.covered_up_to) == (40, 1, 80)


async def test_a_whole_log_bundle_reports_its_unsigned_tail(store: Store, key: SigningKey, tmp_path: Path) -> None:
    await signed_log(store, key, tmp_path / "cp")
    await add_events(store, 3)
    bundle = tmp_path / "all.jsonl"
    await write_bundle(store.db, bundle)
    report = verify_bundle(bundle, key.public)
    assert report.ok, report.problem
    assert (report.checked, report.checkpoints, report.covered_up_to, report.uncovered) == (123, 3, 120, 3)


@pytest.mark.parametrize(
    ("tamper", "first_bad"),
    [
        ("rewrite", 57),
        ("delete", 50),
        ("reorder", 45),
        ("truncate", 101),
    ],
)
async def test_tampering_in_the_database_is_found_in_the_bundle(
    store: Store, key: SigningKey, tmp_path: Path, tamper: str, first_bad: int
) -> None:
    directory = tmp_path / "cp"
    await signed_log(store, key, directory)
    if tamper == "rewrite":
        await admin_rewrite_details(store, 57, {"amount": "1.00", "order_id": "A-57", "n": 57})
    elif tamper == "delete":
        await admin_delete_range(store, 50, 55)
    elif tamper == "reorder":
        await admin_reorder(store, 45, 46)
    else:
        await admin_truncate(store, 100)
    assert (await store.audit.verify_audit()).ok, "the hash chain alone says intact"

    from_database = tmp_path / "db-checkpoints.jsonl"
    await write_bundle(store.db, from_database)  # the checkpoints the database kept (signed before the tampering)
    report = verify_bundle(from_database, key.public)
    assert not report.ok
    assert report.bad_checkpoint == (3 if tamper == "truncate" else 2)

    with_leaves = tmp_path / "dir-checkpoints.jsonl"
    await write_bundle(store.db, with_leaves, checkpoints=read_checkpoint_directory(directory))
    report = verify_bundle(with_leaves, key.public)
    assert (report.ok, report.first_bad_id) == (False, first_bad), report.problem


async def test_a_bundle_from_a_database_restored_from_an_older_copy_is_found(
    store: Store, db_url: str, key: SigningKey, tmp_path: Path
) -> None:
    directory = tmp_path / "cp"
    maker = checkpointer(store, key, directory, every_events=40)
    await add_events(store, 40)
    await maker.make()
    backup_url = copy_database(db_url, tmp_path)
    try:
        await add_events(store, 40)
        await maker.make()
        restored = Store(Database(backup_url))
        try:
            bundle = tmp_path / "restored.jsonl"
            await write_bundle(restored.db, bundle, checkpoints=read_checkpoint_directory(directory))
            report = verify_bundle(bundle, key.public)
            assert (report.ok, report.first_bad_id, report.bad_checkpoint) == (False, 41, 2)
            assert "restored from an older copy" in str(report.problem)
        finally:
            await restored.db.dispose()
    finally:
        drop_copy(backup_url)


def _lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _write(path: Path, lines: list[dict[str, object]]) -> None:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def _rechain(lines: list[dict[str, object]], anchor: str = GENESIS_HASH) -> None:
    """Recompute every event's hashes in a bundle, as someone forging it would."""
    from approvals.audit.bundle import event_from_document

    prev = anchor
    for line in lines:
        if line["type"] == "event":
            _, _, _, event = event_from_document(line)
            line["prev_hash"], line["hash"] = prev, event_hash(prev, event)
            prev = str(line["hash"])


async def test_edits_to_the_bundle_file_are_found(store: Store, key: SigningKey, tmp_path: Path) -> None:
    await signed_log(store, key, tmp_path / "cp")
    bundle = tmp_path / "b.jsonl"
    await write_bundle(store.db, bundle)
    original = _lines(bundle)
    events = [i for i, line in enumerate(original) if line["type"] == "event"]

    cases: dict[str, tuple[list[dict[str, object]], int | None]] = {}
    edited = json.loads(json.dumps(original))
    edited[events[9]]["actor"] = "mallory"
    cases["edited, hashes left"] = (edited, 10)
    rechained = json.loads(json.dumps(edited))
    _rechain(rechained)
    cases["edited, hashes recomputed"] = (rechained, 1)  # no leaves in the bundle: the checkpoint's range is named
    removed = [line for i, line in enumerate(original) if i not in events[20:25]]
    _rechain(removed)
    cases["a range removed"] = (removed, 1)
    added = json.loads(json.dumps(original))
    extra = {**added[events[5]], "id": 6.5, "actor": "mallory"}
    added.insert(events[5] + 1, extra)
    cases["an event added"] = (added, None)
    cut = original[: events[100]]
    cases["tail cut before the last checkpoint"] = (cut, None)

    for name, (lines, first_bad) in cases.items():
        path = tmp_path / f"{name}.jsonl"
        _write(path, lines)
        report = verify_bundle(path, key.public)
        assert not report.ok, name
        if first_bad is not None:
            assert report.first_bad_id == first_bad, (name, report.problem)


async def test_a_forged_or_foreign_checkpoint_is_refused(store: Store, key: SigningKey, tmp_path: Path) -> None:
    await signed_log(store, key, tmp_path / "cp")
    bundle = tmp_path / "b.jsonl"
    await write_bundle(store.db, bundle)
    assert not verify_bundle(bundle, SigningKey.generate().public).ok  # another key
    lines = _lines(bundle)
    checkpoint = next(line for line in lines if line["type"] == "checkpoint")
    checkpoint["statement"] = str(checkpoint["statement"]).replace('"tree_size":40', '"tree_size":41')
    _write(bundle, lines)
    report = verify_bundle(bundle, key.public)
    assert (report.ok, report.bad_checkpoint) == (False, 1)
    assert "signature is not valid" in str(report.problem)
