"""`FunctionModel`: a model whose answers come from a Python function, for tests and demos."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeAlias

from ..messages import ModelRequest, ModelResponse
from ..tools import ToolDefinition
from .base import Model, ModelRequestParameters, ModelSettings

__all__ = ("AgentInfo", "FunctionDef", "FunctionModel")


@dataclass(frozen=True, kw_only=True)
class AgentInfo:
    """What the function is told about this step."""

    function_tools: list[ToolDefinition]
    output_tools: list[ToolDefinition]
    allow_text_output: bool
    model_settings: ModelSettings | None

    @classmethod
    def of(cls, params: ModelRequestParameters, settings: ModelSettings | None) -> AgentInfo:
        return cls(
            function_tools=params.function_tools,
            output_tools=params.output_tools,
            allow_text_output=params.allow_text_output,
            model_settings=settings,
        )


FunctionDef: TypeAlias = Callable[
    [Sequence[ModelRequest | ModelResponse], AgentInfo], ModelResponse | Awaitable[ModelResponse]
]


class FunctionModel(Model):
    """Answers each request by calling `function(messages, info)`; sync or async."""

    def __init__(self, function: FunctionDef, *, model_name: str | None = None) -> None:
        self.function = function
        self._model_name = model_name or f"function:{getattr(function, '__name__', 'model')}"

    @property
    def model_name(self) -> str:
        return self._model_name

    @property
    def system(self) -> str:
        return "function"

    async def request(
        self,
        messages: Sequence[ModelRequest | ModelResponse],
        settings: ModelSettings | None,
        params: ModelRequestParameters,
    ) -> ModelResponse:
        response = self.function(messages, AgentInfo.of(params, settings))
        if inspect.isawaitable(response):
            response = await response
        if response.model_name is None:
            response.model_name = self._model_name
        return response
