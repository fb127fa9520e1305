"""The directory sink: one JSON file per checkpoint, named by its sequence number, written atomically.

The directory is meant to be outside the database's reach: object storage mounted or synced by the
operator, a write-once volume, another host's share. A file is written to a temporary name, flushed
to disk and renamed, so a reader never sees half a checkpoint; an existing file is never replaced
(a different checkpoint n would be an error worth seeing, not something to overwrite).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import anyio

from .checkpoints import SignedCheckpoint

__all__ = ("DirectorySink", "checkpoint_file_name", "read_checkpoint_directory")

_NAME = re.compile(r"^checkpoint-(\d{12})\.json$")


def checkpoint_file_name(seq: int) -> str:
    return f"checkpoint-{seq:012d}.json"


class DirectorySink:
    """Writes each checkpoint to `directory/checkpoint-<seq>.json`."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.name = f"directory {directory}"
        self._last: int | None = None
        """The highest sequence number known to be there: the directory is listed once, not at every look."""

    async def last_seq(self) -> int:
        if self._last is None:
            self._last = await anyio.to_thread.run_sync(self._last_seq)
        return self._last

    async def put(self, checkpoint: SignedCheckpoint) -> None:
        await anyio.to_thread.run_sync(self.write, checkpoint)
        self._last = max(self._last or 0, checkpoint.seq)

    def _last_seq(self) -> int:
        self.directory.mkdir(parents=True, exist_ok=True)
        seqs = [int(m.group(1)) for name in os.listdir(self.directory) if (m := _NAME.match(name))]
        return max(seqs, default=0)

    def write(self, checkpoint: SignedCheckpoint) -> Path:
        """Write one checkpoint file atomically; one already there with the same statement is left as it is."""
        self.directory.mkdir(parents=True, exist_ok=True)
        target = self.directory / checkpoint_file_name(checkpoint.seq)
        if target.exists():
            existing = SignedCheckpoint.from_document(json.loads(target.read_text(encoding="utf-8")))
            if existing.statement != checkpoint.statement:
                raise OSError(f"{target} already holds a different checkpoint {checkpoint.seq}")
            return target
        temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        with temporary.open("w", encoding="utf-8") as handle:
            json.dump(checkpoint.document(), handle, separators=(",", ":"))
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, target)
        directory_fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(directory_fd)  # the rename itself survives a crash
        finally:
            os.close(directory_fd)
        return target


def read_checkpoint_directory(directory: Path) -> list[SignedCheckpoint]:
    """Every checkpoint file in `directory`, by sequence number; ValueError naming a file that is not one."""
    if not directory.is_dir():
        raise ValueError(f"{directory} is not a directory")
    checkpoints = []
    for path in sorted(directory.iterdir()):
        match = _NAME.match(path.name)
        if not match:
            continue
        try:
            checkpoint = SignedCheckpoint.from_document(json.loads(path.read_text(encoding="utf-8")))
        except (ValueError, OSError) as exc:
            raise ValueError(f"{path} is not a readable checkpoint: {exc}") from None
        if checkpoint.seq != int(match.group(1)):
            raise ValueError(f"{path} holds checkpoint {checkpoint.seq}, not the one its name says")
        checkpoints.append(checkpoint)
    return checkpoints
