"""`TestModel`: a scripted model for tests and the demo; no network, fully deterministic.

The script is a list of steps, one per model request. The step to play is the number of
responses already in the history, so a fresh `TestModel` given a stored history carries
on where the run paused, in this process or another. After the script, the model answers
with a text summing up the last tool results (a denial included), which ends the run.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, TypeAlias

from ..messages import (
    ModelRequest,
    ModelResponse,
    ModelResponsePart,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolDeniedPart,
    ToolReturnPart,
    Usage,
)
from .base import Model, ModelRequestParameters, ModelSettings
from .function import AgentInfo

__all__ = ("ScriptStep", "TestModel")

Call: TypeAlias = tuple[str, dict[str, Any] | str]
"""`(tool_name, args)`."""
ScriptStep: TypeAlias = (
    str
    | Call
    | Sequence[Call]
    | ModelResponse
    | Callable[[Sequence[ModelRequest | ModelResponse], AgentInfo], "ScriptStep"]
)
"""Text, one call, several parallel calls, a full response, or a function of the history."""


class TestModel(Model):
    """Plays `script` one step per request, then sums up the last results as text."""

    __test__ = False  # not a pytest test class

    def __init__(
        self, script: Sequence[ScriptStep] = (), *, final_text: str | None = None, model_name: str = "test"
    ) -> None:
        self.script = list(script)
        self.final_text = final_text
        self._model_name = model_name

    @property
    def model_name(self) -> str:
        return self._model_name

    @property
    def system(self) -> str:
        return "test"

    async def request(
        self,
        messages: Sequence[ModelRequest | ModelResponse],
        settings: ModelSettings | None,
        params: ModelRequestParameters,
    ) -> ModelResponse:
        step = sum(1 for m in messages if isinstance(m, ModelResponse))
        info = AgentInfo.of(params, settings)
        item: ScriptStep = self.script[step] if step < len(self.script) else self._final(messages)
        while callable(item) and not isinstance(item, ModelResponse):
            item = item(messages, info)
        response = item if isinstance(item, ModelResponse) else ModelResponse(parts=_parts(item, step))
        response.model_name = response.model_name or self._model_name
        if not response.usage.requests:
            response.usage = Usage(
                requests=1, input_tokens=_estimate_tokens(messages[-1:]), output_tokens=_estimate_tokens([response])
            )
        return response

    def _final(self, messages: Sequence[ModelRequest | ModelResponse]) -> str:
        if self.final_text is not None:
            return self.final_text
        last = messages[-1] if messages else None
        if not isinstance(last, ModelRequest):
            return "Done."
        outcomes: list[str] = []
        for part in last.parts:
            if isinstance(part, ToolReturnPart):
                outcomes.append(f"{part.tool_name} returned {json.dumps(part.content, ensure_ascii=False)}")
            elif isinstance(part, ToolDeniedPart):
                outcomes.append(f"{part.tool_name} was denied ({part.reason}), so I did not do it")
            elif isinstance(part, RetryPromptPart):
                outcomes.append(f"{part.tool_name or 'output'} failed: {part.content}")
        return "Done. " + "; ".join(outcomes) + "." if outcomes else "Done."


def _parts(item: Any, step: int) -> list[ModelResponsePart]:
    if isinstance(item, str):
        return [TextPart(content=item)]
    calls: list[Call] = [item] if isinstance(item, tuple) and isinstance(item[0], str) else list(item)
    return [
        ToolCallPart(tool_name=name, args=args, tool_call_id=f"call_{step}_{index}")
        for index, (name, args) in enumerate(calls)
    ]


def _estimate_tokens(messages: Sequence[ModelRequest | ModelResponse]) -> int:
    """A rough, deterministic token count (words), so usage limits can be tested."""
    words = 0
    for message in messages:
        for part in message.parts:
            text = getattr(part, "content", None) or getattr(part, "args", None) or ""
            words += len(str(text).split())
    return words
