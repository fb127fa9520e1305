"""Function schemas already built, reused while their function lives: building one is most of `Tool(fn)`."""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._docstrings import DocstringFormat

if TYPE_CHECKING:
    from ._schema import FunctionSchema

__all__ = ("SCHEMA_CACHE", "Options", "SchemaCache")


Options = tuple[bool | None, DocstringFormat, bool]
"""What `function_schema` is asked besides the function: takes_ctx, docstring_format, require_parameter_descriptions."""


class SchemaCache:
    """Function schemas already built, kept as long as their function lives.

    Keyed weakly on the function object, then on the options that shape the result. An entry
    is served only while the function keeps the docstring, defaults and annotations it was
    built from, since those may be reassigned. Failures are never kept: a forward reference
    may resolve later.
    """

    def __init__(self) -> None:
        self._entries: weakref.WeakKeyDictionary[Any, dict[Options, tuple[tuple[Any, ...], FunctionSchema]]] = (
            weakref.WeakKeyDictionary()
        )

    def get(self, function: Callable[..., Any], options: Options) -> FunctionSchema | None:
        try:
            entry = self._entries.get(function, {}).get(options)
        except TypeError:  # not hashable, or not weakly referable: described afresh each time
            return None
        if entry is None or not _same(entry[0], _fingerprint(function)):
            return None
        return entry[1]

    def put(self, function: Callable[..., Any], options: Options, built: FunctionSchema) -> None:
        with contextlib.suppress(TypeError):
            self._entries.setdefault(function, {})[options] = (_fingerprint(function), built)


def _fingerprint(function: Callable[..., Any]) -> tuple[Any, ...]:
    """What can be reassigned on a function after it was described."""
    return (
        getattr(function, "__doc__", None),
        getattr(function, "__defaults__", None),
        getattr(function, "__kwdefaults__", None),
        dict(getattr(function, "__annotations__", None) or {}),
    )


def _same(built_from: tuple[Any, ...], now: tuple[Any, ...]) -> bool:
    try:
        return bool(built_from == now)
    except Exception:  # a default whose `==` does not give a bool (an array): described afresh
        return False


SCHEMA_CACHE = SchemaCache()
