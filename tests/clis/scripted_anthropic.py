"""A scripted Anthropic Messages API server for driving real coding-agent CLIs in tests.

The server answers each model turn (`POST /v1/messages`) with the next reply of a script,
in Anthropic's wire format, streamed as server-sent events when the request says
`"stream": true` and as one JSON message otherwise. It records every request, so a test
can read what the CLI sent back (for example the `tool_result` of a denied tool call).

    with ScriptedAnthropic([tool_use("Bash", {"command": "touch x"}), text("Done.")]) as api:
        env["ANTHROPIC_BASE_URL"] = api.base_url
        ...  # run the CLI
        api.tool_results()  # the tool_result blocks the CLI sent back

Wire format (Anthropic's documentation, "Streaming messages"): each event is
`event: <type>` then `data: <json>` then a blank line, in the order `message_start`,
for each content block `content_block_start`, `content_block_delta`(s) (`text_delta`, or
`input_json_delta` with `partial_json` for a `tool_use` block, whose `content_block_start`
carries `"input": {}`), `content_block_stop`, then `message_delta` (the `stop_reason` and the
output `usage`) and `message_stop`; `ping` events may come anywhere.

Not every request is a model turn: a CLI may ask the model for side jobs (a title for the
session, a summary) with no tools. Only requests that offer tools, or all of them when
`turns_need_tools=False`, take the next reply of the script; the others get `side_reply`.
When the script runs out, every later turn gets `after_script` (a plain text answer, so
the CLI ends its loop rather than hanging) and is counted in `unscripted_turns`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import scripted_server
from .scripted_server import ScriptedHandler, ScriptedServer, halves, sse

MODEL_IDS = ("claude-sonnet-4-5-20250929", "claude-opus-4-1-20250805", "claude-haiku-4-5-20251001")
"""What `GET /v1/models` lists; any model a request names is answered all the same."""


@dataclass(frozen=True)
class Reply:
    """One assistant message: its content blocks and why it stopped."""

    content: tuple[dict[str, Any], ...]
    stop_reason: str

    def message(self, model: str, message_id: str, input_tokens: int) -> dict[str, Any]:
        """The whole message, as a non-streaming response has it."""
        return {
            "id": message_id,
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [dict(block) for block in self.content],
            "stop_reason": self.stop_reason,
            "stop_sequence": None,
            "usage": _usage(input_tokens, _output_tokens(self.content)),
        }

    def events(self, model: str, message_id: str, input_tokens: int) -> Iterator[tuple[str, dict[str, Any]]]:
        """The server-sent events of this message, in the documented order."""
        start = self.message(model, message_id, input_tokens)
        start.update(content=[], stop_reason=None, stop_sequence=None, usage=_usage(input_tokens, 1))
        yield "message_start", {"type": "message_start", "message": start}
        yield "ping", {"type": "ping"}
        for index, block in enumerate(self.content):
            if block["type"] == "tool_use":
                opening = {**block, "input": {}}
                whole = json.dumps(block["input"])
                # Split the input JSON in two, as the API sends it in pieces.
                deltas = [{"type": "input_json_delta", "partial_json": part} for part in halves(whole)]
            elif block["type"] == "text":
                opening = {**block, "text": ""}
                deltas = [{"type": "text_delta", "text": part} for part in halves(block["text"])]
            else:  # any other block whole, as its start
                opening, deltas = dict(block), []
            yield "content_block_start", {"type": "content_block_start", "index": index, "content_block": opening}
            for delta in deltas:
                yield "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
            yield "content_block_stop", {"type": "content_block_stop", "index": index}
        yield (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": self.stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": _output_tokens(self.content)},
            },
        )
        yield "message_stop", {"type": "message_stop"}


def text(answer: str) -> Reply:
    """A final answer: one text block, `stop_reason: end_turn`."""
    return Reply(({"type": "text", "text": answer},), "end_turn")


def tool_use(name: str, tool_input: Mapping[str, Any], *, id: str | None = None, say: str | None = None) -> Reply:
    """A call of tool `name` (optionally after some text), `stop_reason: tool_use`."""
    block = {"type": "tool_use", "id": id or f"toolu_{uuid.uuid4().hex[:24]}", "name": name, "input": dict(tool_input)}
    blocks = ({"type": "text", "text": say}, block) if say else (block,)
    return Reply(blocks, "tool_use")


def bash(command: str, description: str = "Run a shell command", **more: Any) -> Reply:
    """A call of Claude Code's `Bash` tool."""
    return tool_use("Bash", {"command": command, "description": description, **more})


