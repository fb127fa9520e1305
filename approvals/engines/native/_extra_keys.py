"""Unknown argument keys, decided at the arguments' top level only, as pydantic-ai does.

A tool refuses keys it does not know (or takes them as `**kwargs`), while the dataclasses and
TypedDicts nested in its arguments ignore them. `ConfigDict(extra=...)` would reach those too,
so the decision is written into the model's own core schema through pydantic's class hooks.
"""

from __future__ import annotations

from typing import Any, cast

from pydantic import BaseModel, ConfigDict, GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic_core import CoreSchema

__all__ = ("forbid_extra", "own_keys_only")

JsonSchema = dict[str, Any]


_BASE_CORE_SCHEMA_HOOK = getattr(BaseModel.__get_pydantic_core_schema__, "__func__", None)


def forbid_extra(model: type[BaseModel]) -> type[BaseModel]:
    """Forbid unknown keys, unless the model already decided what to do with them.

    A model with its own core schema hook keeps it, and forbids them in its config instead
    (which also reaches the dataclasses and TypedDicts in it).
    """
    if model.model_config.get("extra") in ("forbid", "allow"):
        return model
    namespace: dict[str, Any] = {"__module__": model.__module__, "__doc__": model.__doc__}
    if getattr(model.__get_pydantic_core_schema__, "__func__", None) is _BASE_CORE_SCHEMA_HOOK:
        namespace.update(own_keys_only(None))
    else:
        namespace["model_config"] = ConfigDict(extra="forbid")
    return type(model.__name__, (model,), namespace)


def own_keys_only(var_keyword: tuple[Any] | None) -> dict[str, Any]:
    """Class hooks that decide unknown keys at the model's top level: refused, or validated as `**kwargs`.

    `ConfigDict(extra=...)` would also reach the dataclasses and TypedDicts nested in the
    model, which pydantic-ai leaves to ignore unknown keys; a core schema says it of one level.
    """
    behavior = "forbid" if var_keyword is None else "allow"

    def core_schema(cls: type[BaseModel], source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        schema = handler(source)
        if source is cls:
            extras = None if var_keyword is None else handler.generate_schema(var_keyword[0])
            _set_extra_behavior(cast(dict[str, Any], schema), behavior, extras)
        return schema

    def json_schema(cls: type[BaseModel], schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchema:
        parent: Any = super(cls, cls)  # a model's own hook, if it has one
        generated: JsonSchema = parent.__get_pydantic_json_schema__(schema, handler)
        if "extras_schema" not in _model_fields(cast(dict[str, Any], schema)):
            handler.resolve_ref_schema(generated)["additionalProperties"] = behavior == "allow"
        return generated

    return {
        "__get_pydantic_core_schema__": classmethod(core_schema),
        "__get_pydantic_json_schema__": classmethod(json_schema),
    }


def _set_extra_behavior(schema: dict[str, Any], behavior: str, extras: CoreSchema | None) -> None:
    model = _inner(schema, "model")
    fields = _inner(model.get("schema", {}), "model-fields")
    if not fields:
        raise TypeError(f"pydantic gave an unexpected core schema for the arguments ({schema.get('type')!r})")
    fields["extra_behavior"] = behavior
    if extras is not None and extras.get("type") != "any":
        fields["extras_schema"] = extras
    model["config"] = {**model.get("config", {}), "extra_fields_behavior": behavior}


def _model_fields(schema: dict[str, Any]) -> dict[str, Any]:
    return _inner(_inner(schema, "model").get("schema", {}), "model-fields")


def _inner(schema: dict[str, Any], kind: str) -> dict[str, Any]:
    """The schema of `kind` in `schema`, under the validator functions a model's decorators wrap it in; or {}."""
    while schema.get("type", "").startswith("function-"):
        schema = schema.get("schema", {})
    return schema if schema.get("type") == kind else {}
