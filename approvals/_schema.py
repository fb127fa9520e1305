"""Turn a function's signature and docstring into a JSON schema and an argument validator.

Two kinds of argument schema share one small interface (`ArgsSchema`):

* `FunctionArgs`: built from type hints with pydantic's public `create_model`; the model
  validates arguments, and its instance is what approval predicates see (`args.amount`).
* `JsonSchemaArgs`: for `Tool.from_schema`, a hand-written JSON schema checked with the
  `jsonschema` library, so such tools are validated too.

Problems found while building are collected, not raised, so a tool reports all of them at once.
"""

from __future__ import annotations

import functools
import inspect
import json
import math
import typing
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, cast, get_args, get_origin

import jsonschema
import pydantic
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo
from pydantic.json_schema import GenerateJsonSchema, PydanticJsonSchemaWarning

from ._docstrings import DocstringFormat, parse_docstring
from ._run_context import RunContext

JsonSchema = dict[str, Any]
_MAX_INPUT_SHOWN = 60


@dataclass(frozen=True)
class ArgError:
    """One problem with a call's arguments."""

    location: str
    """Dotted path to the offending value; empty for the arguments as a whole."""
    message: str


class ArgsInvalid(Exception):
    """The arguments did not validate; `errors` says where and why."""

    def __init__(self, errors: list[ArgError]) -> None:
        self.errors = errors
        super().__init__("; ".join(f"{e.location}: {e.message}" for e in errors))


