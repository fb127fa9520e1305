"""Local HTTP servers that speak the OpenAI and Anthropic wire formats, for adapter tests.

Each server runs `http.server.ThreadingHTTPServer` on 127.0.0.1 (port 0) in a background
thread, answers the provider's endpoint with responses queued by the test, and records
every request it receives (path, headers, parsed JSON body). The real SDK clients talk to
it over real HTTP, so the tests check exactly what would go over the wire.

They stand in for what no local server can show (hosted providers' error bodies, rate
limits, Anthropic). So that they do not simply agree with our adapters, every request
body is checked against the provider's documented request format before any queued
answer is given: the SDKs' request types (generated from each provider's API
specification), unknown top-level fields (OpenAI: "Unrecognized request argument
supplied"), and the documented rules across messages (a tool message answers an earlier
assistant tool call; Anthropic: tool results right after their tool_use turn, first in
their message, and thinking blocks kept on a tool-use turn when thinking is enabled).
A request that breaks them gets the provider's 400 `invalid_request_error`.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from anthropic.types import message_create_params
from openai.types.chat import completion_create_params
from pydantic import TypeAdapter, ValidationError

__all__ = (
    "RecordedRequest",
    "WireServer",
    "anthropic_error",
    "anthropic_message",
    "anthropic_server",
    "closed_port_url",
    "openai_completion",
    "openai_error",
    "openai_server",
)


@dataclass
class RecordedRequest:
    """One request as the server received it."""

    method: str
    path: str
    headers: dict[str, str]
    """Header names lower-cased."""
    body: Any
    """The JSON body, parsed."""


@dataclass
class ScriptedResponse:
    """One queued answer."""

    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    """Seconds to wait before answering (to provoke client timeouts)."""


class WireServer:
    """A scripted fake provider: `queue()` answers, then read `requests` / `last_body`."""

    def __init__(self, *, provider: str, endpoint: str, prefix: str) -> None:
        self.provider = provider
        self.endpoint = endpoint
        self.requests: list[RecordedRequest] = []
        self._responses: deque[ScriptedResponse] = deque()
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.02},
            name=f"{provider}-wire-server",
            daemon=True,
        )
        host, port = self._httpd.server_address[:2]
        self.base_url = f"http://{host!s}:{port}{prefix}"

    def queue(self, body: Any, *, status: int = 200, headers: dict[str, str] | None = None, delay: float = 0.0) -> None:
        """Answer the next request with `body` as JSON (bytes: as they are, to send a broken body)."""
        with self._lock:
            self._responses.append(ScriptedResponse(status, body, dict(headers or {}), delay))

    @property
    def last_body(self) -> Any:
        """The JSON body of the most recent request."""
        assert self.requests, "the server received no request"
        return self.requests[-1].body

    def _answer(self, request: RecordedRequest) -> ScriptedResponse:
        """Record the request; refuse it as the real API would, or pop the next queued answer."""
        with self._lock:
            self.requests.append(request)
        refusal = self._refusal(request)
        if refusal is not None:
            return refusal
        with self._lock:
            if self._responses:
                return self._responses.popleft()
        return self._error(500, "api_error", "the test queued no response for this request")

    def _refusal(self, request: RecordedRequest) -> ScriptedResponse | None:
        if request.path != self.endpoint:
            return self._error(404, "not_found_error", f"Unknown request URL: POST {request.path}")
        if self.provider == "openai" and not request.headers.get("authorization", "").startswith("Bearer "):
            return self._error(401, "invalid_request_error", "You didn't provide an API key.")
        if self.provider == "anthropic":
            if not (request.headers.get("x-api-key") or request.headers.get("authorization")):
                return self._error(401, "authentication_error", "x-api-key header is required")
            if not request.headers.get("anthropic-version"):
                return self._error(400, "invalid_request_error", "anthropic-version: header is required")
        check = openai_request_problem if self.provider == "openai" else anthropic_request_problem
        problem = check(request.body)
        if problem is not None:
            return self._error(400, "invalid_request_error", problem)
        return None

    def _error(self, status: int, error_type: str, message: str) -> ScriptedResponse:
        if self.provider == "anthropic":
            return ScriptedResponse(status, anthropic_error(error_type, message))
        return ScriptedResponse(status, openai_error(error_type, message))

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


def _make_handler(server: WireServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        # HTTP/1.0: one request per connection, so no keep-alive socket outlives a test.
        protocol_version = "HTTP/1.0"

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            body = json.loads(raw) if raw else None
            headers = {name.lower(): value for name, value in self.headers.items()}
            path = self.path.split("?", 1)[0]
            self._send(server._answer(RecordedRequest("POST", path, headers, body)))

        def _send(self, response: ScriptedResponse) -> None:
            if response.delay:
                time.sleep(response.delay)
            body = response.body
            payload = body if isinstance(body, bytes) else json.dumps(body).encode()  # bytes: sent as they are
            self.send_response(response.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            request_id_header = "request-id" if server.provider == "anthropic" else "x-request-id"
            self.send_header(request_id_header, f"req_{len(server.requests):04d}")
            for name, value in response.headers.items():
                self.send_header(name, value)
            self.end_headers()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the client gave up (timeouts)
                self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            """Keep the test output quiet."""

    return Handler


@contextmanager
def openai_server() -> Iterator[WireServer]:
    """A fake OpenAI-compatible server; its `base_url` ends in `/v1`, like the real one."""
    server = WireServer(provider="openai", endpoint="/v1/chat/completions", prefix="/v1")
    server.start()
    try:
        yield server
    finally:
        server.close()


@contextmanager
def anthropic_server() -> Iterator[WireServer]:
    """A fake Anthropic server; the SDK appends `/v1/messages` to its `base_url`."""
    server = WireServer(provider="anthropic", endpoint="/v1/messages", prefix="")
    server.start()
    try:
        yield server
    finally:
        server.close()


# --- the documented request formats -----------------------------------------------------

_openai_request = TypeAdapter(completion_create_params.CompletionCreateParamsNonStreaming)
_anthropic_request = TypeAdapter(message_create_params.MessageCreateParamsNonStreaming)


def _typed_problem(adapter: TypeAdapter[Any], body: Any) -> str | None:
    """The first way `body` does not fit the SDK's request type (its iterables validated too)."""
    try:
        _consume(adapter.validate_python(body))
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        return f"{'.'.join(map(str, first['loc']))}: {first['msg']}"
    return None


