"""Turn a function's signature and docstring into a JSON schema and an argument validator.

Three kinds of argument schema share one small interface (`ArgsSchema`):

* `FunctionArgs`: a pydantic model of the parameters (or the one `BaseModel` parameter);
  it validates arguments, and its instance is what approval predicates see (`args.amount`).
* `TypeArgs`: the one parameter is a dataclass or a TypedDict, whose fields are the
  arguments; a `RootModel` validates them into the value the function receives.
* `JsonSchemaArgs`: for `Tool.from_schema`, a hand-written JSON schema checked with the
  `jsonschema` library, so such tools are validated too.

The schemas equal pydantic-ai's (`tests/test_pydantic_ai_parity.py`), built with public
pydantic APIs. Building one is most of the cost of `Tool(fn)`, so a function described
again with the same options reuses it (`_schema_cache`). Problems found while building are
collected, not raised, so a tool reports all of them at once.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import math
import types
import typing
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Literal, cast, get_args, get_origin

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    RootModel,
    TypeAdapter,
    ValidationError,
)
from pydantic.fields import FieldInfo
from pydantic.json_schema import GenerateJsonSchema, PydanticJsonSchemaWarning
from typing_extensions import is_typeddict

from ...calls.arguments import ArgError, ArgsInvalid, ArgsSchema
from ._docstrings import DocstringFormat, ParsedDocstring, parse_docstring
from ._extra_keys import forbid_extra, own_keys_only
from ._run_context import RunContext
from ._schema_cache import SCHEMA_CACHE, Options

JsonSchema = dict[str, Any]
_MAX_INPUT_SHOWN = 60


def _attribute_docstrings() -> ConfigDict:
    """pydantic-ai's config: a string literal under a dataclass or TypedDict field describes it."""
    return ConfigDict(use_attribute_docstrings=True)


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


Passing = Literal["positional", "keyword", "spread"]


@dataclass(frozen=True)
class _Param:
    name: str
    field: str
    passing: Passing
    """How the function receives it: by position, by keyword, or unpacked as `*args`."""


class FunctionArgs(ArgsSchema):
    """Arguments validated by a pydantic model: of the parameters, or the one `BaseModel` parameter.

    Shared by every tool of the same function and options, so never mutated after it is built.
    """

    def __init__(
        self, model: type[BaseModel], params: tuple[_Param, ...], *, single_model: bool, var_keyword: bool = False
    ) -> None:
        self.model = model
        self.params = params
        self.single_model = single_model
        self.var_keyword = var_keyword
        """Unknown keys are the function's `**kwargs`."""
        self.json_schema = _object_schema(model.model_json_schema(schema_generator=_ToolSchemaGenerator))

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
            return _pass_one(self.params[0], validated)
        positional: list[Any] = []
        keyword: dict[str, Any] = {}
        for param in self.params:
            value = getattr(validated, param.field)
            if param.passing == "positional":
                positional.append(value)
            elif param.passing == "spread":
                positional.extend(value)
            else:
                keyword[param.name] = value
        if self.var_keyword:
            keyword.update(validated.model_extra or {})
        return tuple(positional), keyword

    def dump(self, validated: Any) -> dict[str, Any]:
        dumped: dict[str, Any] = validated.model_dump(mode="json", by_alias=True)
        return dumped


