"""A scripted Gemini API server for driving the real Gemini CLI in tests.

Each model turn (`POST /v1beta/models/<model>:streamGenerateContent?alt=sse`) gets the next reply
of a script, in the Gemini API's wire format; every request is recorded, so a test can read
what the CLI sent back (the `functionResponse` of a tool call: a hook's denial reason, or the
command's output).

    with ScriptedGemini([shell("touch x"), text("Done.")]) as api:
        env["GOOGLE_GEMINI_BASE_URL"] = api.base_url
        ...  # run the CLI
        api.function_responses()  # [{"id": ..., "name": "run_shell_command", "response": {...}}]

Wire format (the Gemini API reference, `models.streamGenerateContent` and `generateContent`):
the request is `{"contents": [{"role": "user"|"model", "parts": [...]}], "tools":
[{"functionDeclarations": [...]}], "systemInstruction": ..., "generationConfig": ...}`; a
response is a `GenerateContentResponse`, `{"candidates": [{"content": {"role": "model",
"parts": [...]}, "finishReason": "STOP", "index": 0}], "usageMetadata": {...},
"modelVersion": ..., "responseId": ...}`. With `alt=sse` the stream is server-sent events
whose `data:` is one `GenerateContentResponse` each (the chunks' parts add up; the last one
carries `finishReason`), with no `[DONE]` sentinel. A tool call is a part
`{"functionCall": {"name", "args", "id"?}}`; the CLI answers it in the next request with a part
`{"functionResponse": {"name", "response", "id"?}}`.

Not every request is a model turn. Before a turn the CLI's model router asks a small model
(non-streaming `generateContent`, JSON mode) which model to use, and it may ask other JSON
questions (is the next speaker the user?) or for summaries. Only streamed requests that offer
tools take the next scripted reply (`turns_need_tools`); a JSON-mode request gets an object
built from its response schema (`json_answers` fills known keys: the router's `model_choice`,
`next_speaker`); anything else gets `side_reply`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from . import scripted_server
from .scripted_server import ScriptedHandler, ScriptedServer, sse

MODEL_ID = "gemini-2.5-flash"
"""What `GET /v1beta/models` lists; any model a request names is answered all the same."""
SHELL_TOOL = "run_shell_command"
"""The Gemini CLI's shell tool: `{"command": str, "description"?: str, "dir_path"?: str}`."""

JSON_ANSWERS: dict[str, Any] = {
    "model_choice": "flash",  # the model router's classifier (older releases)
    "complexity_score": 10,  # the model router's numerical classifier (0.61: 1-100, low means a small model)
    "next_speaker": "user",  # "should the model speak next?" check: no, the turn is over
    "reasoning": "Scripted answer.",
}
"""Values for known keys of JSON-mode side requests; other string keys get "scripted"."""


