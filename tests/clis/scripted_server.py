"""The threaded HTTP server under the scripted model APIs (scripted_anthropic, scripted_responses, scripted_gemini).

A provider's module subclasses `ScriptedServer` and keeps its wire format to itself: which
requests are model turns (`_is_turn`), what a side request gets (`_side_reply`), and how each
request is answered (`_answer`, with the handler's `send_json` and `send_stream`). This module
keeps the script, records every request, and starts and stops the server on a port of its own.

Every model turn takes the next reply of the script (a callable step gets the request body and
returns the reply). With `turns_need_tools=True` only turns that offer tools do; the others get
`side_reply`. When the script runs out, every later turn gets `after_script` and is counted in
`unscripted_turns`. A step that raises is recorded in `errors` and answered with a 500.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Generic, Self, TypeVar
from urllib.parse import urlsplit

ReplyT = TypeVar("ReplyT")


@dataclass
class Recorded:
    """One request the server received."""

    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: Any
    at: float = field(default_factory=time.monotonic)


RecordedT = TypeVar("RecordedT", bound=Recorded)


class ScriptedServer(Generic[ReplyT, RecordedT]):
    """The server: start it with `with`, point the CLI at `base_url`, read `requests` afterwards."""

    thread_name = "scripted-server"
    json_content_type = "application/json"

    recorded: type[RecordedT]
    """The provider's Recorded, which each request is stored as."""
    side_text = "Scripted session"
    """The text of the default `side_reply`."""

    def __init__(
        self,
        script: Sequence[ReplyT | Callable[[dict[str, Any]], ReplyT]],
        *,
        after_script: ReplyT | None = None,
        side_reply: ReplyT | None = None,
        turns_need_tools: bool = True,
        host: str = "127.0.0.1",
    ) -> None:
        self.script = list(script)
        self.after_script = after_script or self._text("(the scripted model has nothing more to say)")
        self.side_reply = side_reply or self._text(self.side_text)
        self.turns_need_tools = turns_need_tools
        self.requests: list[RecordedT] = []
        self.unscripted_turns = 0
        self.errors: list[str] = []
        """Script steps that raised (the CLI got a 500 for them)."""
        self._host = host
        self._next = 0
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        handler = type("Handler", (ScriptedHandler,), {"api": self})
        self._server = ThreadingHTTPServer((host, 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name=self.thread_name, daemon=True)

    # -- lifecycle ------------------------------------------------------------------------------

    @property
    def root_url(self) -> str:
        return f"http://{self._host}:{self._server.server_port}"

    @property
    def base_url(self) -> str:
        return self.root_url

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    # -- what the CLI sent ------------------------------------------------------------------------

    def turns(self) -> list[dict[str, Any]]:
        """The bodies of the model turns (the requests that took a scripted reply)."""
        with self._lock:
            return [r.body for r in self.requests if self._takes_script(r)]

    def paths(self) -> list[str]:
        """`METHOD /path` of every request, in order."""
        with self._lock:
            return [f"{r.method} {r.path}" for r in self.requests]

    # -- what a provider says ---------------------------------------------------------------------

    def _text(self, answer: str) -> ReplyT:
        """A final answer of plain text."""
        raise NotImplementedError

    def _is_turn(self, request: RecordedT) -> bool:
        """Whether `request` asks for a model turn (one that may take the next scripted reply)."""
        raise NotImplementedError

    def _side_reply(self, body: dict[str, Any]) -> ReplyT:
        """The reply to a turn that does not take the script."""
        return self.side_reply

    def _answer(self, http: ScriptedHandler, request: RecordedT) -> None:
        """Answer `request` (already recorded) through `http`."""
        raise NotImplementedError

    def _json_headers(self) -> dict[str, str]:
        """More headers of every JSON answer."""
        return {}

    # -- answering ------------------------------------------------------------------------------

    def _takes_script(self, request: RecordedT) -> bool:
        body = request.body
        if not isinstance(body, dict) or not self._is_turn(request):
            return False
        return not self.turns_need_tools or bool(body.get("tools"))

    def _reply_for(self, request: RecordedT) -> ReplyT:
        body = request.body if isinstance(request.body, dict) else {}
        with self._lock:
            if not self._takes_script(request):
                return self._side_reply(body)
            if self._next >= len(self.script):
                self.unscripted_turns += 1
                return self.after_script
            step = self.script[self._next]
            self._next += 1
        return step(body) if callable(step) else step

    def _reply_or_500(self, http: ScriptedHandler, request: RecordedT, error: Callable[[str], Any]) -> ReplyT | None:
        """The reply to `request`; or, when a script step raises, None after answering 500 with `error(message)`."""
        try:
            return self._reply_for(request)
        except Exception as exc:  # a script step that could not answer: say so, loudly
            self.errors.append(repr(exc))
            http.send_json(500, error(f"scripted server: {exc!r}"))
            return None

    def _record(self, request: RecordedT) -> None:
        with self._lock:
            self.requests.append(request)

    def _new_request(self, method: str, path: str, query: str, headers: dict[str, str], body: Any) -> RecordedT:
        return self.recorded(method, path, query, headers, body)

    def _next_id(self) -> int:
        return next(self._ids)


class ScriptedHandler(BaseHTTPRequestHandler):
    """Records each request and hands it to its server's `_answer`."""

    protocol_version = "HTTP/1.1"
    api: ScriptedServer[Any, Any]

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _read_body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not raw:
            return None
        if "zstd" in (self.headers.get("Content-Encoding") or ""):
            return raw.decode("latin-1")  # not expected: Codex compresses only for OpenAI's own auth
        try:
            return json.loads(raw)
        except ValueError:
            return raw.decode("utf-8", "replace")

    def _handle(self) -> None:
        url = urlsplit(self.path)
        body = self._read_body() if self.command in ("POST", "PUT", "PATCH") else None
        request = self.api._new_request(self.command, url.path, url.query, dict(self.headers.items()), body)
        self.api._record(request)
        self.api._answer(self, request)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _handle  # noqa: N815 - the names http.server calls

    def send_json(self, status: int, payload: Any) -> None:
        """`payload` as JSON (no body for None, nor for HEAD)."""
        data = b"" if payload is None else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", self.api.json_content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in self.api._json_headers().items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def send_stream(self, content_type: str, chunks: Iterable[str], headers: Mapping[str, str] | None = None) -> None:
        """A 200 whose body is `chunks`, each flushed as it is written; the connection closes after it."""
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Cache-Control", "no-cache")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        for chunk in chunks:
            self.wfile.write(chunk.encode())
            self.wfile.flush()


def sse(data: Any, event: str | None = None, *, newline: str = "\n") -> str:
    """One server-sent event: `event: <event>` (if named), `data: <json>`, then a blank line."""
    head = f"event: {event}{newline}" if event is not None else ""
    return f"{head}data: {json.dumps(data)}{newline}{newline}"


def halves(whole: str) -> list[str]:
    """`whole` in two pieces (one if it is too short), as the APIs stream it in pieces."""
    middle = len(whole) // 2
    return [part for part in (whole[:middle], whole[middle:]) if part] or [""]
