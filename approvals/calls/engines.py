"""The engines' directory: what an engine tells the core, and the registry that finds engines by name.

It lives with the call lifecycle, below the store, because a call's rules depend on which kind
of engine asked (`calls.rules`: a gate's run keeps running, a resumable one's is queued) and the
store asks it too; it imports no engine. The built-in engines register themselves when
`approvals.engines` is first imported, which a lookup that misses does itself. What a
resumable engine implements beyond this is `approvals.engines.seam`.

An engine is a small adapter. A resumable one brings a history codec (its messages stored
in its own JSON, under its own format id) and turns the agents it knows into something the
worker can run; a gate has no history: its caller waits for decisions and settles its calls
through the call lifecycle (`approvals.calls`). Engines are registered by name; the
built-in optional ones (pydantic-ai) are registered by import path, so nothing of theirs is
imported until a run or a stored history of theirs is met.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol, cast, runtime_checkable

from ..exceptions import UserError

if TYPE_CHECKING:
    from ..engines.view import ModelRequest, ModelResponse

__all__ = (
    "Engine",
    "EngineKind",
    "HistoryCodec",
    "adopting_engines",
    "codec_for_format",
    "codec_of",
    "edit_refusal",
    "engine_for_format",
    "get_engine",
    "register_engine",
    "registered_engines",
)


class EngineKind(StrEnum):
    """Who continues a run once its calls are decided."""

    RESUMABLE = "resumable"
    """Our worker, from the stored history."""
    GATE = "gate"
    """The agent itself, which runs elsewhere and waits for the decisions."""


@runtime_checkable
class HistoryCodec(Protocol):
    """How a resumable engine's messages are stored: one JSON object a message, under one format id."""

    @property
    def format_version(self) -> int:
        """The id its messages are stored under (`messages.format_version`): ours are 1 and up, others' 1000 and up."""
        ...

    def dump_message(self, message: Any) -> dict[str, Any]:
        """One message as JSON-compatible data (one stored row)."""
        ...

    def load_array(self, array: str | bytes) -> list[Any]:
        """Stored messages from one JSON array of them."""
        ...

    def load_message(self, data: dict[str, Any] | str | bytes) -> Any:
        """One stored message."""
        ...

    def view(self, messages: Iterable[Any]) -> list[ModelRequest | ModelResponse]:
        """The messages in the view model (`approvals.engines.view`, see `approvals.engines.seam`),
        read-only: for the run page, the API and the engine's answers to the worker (which calls wait, what the
        approved calls came to). Messages already in it pass through unchanged."""
        ...

    def owns(self, message: object) -> bool:
        """Whether `message` is one of this engine's messages (so stored with this codec)."""
        ...


class Engine(Protocol):
    """An engine as the core sees it."""

    @property
    def name(self) -> str:
        """What it is registered as, and stored with each of its runs."""
        ...

    @property
    def kind(self) -> EngineKind:
        """Who continues its runs: our worker (resumable), or its own agent (a gate)."""
        ...

    @property
    def codec(self) -> HistoryCodec | None:
        """The history codec of a resumable engine; None for a gate."""
        ...

    def adopt(self, candidate: object, *, name: str | None = None) -> Any | None:
        """`candidate` as an agent the worker can run, when it is one of this engine's; else None.

        `name` names an agent that has none of its own yet (found by import path, say).
        """
        ...


@dataclass(frozen=True)
class _Lazy:
    """An engine known by its import path (`module:attribute`), imported when first needed."""

    path: str
    formats: tuple[int, ...]
    available: Callable[[], bool]
    """Whether it is worth importing now (its library is loaded), for adopting agents and owning messages."""
    extra: str | None
    """The distribution extra that installs what it needs, for the error when it cannot be imported."""
    cannot_edit: str | None
    """Why its runs cannot run a call with a reviewer's edited arguments (`edit_refusal`); None: they can."""


_engines: dict[str, Engine] = {}
_lazy: dict[str, _Lazy] = {}
_codec_by_type: dict[type, HistoryCodec] = {}
"""Which codec owns messages of a type, once asked (`codec_of`); forgotten whenever an engine is registered."""
BUILT_INS = "approvals.engines"
"""The package whose import registers the built-in engines (native, the gates, pydantic-ai by path)."""


def _with_built_ins() -> None:
    """Register the built-in engines, if nothing has imported them yet (a no-op once they are)."""
    if BUILT_INS not in sys.modules:
        importlib.import_module(BUILT_INS)


