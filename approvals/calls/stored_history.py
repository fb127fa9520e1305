"""A run's messages as the store keeps them: one JSON row a message, in the format of the engine that wrote it.

The store never reads a message: it asks the history codec of the message's engine
(`approvals.calls.engines`) to write one (`stored_format`, `dump_stored`) and the codec of the
stored format to read them back (`load_stored_history`), a whole history in one parse when it
is all in one format (a resume that loads a long history pays for one parse, not one a
message).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, cast

from .engines import codec_for_format, codec_of

__all__ = ("dump_stored", "load_stored_history", "stored_format")


def stored_format(messages: Sequence[Any]) -> int:
    """The format the messages of one write are stored in: their engine's (0 for a write of none)."""
    return codec_of(messages[0]).format_version if messages else 0


def dump_stored(message: Any) -> dict[str, Any]:
    """One message as JSON-compatible data, one stored row, in its engine's JSON."""
    return codec_of(message).dump_message(message)


def load_stored_history(rows: Iterable[tuple[str | bytes | dict[str, Any], int]]) -> list[Any]:
    """Messages from stored `(JSON text, format version)` rows, in order, each read by its format's codec."""
    stored = list(rows)
    if not stored:
        return []
    first = stored[0][1]
    if all(version == first and isinstance(data, str) for data, version in stored):
        texts = cast(list[str], [data for data, _ in stored])
        return codec_for_format(first).load_array("[" + ",".join(texts) + "]")
    return [codec_for_format(version).load_message(data) for data, version in stored]
