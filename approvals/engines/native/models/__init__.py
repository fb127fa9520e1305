"""Model adapters behind one small interface, and `infer_model` for names like "openai:gpt-4o-mini"."""

from __future__ import annotations

from ....exceptions import UserError
from .base import Model, ModelRequestParameters, ModelSettings
from .function import AgentInfo, FunctionModel
from .test import TestModel

__all__ = (
    "AgentInfo",
    "FunctionModel",
    "Model",
    "ModelRequestParameters",
    "ModelSettings",
    "TestModel",
    "infer_model",
)


def infer_model(model: Model | str) -> Model:
    """A model object from a model or a name: "test", "openai:NAME" or "anthropic:NAME"."""
    if isinstance(model, Model):
        return model
    if model == "test":
        return TestModel()
    provider, _, name = model.partition(":")
    if not name:
        raise UserError(f"Unknown model {model!r}: use 'openai:MODEL', 'anthropic:MODEL' or 'test'")
    if provider == "openai":
        from .openai import OpenAIChatModel

        return OpenAIChatModel(name)
    if provider == "anthropic":
        from .anthropic import AnthropicModel

        return AnthropicModel(name)
    raise UserError(f"Unknown model provider {provider!r} in {model!r}: use 'openai:' or 'anthropic:'")
