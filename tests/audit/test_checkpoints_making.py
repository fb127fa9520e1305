"""Making checkpoints: when they fall due, two processes at once, the directory sink's files and catch-up."""

from __future__ import annotations

import json
import os
from pathlib import Path

import anyio
import pytest

from approvals.audit.checkpoint_files import DirectorySink, read_checkpoint_directory
from approvals.audit.checkpoints import Checkpointer, SignedCheckpoint, run_checkpoints
from approvals.audit.checkpoints_verify import verify_database
from approvals.audit.signing import SigningKey
from approvals.calls import clock
from approvals.store import Database, Store
from approvals.store.audit_checkpoints import AuditCheckpoints

from ..eventually import eventually
from .checkpoint_helpers import add_events, checkpointer

pytestmark = pytest.mark.anyio


@pytest.fixture
def key() -> SigningKey:
    return SigningKey.generate()


async def test_checkpoints_fall_due_by_count_and_by_time(store: Store, key: SigningKey, tmp_path: Path) -> None:
    with clock.using(clock.SkippingClock()) as skipping:
        maker = checkpointer(store, key, tmp_path, every_events=10, interval=60)
        assert await maker.make() == [], "nothing to cover"
        await add_events(store, 3)
        (first,) = await maker.make()  # the first checkpoint is due as soon as there is anything
        assert (first.seq, first.event_id, first.tree_size) == (1, 3, 3)
        await add_events(store, 4)
        assert await maker.make() == [], "4 events, 0 seconds: not due"
        skipping.advance(61)
        (second,) = await maker.make()
        assert (second.seq, second.after_event_id, second.event_id, second.prev) == (2, 3, 7, first.hash)
        await add_events(store, 10)
        (third,) = await maker.make()
        assert third.tree_size == 10
        skipping.advance(3600)
        assert await maker.make() == [], "time alone makes none: nothing new"
    assert [c.seq for c in read_checkpoint_directory(tmp_path)] == [1, 2, 3]


async def test_a_long_log_is_caught_up_in_several_checkpoints(store: Store, key: SigningKey, tmp_path: Path) -> None:
    await add_events(store, 25)
    made = await checkpointer(store, key, tmp_path, max_events=10).make(force=True)
    assert [(c.seq, c.tree_size) for c in made] == [(1, 10), (2, 10), (3, 5)]
    assert (await verify_database(store.db, key.public, read_checkpoint_directory(tmp_path))).ok


async def make_now(maker: Checkpointer) -> None:
    await maker.make(force=True)


async def test_two_processes_making_checkpoints_at_once_never_conflict(
    store: Store, db_url: str, key: SigningKey, tmp_path: Path
) -> None:
    other = Store(Database(db_url))  # a second process's own connections
    try:
        makers = [checkpointer(store, key, tmp_path / "a"), checkpointer(other, key, tmp_path / "b")]
        for round_ in range(6):
            await add_events(store, 7, start=round_ * 7)
            async with anyio.create_task_group() as group:
                for maker in makers:
                    group.start_soon(make_now, maker)
        rows = await AuditCheckpoints(store.db).checkpoints()
        assert [row.seq for row in rows] == list(range(1, len(rows) + 1)) and len(rows) == 6
        signed = [SignedCheckpoint.from_row(row) for row in rows]
        assert (await verify_database(store.db, key.public, signed)).ok
        for directory in ("a", "b"):  # each process's sink caught up what the other made
            await makers[0 if directory == "a" else 1].sync_sinks()
            assert [c.statement for c in read_checkpoint_directory(tmp_path / directory)] == [
                c.statement for c in signed
            ]
    finally:
        await other.db.dispose()


async def test_the_directory_sink_catches_up_and_never_replaces_a_file(
    store: Store, key: SigningKey, tmp_path: Path
) -> None:
    maker = checkpointer(store, key, tmp_path, every_events=5)
    for _ in range(3):
        await add_events(store, 5)
        await maker.make()
    (tmp_path / "checkpoint-000000000002.json").unlink()
    (tmp_path / "checkpoint-000000000003.json").unlink()  # a crash before the files were written
    await checkpointer(store, key, tmp_path).sync_sinks()  # the next process to start
    files = read_checkpoint_directory(tmp_path)
    assert [c.seq for c in files] == [1, 2, 3] and all(c.leaves is not None for c in files)
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")], "no temporary file left behind"

    forged = json.loads((tmp_path / "checkpoint-000000000003.json").read_text())
    forged["signature"] = "AAAA"
    forged["statement"] = forged["statement"].replace('"seq":3', '"seq":3 ')
    with pytest.raises(OSError, match="already holds a different checkpoint 3"):
        DirectorySink(tmp_path).write(SignedCheckpoint.from_document(forged))


async def test_a_checkpoint_file_removed_or_forged_is_named(store: Store, key: SigningKey, tmp_path: Path) -> None:
    maker = checkpointer(store, key, tmp_path, every_events=5)
    for _ in range(3):
        await add_events(store, 5)
        await maker.make()
    second = tmp_path / "checkpoint-000000000002.json"
    document = json.loads(second.read_text())
    second.unlink()
    report = await verify_database(store.db, key.public, read_checkpoint_directory(tmp_path))
    assert (report.ok, report.bad_checkpoint) == (False, 3)
    assert "checkpoint 2 is missing" in str(report.problem)
    document["leaves"][0][1] = "0" * 64
    second.write_text(json.dumps(document))
    report = await verify_database(store.db, key.public, read_checkpoint_directory(tmp_path))
    assert (report.ok, report.bad_checkpoint) == (False, 2)
    assert "does not match its signed root" in str(report.problem)


async def test_the_task_makes_checkpoints_until_stopped(store: Store, key: SigningKey, tmp_path: Path) -> None:
    maker = checkpointer(store, key, tmp_path, every_events=10, poll=0.01)
    await add_events(store, 10)
    stop = anyio.Event()
    async with anyio.create_task_group() as group:
        await group.start(run_checkpoints, maker, stop)
        await eventually(lambda: maker.health.made or None, "the task made a checkpoint")
        stop.set()
    assert maker.health.summary()["last_seq"] == 1
    assert [c.seq for c in read_checkpoint_directory(tmp_path)] == [1]
