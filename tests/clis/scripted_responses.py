"""A scripted OpenAI Responses API server for driving the real Codex CLI in tests.

Each model turn (`POST /v1/responses`) gets the next reply of a script, in the Responses API's
wire format: server-sent events when the request says `"stream": true` (Codex always does),
one JSON response object otherwise. Every request is recorded, so a test can read what the
CLI sent back: the `function_call_output` of a tool call (a hook's denial reason, or the
command's output), the tools it offered, its instructions.

    with ScriptedResponses([shell("touch x"), text("Done.")]) as api:
        ...  # point Codex at api.base_url (".../v1")
        api.function_call_outputs()  # [{"type": "function_call_output", "call_id": ..., "output": ...}]

Wire format (OpenAI's API reference, "Streaming events" of the Responses API): every event is
`event: <type>` and `data: <json>` (the JSON repeats `type` and carries a growing
`sequence_number`), then a blank line; there is no `[DONE]` sentinel. Order: `response.created`,
`response.in_progress`, then per output item `response.output_item.added`, its deltas
(`response.function_call_arguments.delta`/`.done` for a `function_call`;
`response.content_part.added`, `response.output_text.delta`/`.done`,
`response.content_part.done` for a `message`), `response.output_item.done`, and finally
`response.completed` with the whole response (`output`, `usage`).

Codex offers its shell under a name that depends on the model's family (`shell` with an argv
array, `shell_command` with a string, or `exec_command` with `cmd`): `shell(command)` is a
script step that looks at the tools the request offers and calls whichever is there.

Not every POST is a model turn: Codex may ask for side jobs (a title, a compaction summary)
without tools. With `turns_need_tools=True` (the default) only requests that offer tools take
the next scripted reply; the others get `side_reply`. When the script runs out, later turns
get `after_script` (plain text, so the CLI ends its loop) and are counted in `unscripted_turns`.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import scripted_server
from .scripted_server import ScriptedHandler, ScriptedServer, halves, sse

MODEL_ID = "gpt-5.1-codex-scripted"
"""The model the CLIs are configured with; any model a request names is answered all the same."""


@dataclass(frozen=True)
class Reply:
    """One model response: its output items (`function_call` or `message`)."""

    output: tuple[dict[str, Any], ...]

    def response(self, model: str, response_id: str, usage: Mapping[str, Any], *, done: bool) -> dict[str, Any]:
        """The response object, as `response.created` (not `done`) or `response.completed` has it."""
        return {
            "id": response_id,
            "object": "response",
            "created_at": int(time.time()),
            "status": "completed" if done else "in_progress",
            "error": None,
            "incomplete_details": None,
            "instructions": None,
            "model": model,
            "output": [dict(item) for item in self.output] if done else [],
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": dict(usage) if done else None,
        }

    def events(self, model: str, response_id: str, usage: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
        """The streamed events (without `sequence_number`, which the server adds)."""
        yield {"type": "response.created", "response": self.response(model, response_id, usage, done=False)}
        yield {"type": "response.in_progress", "response": self.response(model, response_id, usage, done=False)}
        for index, item in enumerate(self.output):
            if item["type"] == "function_call":
                yield {
                    "type": "response.output_item.added",
                    "output_index": index,
                    "item": {**item, "arguments": "", "status": "in_progress"},
                }
                for part in halves(item["arguments"]):
                    yield {
                        "type": "response.function_call_arguments.delta",
                        "item_id": item["id"],
                        "output_index": index,
                        "delta": part,
                    }
                yield {
                    "type": "response.function_call_arguments.done",
                    "item_id": item["id"],
                    "output_index": index,
                    "arguments": item["arguments"],
                }
            elif item["type"] == "message":
                yield {
                    "type": "response.output_item.added",
                    "output_index": index,
                    "item": {**item, "content": [], "status": "in_progress"},
                }
                for content_index, part in enumerate(item["content"]):
                    where = {"item_id": item["id"], "output_index": index, "content_index": content_index}
                    yield {"type": "response.content_part.added", **where, "part": {**part, "text": ""}}
                    for piece in halves(part["text"]):
                        yield {"type": "response.output_text.delta", **where, "delta": piece, "logprobs": []}
                    yield {"type": "response.output_text.done", **where, "text": part["text"], "logprobs": []}
                    yield {"type": "response.content_part.done", **where, "part": dict(part)}
            else:  # any other item whole
                yield {"type": "response.output_item.added", "output_index": index, "item": dict(item)}
            yield {"type": "response.output_item.done", "output_index": index, "item": dict(item)}
        yield {"type": "response.completed", "response": self.response(model, response_id, usage, done=True)}


def text(answer: str) -> Reply:
    """A final answer: one assistant `message` with one `output_text` part."""
    return Reply(
        (
            {
                "type": "message",
                "id": f"msg_{uuid.uuid4().hex[:24]}",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": answer, "annotations": []}],
            },
        )
    )


def function_call(name: str, arguments: Mapping[str, Any] | str, *, call_id: str | None = None) -> Reply:
    """A call of function tool `name`; `arguments` is JSON-encoded unless already a string."""
    encoded = arguments if isinstance(arguments, str) else json.dumps(dict(arguments))
    return Reply(
        (
            {
                "type": "function_call",
                "id": f"fc_{uuid.uuid4().hex[:24]}",
                "call_id": call_id or f"call_{uuid.uuid4().hex[:24]}",
                "name": name,
                "arguments": encoded,
                "status": "completed",
            },
        )
    )


SHELL_TOOLS = ("shell_command", "exec_command", "shell")
"""Codex's shell tools, in the order `shell()` prefers them."""