Script = Sequence[Reply | Callable[[dict[str, Any]], Reply]]
"""Replies in order; a callable gets the request body and returns the reply."""


class Recorded(scripted_server.Recorded):
    """One request the server received."""

    @property
    def is_turn(self) -> bool:
        return self.method == "POST" and self.path.rstrip("/") == "/v1/messages"


class ScriptedAnthropic(ScriptedServer[Reply, Recorded]):
    """The server: start it with `with`, point the CLI at `base_url`, read `requests` afterwards."""

    recorded = Recorded
    thread_name = "scripted-anthropic"

    # -- what the CLI sent ------------------------------------------------------------------------

    def tool_results(self) -> list[dict[str, Any]]:
        """Every `tool_result` block the CLI sent, once each (by `tool_use_id`), in order.

        Each turn carries the whole conversation, so a result shows up again in every later
        turn; a result that changed (a resumed session answering a call anew) counts again.
        """
        found: list[dict[str, Any]] = []
        for body in self.turns():
            for message in body.get("messages") or []:
                content = message.get("content") if isinstance(message, dict) else None
                for block in content if isinstance(content, list) else []:
                    if isinstance(block, dict) and block.get("type") == "tool_result":
                        plain = {k: v for k, v in block.items() if k != "cache_control"}
                        if plain not in found:
                            found.append(plain)
        return found

    # -- answering ------------------------------------------------------------------------------

    def _text(self, answer: str) -> Reply:
        return text(answer)

    def _is_turn(self, request: Recorded) -> bool:
        return request.is_turn

    def _json_headers(self) -> dict[str, str]:
        return {"request-id": f"req_scripted_{uuid.uuid4().hex[:12]}"}

    def _answer(self, http: ScriptedHandler, request: Recorded) -> None:
        body = request.body
        route = (request.method, request.path.rstrip("/"))
        if route == ("POST", "/v1/messages") and isinstance(body, dict):
            self._messages(http, request, body)
        elif route == ("POST", "/v1/messages/count_tokens") and isinstance(body, dict):
            http.send_json(200, {"input_tokens": _input_tokens(body)})
        elif route == ("GET", "/v1/models"):
            models = [_model(m) for m in MODEL_IDS]
            http.send_json(200, {"data": models, "has_more": False, "first_id": MODEL_IDS[0], "last_id": MODEL_IDS[-1]})
        elif request.method == "GET" and request.path.startswith("/v1/models/"):
            http.send_json(200, _model(request.path.rsplit("/", 1)[1]))
        elif request.method == "HEAD":
            http.send_json(200, None)
        else:
            http.send_json(404, _error("not_found_error", f"{request.method} {request.path} is not scripted"))

    def _messages(self, http: ScriptedHandler, request: Recorded, body: dict[str, Any]) -> None:
        reply = self._reply_or_500(http, request, lambda message: _error("api_error", message))
        if reply is None:
            return
        model = str(body.get("model") or MODEL_IDS[0])
        message_id = f"msg_scripted_{self._next_id():04d}"
        tokens = _input_tokens(body)
        if not body.get("stream"):
            http.send_json(200, reply.message(model, message_id, tokens))
            return
        events = (sse(data, event) for event, data in reply.events(model, message_id, tokens))
        http.send_stream("text/event-stream; charset=utf-8", events, {"request-id": f"req_{message_id}"})


def _usage(input_tokens: int, output_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def _input_tokens(body: Mapping[str, Any]) -> int:
    """A rough count (4 characters a token): enough for a CLI's budget bookkeeping."""
    return max(1, len(json.dumps(body.get("messages", []))) // 4)


def _output_tokens(blocks: Iterable[Mapping[str, Any]]) -> int:
    return max(1, len(json.dumps(list(blocks))) // 4)


def _model(model_id: str) -> dict[str, Any]:
    return {"type": "model", "id": model_id, "display_name": model_id, "created_at": "2025-01-01T00:00:00Z"}


def _error(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}