class TypeArgs(ArgsSchema):
    """Arguments that are the fields of the one dataclass or TypedDict parameter, validated into it.

    A `RootModel` of the type carries pydantic-ai's config to it (a `TypeAdapter` takes no
    config for such types); the function receives the type's value itself.
    """

    def __init__(self, root: type[RootModel[Any]], param: _Param) -> None:
        self.root = root
        self.param = param
        self.json_schema = _object_schema(root.model_json_schema(schema_generator=_ToolSchemaGenerator))

    def validate_python(self, data: Any) -> Any:
        try:
            return self.root.model_validate(data).root
        except ValidationError as exc:
            raise ArgsInvalid(_pydantic_errors(exc)) from None

    def validate_json(self, data: str | bytes) -> Any:
        try:
            return self.root.model_validate_json(data).root
        except ValidationError as exc:
            raise ArgsInvalid(_pydantic_errors(exc)) from None

    def call_args(self, validated: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return _pass_one(self.param, validated)

    def dump(self, validated: Any) -> dict[str, Any]:
        dumped: dict[str, Any] = self.root.model_construct(validated).model_dump(mode="json", by_alias=True)
        return dumped


def _pass_one(param: _Param, value: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    return ((value,), {}) if param.passing == "positional" else ((), {param.name: value})


@dataclass(frozen=True)
class FunctionSchema:
    """The result of inspecting a function: what the model sees and how to call it."""

    args: FunctionArgs | TypeArgs | None
    """None when building failed; `problems` then says why."""
    description: str
    takes_ctx: bool
    problems: tuple[str, ...]


def function_schema(
    function: Callable[..., Any],
    *,
    takes_ctx: bool | None,
    docstring_format: DocstringFormat,
    require_parameter_descriptions: bool,
) -> FunctionSchema:
    """Inspect `function` and build its argument model and JSON schema, or reuse the ones built before."""
    options: Options = (takes_ctx, docstring_format, require_parameter_descriptions)
    built = SCHEMA_CACHE.get(function, options)
    if built is None:
        built = _build_function_schema(function, *options)
        if not built.problems:
            SCHEMA_CACHE.put(function, options, built)
    return built


@dataclass
class _Collected:
    """The parameters as model fields, and how the function gets each back."""

    fields: dict[str, tuple[Any, FieldInfo]] = field(default_factory=dict)
    params: list[_Param] = field(default_factory=list)
    annotations: dict[str, Any] = field(default_factory=dict)
    """Parameter name to type, `*args` and `**kwargs` included: to name the ones pydantic refuses."""
    var_keyword: tuple[Any] | None = None
    """The `**kwargs` value type, when the function takes them."""


def _build_function_schema(
    function: Callable[..., Any],
    takes_ctx: bool | None,
    docstring_format: DocstringFormat,
    require_parameter_descriptions: bool,
) -> FunctionSchema:
    problems: list[str] = []
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError) as exc:
        return FunctionSchema(None, "", bool(takes_ctx), (f"cannot read the signature: {exc}",))
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
    collected = _collect(params, hints, doc, require_parameter_descriptions, problems)
    if problems:
        return FunctionSchema(None, doc.description, takes_ctx, tuple(problems))

    single = _single_type_parameter(collected)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", PydanticJsonSchemaWarning)
            args = _arguments(function, collected, single)
        problems.extend(
            f"cannot be represented in JSON schema: {w.message}"
            for w in caught
            if issubclass(w.category, PydanticJsonSchemaWarning)
        )
    except Exception as exc:  # pydantic reports unusable types with several exception types
        problems.extend(_blame_parameters(collected.annotations, exc))
        return FunctionSchema(None, doc.description, takes_ctx, tuple(problems))
    description = doc.description
    if single is not None and not description:
        # As pydantic-ai: without a docstring of its own, the tool is described by its parameter's type.
        description = args.json_schema.pop("description", "")
    return FunctionSchema(args if not problems else None, description, takes_ctx, tuple(problems))


def _collect(
    params: list[inspect.Parameter],
    hints: dict[str, Any],
    doc: ParsedDocstring,
    require_parameter_descriptions: bool,
    problems: list[str],
) -> _Collected:
    """Each parameter as a field, `*args` as a list of its type; `**kwargs` become the model's unknown keys."""
    collected = _Collected()
    has_var_positional = any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params)
    for param in params:
        annotation = hints.get(param.name, Any)
        if _is_run_context(annotation):
            problems.append(f"parameter {param.name!r}: RunContext may only be the first parameter")
            continue
        collected.annotations[param.name] = annotation
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            annotation = list[annotation]  # type: ignore[valid-type]
        description = None if _has_description(annotation) else doc.parameters.get(param.name)
        if require_parameter_descriptions and description is None and not _has_description(annotation):
            problems.append(f"parameter {param.name!r} has no description in the docstring")
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            collected.var_keyword = (annotation,)
            continue
        field_name = param.name if _usable_field_name(param.name) else f"{param.name}_"
        collected.fields[field_name] = (annotation, _field(param, field_name, description))
        collected.params.append(_Param(param.name, field_name, _passing(param, has_var_positional)))
    return collected


def _passing(param: inspect.Parameter, has_var_positional: bool) -> Passing:
    """Parameters before `*args` must be passed by position, or they would be bound twice."""
    if param.kind is inspect.Parameter.VAR_POSITIONAL:
        return "spread"
    if param.kind is inspect.Parameter.POSITIONAL_ONLY:
        return "positional"
    if has_var_positional and param.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD:
        return "positional"
    return "keyword"