@dataclass(frozen=True)
class Reply:
    """One model turn: the parts of its content and why it finished."""

    parts: tuple[dict[str, Any], ...]
    finish_reason: str = "STOP"

    def chunks(self, model: str, response_id: str, usage: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The streamed `GenerateContentResponse`s: text split in two, the last with finishReason."""
        pieces: list[dict[str, Any]] = []
        for part in self.parts:
            if "text" in part and len(part["text"]) > 1:
                middle = len(part["text"]) // 2
                pieces += [{**part, "text": part["text"][:middle]}, {**part, "text": part["text"][middle:]}]
            else:
                pieces.append(dict(part))
        chunks = []
        for index, piece in enumerate(pieces):
            last = index == len(pieces) - 1
            candidate: dict[str, Any] = {"content": {"role": "model", "parts": [piece]}, "index": 0}
            if last:
                candidate["finishReason"] = self.finish_reason
            chunk: dict[str, Any] = {"candidates": [candidate], "modelVersion": model, "responseId": response_id}
            if last:
                chunk["usageMetadata"] = dict(usage)
            chunks.append(chunk)
        return chunks

    def response(self, model: str, response_id: str, usage: Mapping[str, Any]) -> dict[str, Any]:
        """The whole `GenerateContentResponse` (non-streaming)."""
        return {
            "candidates": [
                {
                    "content": {"role": "model", "parts": [dict(p) for p in self.parts]},
                    "finishReason": self.finish_reason,
                    "index": 0,
                }
            ],
            "usageMetadata": dict(usage),
            "modelVersion": model,
            "responseId": response_id,
        }


def text(answer: str) -> Reply:
    """A final answer: one text part, `finishReason: STOP`."""
    return Reply(({"text": answer},))


def function_call(name: str, args: Mapping[str, Any], *, id: str | None = None, say: str | None = None) -> Reply:
    """A call of tool `name` with `args` (optionally after some text).

    `id` is sent as the call's `id` when given (the CLI then echoes it in its
    `functionResponse`); without it the CLI makes up an id of its own.
    """
    call: dict[str, Any] = {"name": name, "args": dict(args)}
    if id is not None:
        call["id"] = id
    parts = ({"text": say}, {"functionCall": call}) if say else ({"functionCall": call},)
    return Reply(parts)


def shell(command: str, description: str = "Run a shell command", *, id: str | None = None, **more: Any) -> Reply:
    """A call of the Gemini CLI's `run_shell_command` tool."""
    return function_call(SHELL_TOOL, {"command": command, "description": description, **more}, id=id)


Script = Sequence[Reply | Callable[[dict[str, Any]], Reply]]
"""Replies in order; a callable gets the request body and returns the reply."""


class Recorded(scripted_server.Recorded):
    """One request the server received."""

    @property
    def model(self) -> str | None:
        """The model named in the path (`/v1beta/models/<model>:<method>`)."""
        tail = self.path.rsplit("/models/", 1)
        return tail[1].split(":", 1)[0] if len(tail) == 2 else None

    @property
    def method_name(self) -> str | None:
        """`streamGenerateContent`, `generateContent`, `countTokens`, ... (after the colon)."""
        return self.path.rsplit(":", 1)[1] if ":" in self.path.rsplit("/", 1)[-1] else None


