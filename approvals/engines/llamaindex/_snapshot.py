"""A paused LlamaIndex run as one stored document: its workflow `Context`, its memory, and the versions.

The document is LlamaIndex's own: `Context.to_dict(serializer=JsonSerializer())`, which holds the
workflow's state, its waiting steps and the tool results already collected. The agent's memory is
the one value LlamaIndex leaves out of it ("known unserializable", to be set again after
restoring), so its messages are kept beside it and put back as a `ChatMemoryBuffer`. The
versions of LlamaIndex that wrote it are kept too: a context written by a LlamaIndex the
installed one cannot read is refused in words, never half-restored.
"""

from __future__ import annotations

import warnings
from importlib.metadata import version
from typing import Any

from llama_index.core.llms import ChatMessage
from llama_index.core.memory import BaseMemory, ChatMemoryBuffer
from workflows import Context, Workflow
from workflows.context.serializers import JsonSerializer
from workflows.context.state_store import UnserializableKeyWarning
from workflows.errors import ContextSerdeError

from ...calls.engine_state import Snapshot
from ...exceptions import UserError

__all__ = ("SNAPSHOT_VERSION", "framework_versions", "memory_of", "restore", "snapshot")

SNAPSHOT_VERSION = 1
"""The shape of `Snapshot.data` this engine writes: `{"framework", "context", "memory"}`."""
_PACKAGES = ("llama-index-core", "llama-index-workflows")


def framework_versions() -> dict[str, str]:
    return {package: version(package) for package in _PACKAGES}


async def snapshot(ctx: Context, memory: BaseMemory | None) -> Snapshot:
    """The run's state now: LlamaIndex's context document and the memory's messages."""
    messages = await memory.aget_all() if memory is not None else []
    with warnings.catch_warnings():  # LlamaIndex warns that it leaves the memory out: kept here, beside it
        warnings.simplefilter("ignore", UnserializableKeyWarning)
        context = ctx.to_dict(serializer=JsonSerializer())
    return Snapshot(
        version=SNAPSHOT_VERSION,
        data={
            "framework": framework_versions(),
            "context": context,
            "memory": [message.model_dump(mode="json") for message in messages],
        },
    )


def restore(workflow: Workflow, stored: Snapshot) -> tuple[Context, list[ChatMessage]]:
    """The stored context, restored for `workflow`, and the memory's messages; a `UserError` says why it cannot be."""
    if stored.version != SNAPSHOT_VERSION:
        raise UserError(
            f"This LlamaIndex run's state is in version {stored.version} of the engine's format; "
            f"this version of approvals reads version {SNAPSHOT_VERSION} only"
        )
    written = stored.data.get("framework") or {}
    installed = framework_versions()
    for package in _PACKAGES:
        was, now = str(written.get(package, "?")), installed[package]
        if _series(was) != _series(now):
            raise UserError(
                f"This LlamaIndex run was paused by {package} {was}; the installed {now} may not read its "
                f"state: finish it with {package} {'.'.join(_series(was))}.x, or cancel it"
            )
    try:
        ctx: Context = Context.from_dict(workflow, stored.data["context"], serializer=JsonSerializer())
        memory = [ChatMessage.model_validate(message) for message in stored.data.get("memory") or []]
    except (ContextSerdeError, KeyError, ValueError) as exc:
        raise UserError(f"This LlamaIndex run's stored state cannot be restored: {exc}") from exc
    return ctx, memory


def memory_of(messages: list[ChatMessage], llm: Any) -> ChatMemoryBuffer:
    """The agent's memory again, as LlamaIndex's default `ChatMemoryBuffer` holding `messages`."""
    return ChatMemoryBuffer.from_defaults(chat_history=messages, llm=llm)


def _series(release: str) -> tuple[str, ...]:
    """What must match for a context to be read: the major version, and the minor one before 1.0."""
    parts = release.split(".")
    return tuple(parts[:2]) if parts[0] == "0" else tuple(parts[:1])
