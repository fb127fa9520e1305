"""What a run tells whoever keeps it: the seam's `RunHooks`, under the names our `Agent.run` has always used.

A run in memory needs none; a stored run (`approvals.worker.resumer`) must mark approved calls
as executing, durably, before any of them runs (so a crash never runs one twice
unnoticed), and append each step as it completes (so a crash loses at most one step).
"""

from __future__ import annotations

from ..seam import NO_HOOKS, NoHooks, RunHooks

__all__ = ("NO_PERSISTENCE", "NoPersistence", "RunPersistence")

RunPersistence = RunHooks
NoPersistence = NoHooks
NO_PERSISTENCE: RunPersistence = NO_HOOKS
