"""Signed checkpoints to syslog and webhook sinks: a sink as one of the checkpointer's `CheckpointSink`s.

The checkpointer (`approvals.audit.checkpoints.Checkpointer`) asks each of its sinks how far
it got (`last_seq`) and hands it the checkpoints after that, at every look, in order, until
the sink takes them. A directory can be listed; syslog and a webhook cannot be asked, so
their place is a row of `audit_sink_checkpoints`, moved once the sink accepted a checkpoint.
A restart (or another process) sends the rest from there: at least once, in order; receivers
drop repeats by `seq`.

Each checkpoint sink has a connection of its own (`open_checkpoint_sinks` opens new sinks
from the same settings), so checkpoints never interleave inside the events' stream writes.
"""

from __future__ import annotations

from ..store import Store
from ..store.audit_sinks import checkpoint_reached, checkpoint_seq
from .checkpoints import SignedCheckpoint
from .sinks import AuditSinkSettings, Sink, checkpoint_document
from .stream import open_sinks

__all__ = ("CheckpointsTo", "open_checkpoint_sinks")


class CheckpointsTo:
    """One sink outside the database, as a `CheckpointSink`: sends each checkpoint, then records its `seq`."""

    def __init__(self, store: Store, sink: Sink) -> None:
        self.store = store
        self.sink = sink
        self.name = sink.name

    async def last_seq(self) -> int:
        return await checkpoint_seq(self.store.db, self.sink.name)

    async def put(self, checkpoint: SignedCheckpoint) -> None:
        """Raises `OSError` (what the checkpointer expects of a sink that is down) when the sink did not take it."""
        try:
            await self.sink.send(checkpoint_document(checkpoint))
        except OSError:
            raise
        except Exception as exc:
            raise OSError(f"{self.sink.site}: {exc}") from exc
        await checkpoint_reached(self.store.outbound, self.sink.name, checkpoint.seq)

    async def aclose(self) -> None:
        await self.sink.aclose()


def open_checkpoint_sinks(store: Store, settings: AuditSinkSettings) -> list[CheckpointsTo]:
    """A checkpoint sink per configured syslog and webhook sink; close each with `aclose()` when done."""
    return [CheckpointsTo(store, sink) for sink in open_sinks(settings)]