def _consume(value: Any) -> Any:
    """Walk a validated value: pydantic validates `Iterable` fields lazily, as they are read."""
    if isinstance(value, Iterator):
        return [_consume(item) for item in value]
    if isinstance(value, dict):
        return {key: _consume(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_consume(item) for item in value]
    return value


def openai_request_problem(body: Any) -> str | None:
    """Why OpenAI would refuse this chat-completions body, or None."""
    if not isinstance(body, dict):
        return "We could not parse the JSON body of your request."
    known = completion_create_params.CompletionCreateParamsNonStreaming.__annotations__
    unknown = sorted(set(body) - set(known))
    if unknown:
        return f"Unrecognized request argument supplied: {', '.join(unknown)}"
    problem = _typed_problem(_openai_request, body)
    if problem is not None:
        return problem
    open_calls: set[str] = set()
    for index, message in enumerate(body["messages"]):
        role = message["role"]
        if role == "assistant":
            if message.get("content") is None and not message.get("tool_calls"):
                return f"messages.[{index}].content: content is required unless tool_calls is specified"
            open_calls = {call["id"] for call in message.get("tool_calls") or []}
        elif role == "tool":
            if message["tool_call_id"] not in open_calls:
                return (
                    f"Invalid parameter: messages with role 'tool' must be a response to a preceeding "
                    f"message with 'tool_calls' (messages.[{index}].tool_call_id)"
                )
        else:
            open_calls = set()
    choice = body.get("tool_choice")
    if choice is not None and not body.get("tools"):
        return "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified."
    if body.get("parallel_tool_calls") is not None and not body.get("tools"):
        return "Invalid value for 'parallel_tool_calls': only allowed when 'tools' are specified."
    if "max_tokens" in body and "max_completion_tokens" in body:
        return "max_tokens and max_completion_tokens cannot both be set"
    return None


def anthropic_request_problem(body: Any) -> str | None:
    """Why the Messages API would refuse this body, or None."""
    if not isinstance(body, dict):
        return "Could not parse the JSON body of your request."
    problem = _typed_problem(_anthropic_request, body)
    if problem is not None:
        return problem
    messages = body["messages"]
    thinking = (body.get("thinking") or {}).get("type") in ("enabled", "adaptive")
    for index, message in enumerate(messages):
        blocks = message["content"] if isinstance(message["content"], list) else []
        if message["role"] != "assistant":
            continue
        uses = [b["id"] for b in blocks if b["type"] == "tool_use"]
        if not uses:
            continue
        if thinking and blocks[0]["type"] not in ("thinking", "redacted_thinking"):
            return (
                f"messages.{index}.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
                f"`{blocks[0]['type']}`. When `thinking` is enabled, a final `assistant` message must start "
                "with a thinking block."
            )
        following = messages[index + 1] if index + 1 < len(messages) else None
        if following is None:
            continue
        answered = following["content"] if isinstance(following["content"], list) else []
        results = [b.get("tool_use_id") for b in answered if b["type"] == "tool_result"]
        if set(uses) - set(results):
            return (
                f"messages.{index + 1}: `tool_use` ids were found without `tool_result` blocks immediately "
                f"after: {', '.join(sorted(set(uses) - set(results)))}. Each `tool_use` block must have a "
                "corresponding `tool_result` block in the next message."
            )
        kinds = [b["type"] for b in answered]
        if kinds[: len(results)] != ["tool_result"] * len(results):
            return f"messages.{index + 1}: tool_result blocks must come first in the content of their message"
    return None


def closed_port_url(prefix: str = "") -> str:
    """A loopback URL on which nothing listens (the port was just released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}{prefix}"


# --- OpenAI chat-completions shapes -------------------------------------------------------


def openai_completion(
    *,
    content: str | None = None,
    tool_calls: list[tuple[str, str, str]] | None = None,
    model: str = "gpt-4o-mini-2024-07-18",
    finish_reason: str | None = None,
    prompt_tokens: int = 11,
    completion_tokens: int = 7,
) -> dict[str, Any]:
    """A `chat.completion` object; `tool_calls` are `(id, name, arguments JSON)`."""
    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None, "annotations": []}
    if tool_calls:
        message["tool_calls"] = [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
            for call_id, name, arguments in tool_calls
        ]
    return {
        "id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT",
        "object": "chat.completion",
        "created": 1741569952,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": finish_reason or ("tool_calls" if tool_calls else "stop"),
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
        },
        "service_tier": "default",
        "system_fingerprint": "fp_06737a9306",
    }


def openai_error(error_type: str, message: str, *, code: str | None = None, param: str | None = None) -> dict[str, Any]:
    """OpenAI's error body: `{"error": {"message", "type", "param", "code"}}`."""
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}