def register_engine(
    engine: Engine | str,
    *,
    name: str | None = None,
    formats: Sequence[int] = (),
    available: Callable[[], bool] | None = None,
    extra: str | None = None,
    cannot_edit: str | None = None,
) -> None:
    """Make an engine known by its name: the engine itself, or its import path (`module:attribute`) with
    the `name` and history `formats` it will have, imported on first use.

    A lazy engine is imported for a stored history in one of its `formats`, when asked for by
    name, and, once `available()` says its library is loaded, to adopt an agent or own a
    message. `extra` names what to install when the import fails (`approvals[extra]`).
    `cannot_edit` says why a lazy engine's runs cannot run an edited call, known without
    importing it (an engine object says it with its own `cannot_edit` attribute).
    """
    _codec_by_type.clear()
    if isinstance(engine, str):
        if not name:
            raise ValueError("an engine registered by import path needs its name")
        if name in _engines:
            raise UserError(f"Another engine is already registered as {name!r}")
        _lazy[name] = _Lazy(engine, tuple(formats), available or (lambda: True), extra, cannot_edit)
        return
    existing = _engines.get(engine.name)
    if existing is not None and existing is not engine:
        raise UserError(f"Another engine is already registered as {engine.name!r}")
    _engines[engine.name] = engine
    _lazy.pop(engine.name, None)


def get_engine(name: str) -> Engine:
    """The engine registered as `name`; a `UserError` says what to install when it cannot be loaded."""
    engine = _engines.get(name)
    if engine is not None:
        return engine
    if name not in _lazy:
        _with_built_ins()
        if name in _engines:
            return _engines[name]
    lazy = _lazy.get(name)
    if lazy is None:
        raise UserError(f"No engine named {name!r} is registered (known: {', '.join(registered_engines())})")
    module_name, _, attribute = lazy.path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UserError(
            f"The {name!r} engine cannot be loaded ({exc}); install its extra: approvals[{lazy.extra or name}]"
        ) from exc
    loaded: Engine = getattr(module, attribute)
    declared = set(lazy.formats)
    stored = {loaded.codec.format_version} if loaded.codec is not None else set()
    if loaded.name != name or not declared <= stored:
        raise UserError(
            f"{lazy.path} is engine {loaded.name!r} storing formats {sorted(stored)}, "
            f"not {name!r} storing {sorted(declared)} as registered"
        )
    register_engine(loaded)
    return loaded


def edit_refusal(name: str) -> str | None:
    """Why runs of the engine registered as `name` cannot run a call with edited arguments; None: they can.

    Some frameworks run a call only as their model made it (OpenAI Agents): for their calls the
    inbox offers approve, deny and answer, never an edit. Read without importing a lazy engine,
    so a page of calls costs no import; an unknown engine (a run of one no longer registered) can edit.
    """
    _with_built_ins()
    engine = _engines.get(name)
    if engine is not None:
        return cast(str | None, getattr(engine, "cannot_edit", None))
    lazy = _lazy.get(name)
    return None if lazy is None else lazy.cannot_edit


def registered_engines() -> list[str]:
    """Every engine's name, loaded or not."""
    _with_built_ins()
    return sorted({*_engines, *_lazy})


def engine_for_format(format_version: int) -> Engine:
    """The engine whose codec stores messages in `format_version`."""
    _with_built_ins()
    for engine in list(_engines.values()):
        if engine.codec is not None and engine.codec.format_version == format_version:
            return engine
    for name, lazy in list(_lazy.items()):
        if format_version in lazy.formats:
            return get_engine(name)
    raise UserError(f"No registered engine stores messages in format {format_version}")


def codec_for_format(format_version: int) -> HistoryCodec:
    """The codec that reads messages stored in `format_version`."""
    codec = engine_for_format(format_version).codec
    assert codec is not None, "an engine with a history format has a codec"
    return codec


def adopting_engines() -> Iterator[Engine]:
    """The engines that may recognise an agent (or own a message) now: the loaded ones first, then each
    lazy one whose library is loaded, imported only when reached."""
    _with_built_ins()
    yield from list(_engines.values())
    for name, lazy in list(_lazy.items()):
        if lazy.available():
            yield get_engine(name)


def codec_of(message: object) -> HistoryCodec:
    """The codec of the engine `message` belongs to (asked once per message type)."""
    codec = _codec_by_type.get(type(message))
    if codec is not None:
        return codec
    for engine in adopting_engines():
        codec = engine.codec
        if codec is not None and codec.owns(message):
            _codec_by_type[type(message)] = codec
            return codec
    raise UserError(f"No registered engine stores messages like {type(message).__name__}")
