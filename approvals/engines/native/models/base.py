"""The one interface every model adapter implements: history and tools in, a response out."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..messages import ModelRequest, ModelResponse
from ..tools import ToolDefinition
from .settings import ModelSettings

__all__ = ("Model", "ModelRequestParameters", "ModelSettings")


@dataclass(kw_only=True)
class ModelRequestParameters:
    """What the model may do in this step."""

    function_tools: list[ToolDefinition] = field(default_factory=list)
    """Tools the model may call."""
    output_tools: list[ToolDefinition] = field(default_factory=list)
    """Tools that end the run with a structured output."""
    allow_text_output: bool = True
    """Whether plain text ends the run."""

    @property
    def all_tools(self) -> list[ToolDefinition]:
        return [*self.function_tools, *self.output_tools]


class Model(ABC):
    """A chat model with tool calling.

    `request` receives the whole history; adapters must not mutate it. Errors from the
    provider are raised as `ModelHTTPError` / `ModelAPIError`.
    """

    @property
    @abstractmethod
    def model_name(self) -> str:
        """The model's name, as the provider knows it."""

    @property
    def system(self) -> str:
        """The provider, e.g. 'openai', 'anthropic', 'test'."""
        return "unknown"

    async def close(self) -> None:
        """Close the connections this model opened in the running event loop; it stays usable.

        `Agent.run_sync` calls it before its event loop ends.
        """
        return None

    @abstractmethod
    async def request(
        self,
        messages: Sequence[ModelRequest | ModelResponse],
        settings: ModelSettings | None,
        params: ModelRequestParameters,
    ) -> ModelResponse:
        """Ask the model for its next response."""