def _field(param: inspect.Parameter, field_name: str, description: str | None) -> FieldInfo:
    """The parameter's field: its default, or its own `Field(...)` when the default is one.

    A `Field`'s description wins over the docstring's, as in pydantic-ai. `*args` may be
    left out (no values), where pydantic-ai requires them: a model rarely knows to send `[]`.
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
    if param.kind is inspect.Parameter.VAR_POSITIONAL:
        return cast(FieldInfo, Field(default_factory=list, **extras))
    return cast(FieldInfo, Field(... if param.default is inspect.Parameter.empty else param.default, **extras))


def _single_type_parameter(collected: _Collected) -> type[Any] | None:
    """The type of a lone model, dataclass or TypedDict parameter: its fields are the arguments, as in pydantic-ai."""
    if len(collected.params) != 1 or collected.var_keyword is not None or collected.params[0].passing == "spread":
        return None
    annotation = next(iter(collected.fields.values()))[0]
    if not isinstance(annotation, type) or isinstance(annotation, types.GenericAlias):
        return None
    if issubclass(annotation, BaseModel) or dataclasses.is_dataclass(annotation) or is_typeddict(annotation):
        return annotation
    return None


def _arguments(
    function: Callable[..., Any], collected: _Collected, single: type[Any] | None
) -> FunctionArgs | TypeArgs:
    params = tuple(collected.params)
    if single is None:
        model = _arguments_model(_model_name(function), collected.fields, collected.var_keyword)
        return FunctionArgs(model, params, single_model=False, var_keyword=collected.var_keyword is not None)
    if issubclass(single, BaseModel):
        return FunctionArgs(forbid_extra(single), params, single_model=True)
    return TypeArgs(_root_model(single), params[0])


def _arguments_model(
    name: str, fields: dict[str, tuple[Any, FieldInfo]], var_keyword: tuple[Any] | None
) -> type[BaseModel]:
    """A model of the parameters, made as a class statement would make it (pydantic's `create_model` does too)."""
    annotations = {name: annotation for name, (annotation, _) in fields.items()}
    namespace: dict[str, Any] = {
        "__annotations__": annotations,
        "__module__": __name__,
        "__qualname__": name,
        **{name: info for name, (_, info) in fields.items()},
        **own_keys_only(var_keyword),
    }
    if any(_takes_model_config(annotation, set()) for annotation in (*annotations.values(), *(var_keyword or ()))):
        namespace["model_config"] = _attribute_docstrings()
    return cast(type[BaseModel], types.new_class(name, (BaseModel,), exec_body=lambda ns: ns.update(namespace)))


def _takes_model_config(annotation: Any, seen: set[int]) -> bool:
    """Whether the type may hold a dataclass or TypedDict without a config of its own, which takes the model's.

    Only then is the config set: pydantic reads attribute docstrings from source code, which
    for the model itself costs more than the rest of building it.
    """
    if isinstance(annotation, type):
        if dataclasses.is_dataclass(annotation) or is_typeddict(annotation):
            return getattr(annotation, "__pydantic_config__", None) is None
        return False
    if isinstance(annotation, str | typing.ForwardRef):
        return True  # not resolved yet: it may be one
    if id(annotation) in seen or get_origin(annotation) is Literal:
        return False
    seen.add(id(annotation))
    inner = list(get_args(annotation))
    if type(annotation).__name__ == "TypeAliasType":  # `type X = ...`, from typing or typing_extensions
        try:
            inner.append(annotation.__value__)
        except Exception:  # its value is evaluated now, and may name what does not exist yet
            return True
    return any(_takes_model_config(arg, seen) for arg in inner)


def _root_model(annotation: type[Any]) -> type[RootModel[Any]]:
    """A root model of a dataclass or TypedDict, under pydantic-ai's config unless the type has its own."""
    namespace = {"__annotations__": {"root": annotation}, "__module__": __name__}
    namespace["model_config"] = _attribute_docstrings()
    return cast(
        type[RootModel[Any]],
        types.new_class(annotation.__name__, (RootModel,), exec_body=lambda ns: ns.update(namespace)),
    )


def _object_schema(schema: JsonSchema) -> JsonSchema:
    """The schema without its title; a top-level `$ref` to a definition used once is replaced by it.

    A root model refers to its type where pydantic-ai describes the type itself; only a
    recursive type stays a reference, in both.
    """
    ref = schema.get("$ref")
    definitions = schema.get("$defs", {})
    name = ref.removeprefix("#/$defs/") if isinstance(ref, str) else None
    if name in definitions and _count_refs(schema, ref) == 1:
        others = {key: value for key, value in definitions.items() if key != name}
        schema = {**definitions[name], **({"$defs": others} if others else {})}
    schema.pop("title", None)
    if "$ref" not in schema:
        schema.setdefault("properties", {})
    return schema


def _count_refs(node: Any, ref: Any) -> int:
    if isinstance(node, dict):
        return int(node.get("$ref") == ref) + sum(_count_refs(value, ref) for value in node.values())
    if isinstance(node, list):
        return sum(_count_refs(item, ref) for item in node)
    return 0


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


def _model_name(function: Callable[..., Any]) -> str:
    name = getattr(function, "__name__", None) or type(function).__name__
    return name if name.isidentifier() else "Args"


def _blame_parameters(annotations: dict[str, Any], exc: Exception) -> list[str]:
    """Name the parameters whose types pydantic cannot validate or describe."""
    blamed: list[str] = []
    for name, annotation in annotations.items():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error", PydanticJsonSchemaWarning)
                TypeAdapter(annotation).json_schema()
        except Exception as param_exc:
            first_line = str(param_exc).splitlines()[0] if str(param_exc) else type(param_exc).__name__
            label = f"parameter {name!r} ({_type_name(annotation)})"
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