class ArgsSchema(ABC):
    """Validates a call's arguments and maps them onto the function's parameters."""

    json_schema: JsonSchema

    @abstractmethod
    def validate_python(self, data: Any) -> Any:
        """Validate already-parsed arguments; raise `ArgsInvalid`."""

    @abstractmethod
    def validate_json(self, data: str | bytes) -> Any:
        """Parse and validate arguments sent as JSON text; raise `ArgsInvalid`."""

    @abstractmethod
    def call_args(self, validated: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Positional and keyword arguments for the function, without the context."""

    @abstractmethod
    def dump(self, validated: Any) -> dict[str, Any]:
        """The validated arguments as JSON-compatible data, as a reviewer sees them."""


class _ToolSchemaGenerator(GenerateJsonSchema):
    """Pydantic's schema generator without per-field titles, which only echo the names.

    Plain JSON defaults are written as they are; pydantic would build a serializer for
    each one, which is most of the cost of describing a small function.
    """

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def encode_default(self, dft: Any) -> Any:
        if dft is None or type(dft) in (bool, int, str) or (type(dft) is float and math.isfinite(dft)):
            return dft
        return super().encode_default(dft)


@dataclass(frozen=True)
class _Param:
    name: str
    field: str
    positional_only: bool


class FunctionArgs(ArgsSchema):
    """Arguments described by a function's type hints, validated by a pydantic model."""

    def __init__(self, model: type[BaseModel], params: list[_Param], single_model: bool) -> None:
        self.model = model
        self.params = params
        self.single_model = single_model
        self.json_schema = _model_json_schema(model)

    def validate_python(self, data: Any) -> Any:
        try:
            return self.model.model_validate(data)
        except ValidationError as exc:
            raise ArgsInvalid(_pydantic_errors(exc)) from None

    def validate_json(self, data: str | bytes) -> Any:
        try:
            return self.model.model_validate_json(data)
        except ValidationError as exc:
            raise ArgsInvalid(_pydantic_errors(exc)) from None

    def call_args(self, validated: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
        if self.single_model:
            param = self.params[0]
            return ((validated,), {}) if param.positional_only else ((), {param.name: validated})
        positional = tuple(getattr(validated, p.field) for p in self.params if p.positional_only)
        keyword = {p.name: getattr(validated, p.field) for p in self.params if not p.positional_only}
        return positional, keyword

    def dump(self, validated: Any) -> dict[str, Any]:
        dumped: dict[str, Any] = validated.model_dump(mode="json", by_alias=True)
        return dumped


class JsonSchemaArgs(ArgsSchema):
    """Arguments described by a hand-written JSON schema, checked with `jsonschema`."""

    def __init__(self, json_schema: JsonSchema) -> None:
        self.json_schema = json_schema
        validator_cls = jsonschema.validators.validator_for(json_schema, default=jsonschema.Draft202012Validator)
        self._validator = validator_cls(json_schema, format_checker=validator_cls.FORMAT_CHECKER)

    def validate_python(self, data: Any) -> Any:
        errors = [
            ArgError(".".join(str(p) for p in error.absolute_path), error.message)
            for error in sorted(self._validator.iter_errors(data), key=lambda e: list(map(str, e.absolute_path)))
        ]
        if errors:
            raise ArgsInvalid(errors)
        return dict(data)

    def validate_json(self, data: str | bytes) -> Any:
        try:
            parsed = json.loads(data)
        except ValueError as exc:
            raise ArgsInvalid([ArgError("", f"Invalid JSON: {exc}")]) from None
        return self.validate_python(parsed)

    def call_args(self, validated: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (), dict(validated)

    def dump(self, validated: Any) -> dict[str, Any]:
        return dict(validated)


def check_json_schema(json_schema: Any) -> list[str]:
    """Problems that make a hand-written schema unusable for tool arguments."""
    if not isinstance(json_schema, Mapping):
        return ["json_schema must be a dict"]
    problems: list[str] = []
    if json_schema.get("type") != "object":
        problems.append('json_schema must describe an object ("type": "object")')
    validator_cls = jsonschema.validators.validator_for(json_schema, default=jsonschema.Draft202012Validator)
    try:
        validator_cls.check_schema(dict(json_schema))
    except jsonschema.SchemaError as exc:
        problems.append(f"json_schema is not a valid JSON schema: {exc.message}")
    return problems


@dataclass
class FunctionSchema:
    """The result of inspecting a function: what the model sees and how to call it."""

    args: FunctionArgs | None
    """None when building failed; `problems` then says why."""
    description: str
    takes_ctx: bool
    problems: list[str]


def function_schema(
    function: Callable[..., Any],
    *,
    takes_ctx: bool | None,
    docstring_format: DocstringFormat,
    require_parameter_descriptions: bool,
) -> FunctionSchema:
    """Inspect `function` and build its argument model and JSON schema."""
    problems: list[str] = []
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError) as exc:
        return FunctionSchema(None, "", bool(takes_ctx), [f"cannot read the signature: {exc}"])
    hints = _type_hints(function, problems)
    params = list(signature.parameters.values())

    first_is_ctx = bool(params) and _is_run_context(hints.get(params[0].name))
    if takes_ctx is None:
        takes_ctx = first_is_ctx
    elif takes_ctx and not first_is_ctx:
        problems.append("the first parameter must be annotated RunContext[...] because the tool takes the run context")
    elif not takes_ctx and first_is_ctx:
        problems.append("the first parameter is a RunContext, but the tool is declared not to take the context")
    if first_is_ctx:
        params = params[1:]

    doc = parse_docstring(function.__doc__, docstring_format)
    fields: dict[str, Any] = {}
    arg_params: list[_Param] = []
    for param in params:
        annotation = hints.get(param.name, Any)
        if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            problems.append(f"parameter {param.name!r}: *args and **kwargs cannot be described; use Tool.from_schema")
            continue
        if _is_run_context(annotation):
            problems.append(f"parameter {param.name!r}: RunContext may only be the first parameter")
            continue
        field_name = param.name if _usable_field_name(param.name) else f"{param.name}_"
        description = None if _has_description(annotation) else doc.parameters.get(param.name)
        if require_parameter_descriptions and description is None and not _has_description(annotation):
            problems.append(f"parameter {param.name!r} has no description in the docstring")
        fields[field_name] = (annotation, _field(param, field_name, description))
        arg_params.append(_Param(param.name, field_name, param.kind is inspect.Parameter.POSITIONAL_ONLY))

    if problems:
        return FunctionSchema(None, doc.description, takes_ctx, problems)

    single = _single_model_parameter(arg_params, hints)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", PydanticJsonSchemaWarning)
            if single is not None:
                args = FunctionArgs(_forbid_extra(single), arg_params, single_model=True)
            else:
                model = pydantic.create_model(
                    _model_name(function),
                    __config__=ConfigDict(extra="forbid"),
                    **fields,
                )
                args = FunctionArgs(model, arg_params, single_model=False)
        problems.extend(
            f"cannot be represented in JSON schema: {w.message}"
            for w in caught
            if issubclass(w.category, PydanticJsonSchemaWarning)
        )
    except Exception as exc:  # pydantic reports unusable types with several exception types
        problems.extend(_blame_parameters(fields, exc))
        return FunctionSchema(None, doc.description, takes_ctx, problems)
    return FunctionSchema(args if not problems else None, doc.description, takes_ctx, problems)


def _field(param: inspect.Parameter, field_name: str, description: str | None) -> FieldInfo:
    """The parameter's field: its default, or its own `Field(...)` when the default is one.

    A `Field`'s description wins over the docstring's, as in pydantic-ai.
    """
    extras: dict[str, Any] = {}
    if field_name != param.name:
        extras["alias"] = param.name
    if isinstance(param.default, FieldInfo):
        if param.default.description is None and description is not None:
            extras["description"] = description
        return FieldInfo.merge_field_infos(param.default, **extras) if extras else param.default
    if description is not None:
        extras["description"] = description
    return cast(FieldInfo, Field(... if param.default is inspect.Parameter.empty else param.default, **extras))


def _type_hints(function: Callable[..., Any], problems: list[str]) -> dict[str, Any]:
    """Resolved parameter annotations; the return annotation is never needed, so never evaluated."""
    target = inspect.unwrap(function)
    while isinstance(target, functools.partial):
        target = inspect.unwrap(target.func)
    if not (inspect.isfunction(target) or inspect.ismethod(target)) and callable(target):
        target = type(target).__call__
    annotations = {k: v for k, v in getattr(target, "__annotations__", {}).items() if k != "return"}
    holder = SimpleNamespace(__annotations__=annotations)
    try:
        return typing.get_type_hints(holder, globalns=getattr(target, "__globals__", {}), include_extras=True)
    except Exception as exc:  # unresolvable forward references raise NameError and others
        problems.append(
            f"cannot resolve type hints: {exc} (types named in string annotations must be importable "
            "from the function's module, not local to another function)"
        )
        return {}


def _is_run_context(annotation: Any) -> bool:
    return annotation is RunContext or get_origin(annotation) is RunContext


def _usable_field_name(name: str) -> bool:
    """Pydantic reserves names starting with '_' and those of BaseModel's own attributes."""
    return not name.startswith("_") and not hasattr(BaseModel, name)


def _has_description(annotation: Any) -> bool:
    if get_origin(annotation) is not typing.Annotated:
        return False
    return any(isinstance(meta, FieldInfo) and meta.description for meta in get_args(annotation)[1:])


def _single_model_parameter(params: list[_Param], hints: dict[str, Any]) -> type[BaseModel] | None:
    if len(params) != 1:
        return None
    annotation = hints.get(params[0].name)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def _forbid_extra(model: type[BaseModel]) -> type[BaseModel]:
    """Forbid unknown keys, unless the model already decided what to do with them."""
    if model.model_config.get("extra") in ("forbid", "allow"):
        return model
    namespace = {"model_config": ConfigDict(extra="forbid"), "__module__": model.__module__, "__doc__": model.__doc__}
    return type(model.__name__, (model,), namespace)


def _model_name(function: Callable[..., Any]) -> str:
    name = getattr(function, "__name__", None) or type(function).__name__
    return name if name.isidentifier() else "Args"


def _model_json_schema(model: type[BaseModel]) -> JsonSchema:
    schema = model.model_json_schema(schema_generator=_ToolSchemaGenerator)
    schema.pop("title", None)
    schema.setdefault("properties", {})
    return schema


def _blame_parameters(fields: dict[str, Any], exc: Exception) -> list[str]:
    """Name the parameters whose types pydantic cannot validate or describe."""
    blamed: list[str] = []
    for name, (annotation, _field) in fields.items():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error", PydanticJsonSchemaWarning)
                TypeAdapter(annotation).json_schema()
        except Exception as param_exc:
            first_line = str(param_exc).splitlines()[0] if str(param_exc) else type(param_exc).__name__
            label = f"parameter {name.rstrip('_')!r} ({_type_name(annotation)})"
            blamed.append(f"{label} cannot be represented in JSON schema: {first_line}")
    if not blamed:
        first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        blamed.append(f"cannot build the argument schema: {first_line}")
    return blamed


def _type_name(annotation: Any) -> str:
    return getattr(annotation, "__name__", None) or repr(annotation)


def _pydantic_errors(exc: ValidationError) -> list[ArgError]:
    errors: list[ArgError] = []
    for error in exc.errors(include_url=False, include_context=False):
        location = ".".join(str(part) for part in error["loc"])
        message = error["msg"]
        if error["type"] not in ("missing", "json_invalid") and "input" in error and location:
            message = f"{message} (got {_short(error['input'])})"
        errors.append(ArgError(location, message))
    return errors


def _short(value: Any) -> str:
    try:
        text = json.dumps(value, default=str, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= _MAX_INPUT_SHOWN else text[: _MAX_INPUT_SHOWN - 1] + "…"
