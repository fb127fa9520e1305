"""The process conditions run in when they are not provably cheap (`approvals.policy.sandbox` starts it).

Run as a script by its path, so it imports nothing of `approvals` (only the standard library
and the CEL extension, loaded by itself as `conditions._cel` does): it is ready in tens of
milliseconds, and a new one after a kill is too.

Each request is a 4-byte big-endian length and a pickle of `(text, variables)` from the parent
(the process that started it, trusted); each answer is a length and JSON: `{"value": ...}` for
true or false, `{"other": [type, repr]}` for any other value, `{"error": [type, message, key]}`.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import pickle
import struct
import sys
from pathlib import Path
from typing import Any

_HEADER = struct.Struct(">I")
_PROGRAMS = 256
"""Compiled conditions kept (a rule set's are compiled once per process)."""


def _cel() -> Any:
    package = importlib.util.find_spec("cel")
    folders = list(package.submodule_search_locations or []) if package is not None else []
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    found = [p for p in Path(folders[0] if folders else ".").glob("cel.*") if p.name.endswith(suffixes)]
    if len(found) == 1:
        spec = importlib.util.spec_from_file_location("cel.cel", found[0])
        if spec is not None and spec.loader is not None:
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
    import cel  # pragma: no cover - only if the package's layout changed

    return cel


def _read(stream: Any, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = stream.read(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _answer(programs: dict[str, Any], cel: Any, text: str, variables: Any) -> dict[str, Any]:
    try:
        program = programs.get(text)
        if program is None:
            if len(programs) >= _PROGRAMS:
                programs.clear()
            program = programs[text] = cel.compile(text)
        value = program.execute(variables)
    except Exception as exc:
        key = exc.args[0] if isinstance(exc, KeyError) and exc.args else None
        return {"error": [type(exc).__name__, str(exc), None if key is None else str(key)]}
    if isinstance(value, bool):
        return {"value": value}
    return {"other": [type(value).__name__, repr(value)[:200]]}


def main() -> None:
    cel = _cel()
    source, sink = sys.stdin.buffer, sys.stdout.buffer
    sink.write(_HEADER.pack(0))  # ready
    sink.flush()
    programs: dict[str, Any] = {}
    while True:
        header = _read(source, _HEADER.size)
        if header is None:
            return  # the parent closed the pipe: it is gone or done with us
        body = _read(source, _HEADER.unpack(header)[0])
        if body is None:
            return
        try:
            text, variables = pickle.loads(body)  # noqa: S301 - from the parent, which started it
            answer = _answer(programs, cel, text, variables)
        except Exception as exc:  # a request it cannot read: said, not fatal
            answer = {"error": [type(exc).__name__, str(exc), None]}
        data = json.dumps(answer).encode()
        sink.write(_HEADER.pack(len(data)) + data)
        sink.flush()


if __name__ == "__main__":
    main()
