"""Rules of a call's life that depend on who asked: what a run does once people decided its calls."""

from __future__ import annotations

from .engines import EngineKind, get_engine
from .states import RunStatus

__all__ = ("status_once_decided",)


def status_once_decided(engine: str) -> RunStatus:
    """Where a run waiting for people goes once its last open call is decided.

    A resumable engine's run is queued for a worker (`ready`); a gate's goes on running where
    its agent runs (`running`): the agent waits for the decisions itself.
    """
    return RunStatus.READY if get_engine(engine).kind is EngineKind.RESUMABLE else RunStatus.RUNNING
