"""The engines' directory under the name the engines use: it lives in `approvals.calls.engines`, below the store,
so the call rules and the store can ask which kind of engine a run belongs to without importing any engine."""

from ..calls.engines import (
    Engine,
    EngineKind,
    HistoryCodec,
    adopting_engines,
    codec_for_format,
    codec_of,
    engine_for_format,
    get_engine,
    register_engine,
    registered_engines,
)

__all__ = (
    "Engine",
    "EngineKind",
    "HistoryCodec",
    "adopting_engines",
    "codec_for_format",
    "codec_of",
    "engine_for_format",
    "get_engine",
    "register_engine",
    "registered_engines",
)
