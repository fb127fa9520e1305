"""A run's LangGraph checkpoint as our `Snapshot` document, and the checkpointer a turn runs with.

A turn runs the graph with a fresh `SnapshotSaver` (LangGraph's `InMemorySaver`) seeded from
the run's document; at its end the saver's latest checkpoint for the run's thread (each
namespace's), the channel values it references and its pending writes (the interrupt a paused
graph waits on) are written back as the new document. Values stay in LangGraph's own typed
serialization (`JsonPlusSerializer.dumps_typed`: a type tag and bytes, kept as base64), so
nothing of ours decides how a message or a state is encoded. Older checkpoints are dropped:
a run resumes from its latest one only.
"""

from __future__ import annotations

import base64
from importlib.metadata import version
from typing import Any

from langgraph.checkpoint.memory import InMemorySaver

from ...calls.engine_state import Snapshot
from ...exceptions import UserError

__all__ = ("SNAPSHOT_VERSION", "SnapshotSaver", "framework_versions")

SNAPSHOT_VERSION = 1
"""The shape of `Snapshot.data` this module writes and reads."""
_CHECKPOINT_LIBRARY = "langgraph-checkpoint"


def framework_versions() -> dict[str, str]:
    return {"langgraph": version("langgraph"), _CHECKPOINT_LIBRARY: version(_CHECKPOINT_LIBRARY)}


class SnapshotSaver(InMemorySaver):
    """An in-memory checkpointer that starts from a run's document and ends as its next one."""

    def seed(self, thread: str, snapshot: Snapshot) -> dict[str, Any]:
        """Load the run's latest checkpoint from `snapshot`; return the engine's own part of the document."""
        data = _readable(snapshot)
        try:
            for namespace, kept in data["namespaces"].items():
                checkpoint_id = kept["id"]
                self.storage[thread][namespace][checkpoint_id] = (
                    _typed(kept["checkpoint"]),
                    _typed(kept["metadata"]),
                    None,
                )
                for channel, channel_version, value in kept["blobs"]:
                    self.blobs[(thread, namespace, channel, channel_version)] = _typed(value)
                for task_id, index, channel, value, path in kept["writes"]:
                    self.writes[(thread, namespace, checkpoint_id)][(task_id, index)] = (
                        task_id,
                        channel,
                        _typed(value),
                        path,
                    )
                self.serde.loads_typed(_typed(kept["checkpoint"]))  # refuses here, in words, what cannot be read
        except (KeyError, TypeError, ValueError) as exc:
            raise UserError(f"This run's LangGraph checkpoint cannot be read ({type(exc).__name__}: {exc})") from exc
        engine: dict[str, Any] = data.get("engine") or {}
        return engine

    def document(self, thread: str, engine: dict[str, Any]) -> Snapshot:
        """The thread's latest checkpoint of each namespace, its values and pending writes, with `engine`'s notes."""
        namespaces: dict[str, Any] = {}
        for namespace, checkpoints in self.storage.get(thread, {}).items():
            if not checkpoints:
                continue
            checkpoint_id = max(checkpoints)
            checkpoint, metadata, _parent = checkpoints[checkpoint_id]
            versions: dict[str, Any] = self.serde.loads_typed(checkpoint)["channel_versions"]
            blobs = [
                [channel, channel_version, _plain(self.blobs[key])]
                for channel, channel_version in versions.items()
                if (key := (thread, namespace, channel, channel_version)) in self.blobs
            ]
            writes = [
                [task_id, index, channel, _plain(value), path]
                for (task_id, index), (_, channel, value, path) in self.writes.get(
                    (thread, namespace, checkpoint_id), {}
                ).items()
            ]
            namespaces[namespace] = {
                "id": checkpoint_id,
                "checkpoint": _plain(checkpoint),
                "metadata": _plain(metadata),
                "blobs": blobs,
                "writes": writes,
            }
        return Snapshot(
            version=SNAPSHOT_VERSION,
            data={"framework": framework_versions(), "namespaces": namespaces, "engine": engine},
        )


def _readable(snapshot: Snapshot) -> dict[str, Any]:
    """The document's data, once its version and the checkpoint library that wrote it are ones we can read."""
    if snapshot.version != SNAPSHOT_VERSION:
        raise UserError(
            f"This run's LangGraph state is in document version {snapshot.version}; this engine reads version "
            f"{SNAPSHOT_VERSION}. Continue it with the version of approvals that started it."
        )
    written = str((snapshot.data.get("framework") or {}).get(_CHECKPOINT_LIBRARY, "0"))
    installed = version(_CHECKPOINT_LIBRARY)
    if _major(written) > _major(installed):
        raise UserError(
            f"This run's checkpoint was written by {_CHECKPOINT_LIBRARY} {written}; the installed {installed} "
            "cannot read it. Install that version to continue the run."
        )
    return snapshot.data


def _major(text: str) -> int:
    head = text.split(".", 1)[0]
    return int(head) if head.isdigit() else 0


def _plain(typed: tuple[str, bytes]) -> list[str]:
    return [typed[0], base64.b64encode(typed[1]).decode("ascii")]


def _typed(plain: list[str]) -> tuple[str, bytes]:
    kind, encoded = plain
    return kind, base64.b64decode(encoded)