# --- Anthropic Messages shapes --------------------------------------------------------------


def anthropic_message(
    *,
    text: str | None = None,
    tool_uses: list[tuple[str, str, dict[str, Any]]] | None = None,
    model: str = "claude-sonnet-5-5-20260512",
    stop_reason: str | None = None,
    input_tokens: int = 21,
    output_tokens: int = 9,
    cache_read_input_tokens: int = 0,
    cache_creation_input_tokens: int = 0,
) -> dict[str, Any]:
    """A `message` object; `tool_uses` are `(id, name, input)`."""
    content: list[dict[str, Any]] = []
    if text is not None:
        content.append({"type": "text", "text": text})
    for call_id, name, tool_input in tool_uses or []:
        content.append({"type": "tool_use", "id": call_id, "name": name, "input": tool_input})
    return {
        "id": "msg_013Zva2CMHLNnXjNJJKqJ2EF",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason or ("tool_use" if tool_uses else "end_turn"),
        "stop_sequence": None,
        "usage": {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "cache_creation_input_tokens": cache_creation_input_tokens,
            "cache_read_input_tokens": cache_read_input_tokens,
            "service_tier": "standard",
        },
    }


def anthropic_error(error_type: str, message: str) -> dict[str, Any]:
    """Anthropic's error body: `{"type": "error", "error": {"type", "message"}, "request_id"}`."""
    return {
        "type": "error",
        "error": {"type": error_type, "message": message},
        "request_id": "req_011CSHoEeqs5C35K2UUqR7Fy",
    }
