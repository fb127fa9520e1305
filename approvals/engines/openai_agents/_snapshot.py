"""A paused OpenAI Agents run as one stored document: the SDK's `RunState` JSON, versioned twice.

`Snapshot.version` is the shape of our document (`SNAPSHOT_VERSION`); inside it, the SDK's
own `RunState.to_json()` (which carries its own `$schemaVersion`) and the openai-agents
version that wrote it, so a state the installed SDK cannot read is refused in words instead
of half-restored.

The run's deps are not kept: the SDK would store a mapping context as it is, and the worker
rebuilds the deps from the run's stored data every turn anyway, so the context is restored
from the turn's deps (`context_override`), never from the document.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from agents import Agent, RunContextWrapper, RunState
from agents import __version__ as sdk_version
from agents.run_state import CURRENT_SCHEMA_VERSION, SUPPORTED_SCHEMA_VERSIONS

from ...calls.engine_state import Snapshot
from ...exceptions import UserError

__all__ = ("SNAPSHOT_VERSION", "dump_state", "load_state")

SNAPSHOT_VERSION = 1
"""The shape of our document: {"run_state": the SDK's RunState JSON, "openai_agents": the SDK version}."""


def dump_state(state: RunState[Any, Any]) -> Snapshot:
    """The run's state as a JSON document, without its context (the deps)."""
    data = state.to_json(context_serializer=lambda _: {})
    data["context"]["context"] = {}
    try:
        document = json.loads(json.dumps(data))  # a document the store can keep, and a copy the SDK no longer holds
    except (TypeError, ValueError) as exc:
        raise UserError(f"The OpenAI Agents run state cannot be stored as JSON: {exc}") from exc
    return Snapshot(version=SNAPSHOT_VERSION, data={"run_state": document, "openai_agents": sdk_version})


async def load_state(agent: Agent[Any], snapshot: Snapshot, deps: Any) -> RunState[Any, Agent[Any]]:
    """The run's state for `agent`, its context the turn's `deps`; a `UserError` for a document it cannot read."""
    if snapshot.version != SNAPSHOT_VERSION:
        raise UserError(
            f"This run's OpenAI Agents state is in document version {snapshot.version}; this version of "
            f"approvals reads version {SNAPSHOT_VERSION}. Continue the run with the approvals release that paused it."
        )
    document = snapshot.data.get("run_state")
    written_by = snapshot.data.get("openai_agents", "an unknown version")
    if not isinstance(document, dict):
        raise UserError("This run's OpenAI Agents state holds no RunState document")
    schema = document.get("$schemaVersion")
    if schema not in SUPPORTED_SCHEMA_VERSIONS:
        raise UserError(
            f"This run's OpenAI Agents state was written by openai-agents {written_by} (RunState schema "
            f"{schema}); the installed openai-agents {sdk_version} reads schemas up to {CURRENT_SCHEMA_VERSION}. "
            "Continue the run with an openai-agents release that reads it."
        )
    try:
        return await RunState.from_json(
            agent, copy.deepcopy(document), context_override=RunContextWrapper(context=deps)
        )
    except Exception as exc:
        raise UserError(
            f"The installed openai-agents {sdk_version} cannot restore this run's state "
            f"(written by openai-agents {written_by}): {exc}"
        ) from exc