def offered_tools(body: Mapping[str, Any]) -> list[str]:
    """The names of the function tools a request offers."""
    names = []
    for tool in body.get("tools") or []:
        if isinstance(tool, dict):
            name = tool.get("name") or (tool.get("function") or {}).get("name")
            if name:
                names.append(str(name))
    return names


def shell(command: str, *, call_id: str | None = None, timeout_ms: int = 30_000) -> Callable[[dict[str, Any]], Reply]:
    """A script step: run `command` with whichever shell tool the request offers.

    `shell_command` takes the command as a string, `exec_command` as `cmd`, the older `shell`
    as an argv (`["bash", "-lc", command]`).
    """

    def step(body: dict[str, Any]) -> Reply:
        offered = offered_tools(body)
        if "shell_command" in offered:
            return function_call("shell_command", {"command": command, "timeout_ms": timeout_ms}, call_id=call_id)
        if "exec_command" in offered:
            return function_call("exec_command", {"cmd": command, "yield_time_ms": timeout_ms}, call_id=call_id)
        if "shell" in offered:
            return function_call(
                "shell", {"command": ["bash", "-lc", command], "timeout_ms": timeout_ms}, call_id=call_id
            )
        raise AssertionError(f"the request offers no shell tool, only {offered}")

    return step


Script = Sequence[Reply | Callable[[dict[str, Any]], Reply]]
"""Replies in order; a callable gets the request body and returns the reply."""


class Recorded(scripted_server.Recorded):
    """One request the server received."""

    @property
    def is_turn(self) -> bool:
        return self.method == "POST" and self.path.rstrip("/").endswith("/responses")


class ScriptedResponses(ScriptedServer[Reply, Recorded]):
    """The server: start it with `with`, point the CLI at `base_url`, read `requests` afterwards."""

    recorded = Recorded
    thread_name = "scripted-responses"

    @property
    def base_url(self) -> str:
        """The provider's base URL, `/v1` included (Codex appends `/responses`)."""
        return f"{self.root_url}/v1"

    # -- what the CLI sent ------------------------------------------------------------------------

    def input_items(self, kind: str) -> list[dict[str, Any]]:
        """Every `input` item of type `kind` the CLI sent, once each, in order.

        Each turn carries the whole conversation again, so an item shows up in every later turn.
        """
        found: list[dict[str, Any]] = []
        for body in self.turns():
            for item in body.get("input") or []:
                if isinstance(item, dict) and item.get("type") == kind and item not in found:
                    found.append(item)
        return found

    def function_call_outputs(self) -> list[dict[str, Any]]:
        """The `function_call_output` items (`call_id`, `output`) the CLI sent back."""
        return self.input_items("function_call_output")

    def output_for(self, call_id: str) -> str | None:
        """The output text the CLI sent back for call `call_id` (None if it sent none)."""
        for item in self.function_call_outputs():
            if item.get("call_id") == call_id:
                output = item.get("output")
                if isinstance(output, list):  # content parts
                    return "".join(str(part.get("text", "")) for part in output if isinstance(part, dict))
                return str(output)
        return None

    # -- answering ------------------------------------------------------------------------------

    def _text(self, answer: str) -> Reply:
        return text(answer)

    def _is_turn(self, request: Recorded) -> bool:
        return request.is_turn

    def _answer(self, http: ScriptedHandler, request: Recorded) -> None:
        body = request.body
        path = request.path.rstrip("/")
        if request.is_turn and isinstance(body, dict):
            self._responses(http, request, body)
        elif request.method == "GET" and path.endswith("/models"):
            http.send_json(200, {"object": "list", "data": [_model(MODEL_ID)], "models": []})
        elif request.method == "HEAD":
            http.send_json(200, None)
        else:
            message = f"{request.method} {request.path} is not scripted"
            http.send_json(404, {"error": {"message": message, "type": "invalid_request_error", "code": None}})

    def _responses(self, http: ScriptedHandler, request: Recorded, body: dict[str, Any]) -> None:
        reply = self._reply_or_500(
            http, request, lambda message: {"error": {"message": message, "type": "server_error"}}
        )
        if reply is None:
            return
        model = str(body.get("model") or MODEL_ID)
        response_id = f"resp_scripted_{self._next_id():04d}"
        usage = _usage(body, reply)
        if not body.get("stream"):
            http.send_json(200, reply.response(model, response_id, usage, done=True))
            return
        events = (
            sse({**event, "sequence_number": number}, event["type"])
            for number, event in enumerate(reply.events(model, response_id, usage))
        )
        http.send_stream("text/event-stream", events, {"x-request-id": f"req_{response_id}"})


def _usage(body: Mapping[str, Any], reply: Reply) -> dict[str, Any]:
    """A rough count (4 characters a token): enough for a CLI's budget bookkeeping."""
    input_tokens = max(1, len(json.dumps(body.get("input", []))) // 4)
    output_tokens = max(1, len(json.dumps(list(reply.output))) // 4)
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens + output_tokens,
    }


def _model(model_id: str) -> dict[str, Any]:
    return {"id": model_id, "object": "model", "created": 1_700_000_000, "owned_by": "scripted"}