class ScriptedGemini(ScriptedServer[Reply, Recorded]):
    """The server: start it with `with`, point the CLI at `base_url`, read `requests` afterwards."""

    recorded = Recorded
    thread_name = "scripted-gemini"
    side_text = "Scripted."
    json_content_type = "application/json; charset=UTF-8"

    def __init__(self, script: Script, *, json_answers: Mapping[str, Any] | None = None, **options: Any) -> None:
        """`options`: those of ScriptedServer (`after_script`, `side_reply`, `turns_need_tools`, `host`)."""
        super().__init__(script, **options)
        self.json_answers = {**JSON_ANSWERS, **(json_answers or {})}

    @property
    def base_url(self) -> str:
        """For `GOOGLE_GEMINI_BASE_URL` (the CLI appends `/v1beta/models/...`)."""
        return self.root_url

    # -- what the CLI sent ------------------------------------------------------------------------

    def parts(self, kind: str) -> list[dict[str, Any]]:
        """Every part holding `kind` (`functionCall`, `functionResponse`, `text`) the CLI sent, once each.

        Each turn carries the whole conversation again, so a part shows up in every later turn.
        """
        found: list[dict[str, Any]] = []
        for body in self.turns():
            for content in body.get("contents") or []:
                for part in content.get("parts") or [] if isinstance(content, dict) else []:
                    if isinstance(part, dict) and kind in part and part[kind] not in found:
                        found.append(part[kind])
        return found

    def function_responses(self) -> list[dict[str, Any]]:
        """The `functionResponse`s (`name`, `response`, `id`) the CLI sent back, in order."""
        return self.parts("functionResponse")

    # -- answering ------------------------------------------------------------------------------

    def _text(self, answer: str) -> Reply:
        return text(answer)

    def _is_turn(self, request: Recorded) -> bool:
        return request.method_name == "streamGenerateContent"

    def _side_reply(self, body: dict[str, Any]) -> Reply:
        config = body.get("generationConfig") or {}
        if config.get("responseMimeType") == "application/json":
            schema = config.get("responseJsonSchema") or config.get("responseSchema") or {}
            return text(json.dumps(_fill(schema, self.json_answers)))
        return self.side_reply

    def _answer(self, http: ScriptedHandler, request: Recorded) -> None:
        body = request.body
        method = request.method_name
        if request.method == "POST" and method in ("streamGenerateContent", "generateContent"):
            self._generate(http, request, stream=method == "streamGenerateContent")
        elif request.method == "POST" and method == "countTokens":
            http.send_json(200, {"totalTokens": _prompt_tokens(body if isinstance(body, dict) else {})})
        elif request.method == "GET" and request.path.rstrip("/").endswith("/models"):
            http.send_json(200, {"models": [_model(MODEL_ID)]})
        elif request.method == "GET" and request.model:
            http.send_json(200, _model(request.model))
        else:
            http.send_json(404, _error(404, f"{request.method} {request.path} is not scripted", "NOT_FOUND"))

    def _generate(self, http: ScriptedHandler, request: Recorded, *, stream: bool) -> None:
        reply = self._reply_or_500(http, request, lambda message: _error(500, message, "INTERNAL"))
        if reply is None:
            return
        body = request.body if isinstance(request.body, dict) else {}
        model = request.model or MODEL_ID
        response_id = f"scripted-{self._next_id():04d}"
        usage = _usage(body, reply)
        if not stream:
            http.send_json(200, reply.response(model, response_id, usage))
            return
        chunks = reply.chunks(model, response_id, usage)
        if "sse" in parse_qs(request.query).get("alt", []):
            http.send_stream("text/event-stream", (sse(chunk, newline="\r\n") for chunk in chunks))
        else:  # without alt=sse the stream is one JSON array
            http.send_stream("application/json", [json.dumps(chunks)])


def _fill(schema: Mapping[str, Any], answers: Mapping[str, Any], key: str | None = None) -> Any:
    """A value matching a JSON-mode request's schema, taking known keys from `answers`."""
    if key is not None and key in answers:
        return answers[key]
    kind = str(schema.get("type", "object")).lower()
    if schema.get("enum"):
        return schema["enum"][0]
    if kind == "object":
        properties = schema.get("properties") or {}
        return {name: _fill(sub, answers, name) for name, sub in properties.items()}
    if kind == "array":
        return []
    if kind in ("number", "integer"):
        return schema.get("minimum", 1)
    if kind == "boolean":
        return False
    return "scripted"


def _prompt_tokens(body: Mapping[str, Any]) -> int:
    """A rough count (4 characters a token): enough for a CLI's budget bookkeeping."""
    return max(1, len(json.dumps(body.get("contents", []))) // 4)


def _usage(body: Mapping[str, Any], reply: Reply) -> dict[str, Any]:
    prompt = _prompt_tokens(body)
    output = max(1, len(json.dumps(list(reply.parts))) // 4)
    return {"promptTokenCount": prompt, "candidatesTokenCount": output, "totalTokenCount": prompt + output}


def _model(model_id: str) -> dict[str, Any]:
    return {
        "name": f"models/{model_id}",
        "version": "001",
        "displayName": model_id,
        "inputTokenLimit": 1_048_576,
        "outputTokenLimit": 65_536,
        "supportedGenerationMethods": ["generateContent", "streamGenerateContent", "countTokens"],
    }


def _error(code: int, message: str, status: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "status": status}}


def new_call_id() -> str:
    """An id for `function_call(id=...)`, shaped like the ones the CLI makes."""
    return f"call_{uuid.uuid4().hex[:16]}"
