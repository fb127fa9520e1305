"""Retention on SQLite and PostgreSQL: old events archived to a bundle and deleted, what remains verified from the cut.

The log is signed for real (B's checkpointer writing a checkpoint directory), archived through
`archive_events`, and then tampered with as a database administrator would: the first event after
the cut deleted, the cut row moved to a later checkpoint with the events up to it deleted, the cut
row's head edited. Each is found, online and against the checkpoint directory; the archive bundle
verifies offline. A bundle that cannot be written (a directory nobody can write, a full disk)
deletes nothing.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pytest
from sqlalchemy import func, select, text

from approvals.audit.bundle import verify_bundle
from approvals.audit.checkpoint_files import read_checkpoint_directory
from approvals.audit.checkpoints_verify import verify_database
from approvals.audit.retention import ArchiveRefused, archive_events
from approvals.audit.sentences import KNOWN_ACTIONS, sentence
from approvals.audit.signing import SigningKey
from approvals.calls import clock
from approvals.store import Store
from approvals.store.audit import verify_audit_chain
from approvals.store.audit_sinks import open_sink_cursor
from approvals.store.models import AuditCutRow, AuditEventRow

from .checkpoint_helpers import add_events, checkpointer, rehash

pytestmark = pytest.mark.anyio


@pytest.fixture
def key() -> SigningKey:
    return SigningKey.generate()


async def event_ids(store: Store) -> list[int]:
    async with store.db.read() as session:
        return list((await session.scalars(select(AuditEventRow.id).order_by(AuditEventRow.id))).all())


async def sql(store: Store, statement: str, **params: object) -> None:
    async with store.db.engine.begin() as conn:
        await conn.execute(text(statement), params)


async def old_and_new(store: Store, key: SigningKey, directory: Path) -> dt.datetime:
    """Checkpoints 1 (events 1..40) and 2 (..80) before the date returned; checkpoint 3 (..100) and 5 events after."""
    maker = checkpointer(store, key, directory)
    for _ in range(2):
        await add_events(store, 40)
        assert await maker.make(force=True)
    date = clock.now()
    await add_events(store, 20)
    assert await maker.make(force=True)
    await add_events(store, 5)
    return date


async def archived_log(store: Store, key: SigningKey, tmp_path: Path) -> Path:
    """The log of `old_and_new`, archived before its date: events 1..80 in `tmp_path/archive.jsonl`."""
    date = await old_and_new(store, key, tmp_path / "cp")
    await archive_events(store.db, before=date, bundle=tmp_path / "archive.jsonl", actor="ada", public=key.public)
    return tmp_path / "cp"


async def verified_online(store: Store, key: SigningKey) -> tuple[bool, str | None]:
    async with store.db.read() as session:
        result = await verify_audit_chain(session, key.public.verify)
    return result.ok, result.problem


async def test_archive_then_verify_what_remains_and_the_bundle_offline(
    store: Store, key: SigningKey, tmp_path: Path
) -> None:
    directory = tmp_path / "cp"
    date = await old_and_new(store, key, directory)
    bundle = tmp_path / "archive.jsonl"
    archived = await archive_events(
        store.db,
        before=date,
        bundle=bundle,
        actor="ada",
        public=key.public,
        checkpoints=read_checkpoint_directory(directory),  # the directory's copies carry their leaves
    )
    assert (archived.events, archived.cut.checkpoint_seq, archived.cut.event_id, archived.verified) == (80, 2, 80, True)
    assert (archived.cut.first_event_id, archived.cut.actor, archived.kept_before) == (1, "ada", 0)
    remaining = await event_ids(store)
    assert remaining[0] == 81 and len(remaining) == 20 + 5 + 1  # and the audit.archived event

    plain = await store.audit.verify_audit()  # online, as `approvals audit verify` without a key
    assert plain.ok and plain.checked == 26, plain.problem
    assert await verified_online(store, key) == (True, None)
    report = await verify_database(store.db, key.public, read_checkpoint_directory(directory))
    assert report.ok, report.describe()
    assert (report.checked, report.checkpoints, report.covered_up_to, report.uncovered) == (26, 1, 100, 6)
    assert any("events 1..80 were archived" in note and "checkpoint 2" in note for note in report.notes)

    await store.db.dispose()  # the bundle is checked offline
    offline = verify_bundle(bundle, key.public)
    assert offline.ok, offline.describe()
    assert (offline.checked, offline.checkpoints, offline.covered_up_to) == (80, 2, 80)


async def test_a_second_archive_starts_where_the_first_cut_and_its_bundle_carries_that_anchor(
    store: Store, key: SigningKey, tmp_path: Path
) -> None:
    directory = await archived_log(store, key, tmp_path)
    maker = checkpointer(store, key, directory)
    assert await maker.make(force=True)  # checkpoint 4 covers 101..106, the audit.archived event among them
    await add_events(store, 3)
    second = tmp_path / "archive-2.jsonl"
    archived = await archive_events(store.db, before=clock.now(), bundle=second, actor="ada", public=key.public)
    assert (archived.cut.first_event_id, archived.cut.event_id, archived.events) == (81, 106, 26)
    assert archived.kept_before == 3  # after the newest checkpoint: kept
    assert await event_ids(store) == [107, 108, 109, 110]
    assert await verified_online(store, key) == (True, None)
    report = await verify_database(store.db, key.public, read_checkpoint_directory(directory))
    assert report.ok and report.checked == 4, report.describe()
    offline = verify_bundle(second, key.public)  # starts from checkpoint 2, the first cut, which it carries
    assert offline.ok and (offline.checked, offline.covered_up_to) == (26, 106), offline.describe()


async def test_the_archive_is_recorded_as_an_event_with_a_sentence(
    store: Store, key: SigningKey, tmp_path: Path
) -> None:
    await archived_log(store, key, tmp_path)
    page = await store.audit.audit_events(action="audit.archived")
    (event,) = page.items
    assert event.actor == "ada" and event.details["checkpoint_seq"] == 2 and event.details["bundle"] == "archive.jsonl"
    assert "audit.archived" in KNOWN_ACTIONS
    assert sentence(event) == (
        "ada archived 80 events (1..80, up to signed checkpoint 2) to the bundle archive.jsonl "
        "and deleted them from the database"
    )
    async with store.db.read() as session:
        (cut,) = (await session.scalars(select(AuditCutRow))).all()
    assert (cut.checkpoint_seq, cut.event_id, cut.events, cut.bundle) == (2, 80, 80, "archive.jsonl")
    assert len(cut.bundle_sha256) == 64


async def test_without_a_signed_checkpoint_before_the_date_the_archive_is_refused(
    store: Store, key: SigningKey, tmp_path: Path
) -> None:
    await add_events(store, 30)
    bundle = tmp_path / "archive.jsonl"
    with pytest.raises(ArchiveRefused, match="no signed checkpoint covers the events before"):
        await archive_events(store.db, before=clock.now(), bundle=bundle, actor="ada")
    date = clock.now()
    await add_events(store, 5)
    assert await checkpointer(store, key, tmp_path / "cp").make(force=True)  # covers events after the date too
    with pytest.raises(ArchiveRefused, match="no signed checkpoint covers"):
        await archive_events(store.db, before=date, bundle=bundle, actor="ada")
    with pytest.raises(ArchiveRefused, match="no events before"):
        await archive_events(store.db, before=date - dt.timedelta(days=1), bundle=bundle, actor="ada")
    assert not bundle.exists()
    assert len(await event_ids(store)) == 35


def _unwritable_directory(tmp_path: Path) -> Path:
    """A directory this process cannot create a file in: read-only for a user; as root, sysfs (which refuses files)."""
    if os.geteuid() != 0:
        directory = tmp_path / "read-only"
        directory.mkdir()
        directory.chmod(0o555)
        return directory
    return Path("/sys/fs")


@pytest.mark.parametrize("fault", ["read-only directory", "full disk"])
async def test_a_bundle_that_cannot_be_written_deletes_nothing(
    store: Store, key: SigningKey, tmp_path: Path, fault: str
) -> None:
    date = await old_and_new(store, key, tmp_path / "cp")
    before = await event_ids(store)
    if fault == "read-only directory":
        bundle = _unwritable_directory(tmp_path) / "archive.jsonl"
    else:  # the bundle's temporary file is /dev/full: every write fails with ENOSPC, as on a full disk
        bundle = tmp_path / "archive.jsonl"
        (tmp_path / f".archive.jsonl.{os.getpid()}.tmp").symlink_to("/dev/full")
    with pytest.raises(ArchiveRefused, match=r"cannot write the bundle .*nothing was deleted"):
        await archive_events(store.db, before=date, bundle=bundle, actor="ada", public=key.public)
    assert not bundle.exists()
    assert await event_ids(store) == before
    assert await verified_online(store, key) == (True, None)


async def test_a_bundle_that_does_not_verify_or_a_file_already_there_deletes_nothing(
    store: Store, key: SigningKey, tmp_path: Path
) -> None:
    date = await old_and_new(store, key, tmp_path / "cp")
    before = await event_ids(store)
    other = SigningKey.generate().public
    bundle = tmp_path / "archive.jsonl"
    with pytest.raises(ArchiveRefused, match="does not verify with the public key"):
        await archive_events(store.db, before=date, bundle=bundle, actor="ada", public=other)
    with pytest.raises(ArchiveRefused, match="already exists"):  # the bundle left by the refusal is never replaced
        await archive_events(store.db, before=date, bundle=bundle, actor="ada", public=key.public)
    assert await event_ids(store) == before


async def test_a_delivery_that_has_not_passed_the_cut_refuses_the_archive(
    store: Store, key: SigningKey, tmp_path: Path
) -> None:
    date = await old_and_new(store, key, tmp_path / "cp")
    await open_sink_cursor(store.audit, "audit-sink:siem", "syslog://siem.example", "beginning")  # a new SIEM copy
    with pytest.raises(ArchiveRefused, match=r"delivery to syslog://siem.example has only reached event 0"):
        await archive_events(store.db, before=date, bundle=tmp_path / "a.jsonl", actor="ada")
    assert len(await event_ids(store)) == 105


async def test_an_event_deleted_after_the_cut_is_found(store: Store, key: SigningKey, tmp_path: Path) -> None:
    directory = await archived_log(store, key, tmp_path)
    await sql(store, "DELETE FROM audit_events WHERE id = 81")
    await rehash(store, 82)  # the administrator recomputes every later hash: the chain alone looks whole
    ok, problem = await verified_online(store, key)
    assert not ok and problem is not None and "events after the cut were deleted" in problem
    plain = await store.audit.verify_audit()
    assert not plain.ok and plain.first_bad_id == 82
    report = await verify_database(store.db, key.public, read_checkpoint_directory(directory))
    assert not report.ok and report.first_bad_id == 82, report.describe()


async def test_a_cut_moved_to_a_later_checkpoint_is_found(store: Store, key: SigningKey, tmp_path: Path) -> None:
    """The administrator deletes events 81..100 and points the cut at checkpoint 3 (a real signed one)."""
    directory = await archived_log(store, key, tmp_path)
    await sql(store, "DELETE FROM audit_events WHERE id <= 100")
    await sql(
        store,
        "UPDATE audit_cuts SET checkpoint_seq = 3, event_id = c.event_id, event_hash = c.event_hash, "
        "statement = c.statement, signature = c.signature FROM audit_checkpoints AS c WHERE c.seq = 3",
    )
    ok, problem = await verified_online(store, key)
    assert not ok and problem is not None and "no audit.archived event after the cut names it" in problem
    report = await verify_database(store.db, key.public, read_checkpoint_directory(directory))
    assert not report.ok and "forged or moved" in (report.problem or ""), report.describe()


async def test_a_forged_cut_row_is_found(store: Store, key: SigningKey, tmp_path: Path) -> None:
    directory = await archived_log(store, key, tmp_path)
    await sql(store, "UPDATE audit_cuts SET event_hash = :h", h="f" * 64)
    ok, problem = await verified_online(store, key)
    assert not ok and problem is not None and "does not match the checkpoint statement" in problem
    await sql(
        store,
        "UPDATE audit_cuts SET event_hash = (SELECT event_hash FROM audit_checkpoints WHERE seq = 2), signature = :s",
        s="A" * 86 + "==",
    )  # the statement kept, the signature forged: the checkpoint row no longer matches, nor does the key
    ok, problem = await verified_online(store, key)
    assert not ok and problem is not None and "differs from the one the cut holds" in problem
    report = await verify_database(store.db, key.public, read_checkpoint_directory(directory))
    assert not report.ok and report.bad_checkpoint == 2, report.describe()


async def test_events_restored_before_the_cut_are_found(store: Store, key: SigningKey, tmp_path: Path) -> None:
    await archived_log(store, key, tmp_path)
    await sql(
        store,
        "INSERT INTO audit_events (id, at, actor, action, subject_type, subject_id, prev_hash, hash) "
        "VALUES (5, :at, 'x', 'call.approved', 'call', 'c', :h, :h)",
        at=clock.now(),
        h="0" * 64,
    )
    ok, problem = await verified_online(store, key)
    assert not ok and problem is not None and "event 5 is at or before the cut" in problem
    async with store.db.read() as session:
        assert await session.scalar(select(func.count()).select_from(AuditEventRow)) == 27
