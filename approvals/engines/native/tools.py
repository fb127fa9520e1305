"""Tools: plain Python functions the model may call, described and validated for it.

`Tool(fn)` reads the function's signature and docstring once, at definition time, into a
`ToolDefinition` (what the model sees) and a pydantic validator (what checks the model's
arguments); another `Tool` of the same function and options reuses both. Every problem
with the definition is reported at once as a `ToolDefinitionError`. A tool also carries
its approval policy: whether a call must wait for a person, decided from the validated
arguments.
"""

from __future__ import annotations

import copy
import enum
import inspect
import json
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from functools import cached_property, partial
from typing import Any, Generic, Literal, TypeAlias, overload

import anyio.to_thread
from pydantic import TypeAdapter, ValidationError
from pydantic_core import SchemaValidator, to_jsonable_python
from typing_extensions import TypeVar

from ...calls.arguments import ArgError, ArgsInvalid, ArgsSchema, JsonSchemaArgs, check_json_schema
from ...calls.canonical import digest, non_finite_path
from ...calls.tools import ToolDefinition
from ...exceptions import ToolDefinitionError, ToolRetryError
from . import _json_schema
from ._docstrings import DocstringFormat
from ._run_context import AgentDepsT, RunContext
from ._schema import _pydantic_errors, function_schema

__all__ = (
    "INHERIT",
    "RESERVED_TOOL_NAMES",
    "ApprovalPredicate",
    "DocstringFormat",
    "RunContext",
    "Tool",
    "ToolDefinition",
    "ToolPrepareFunc",
    "ToolReturn",
    "ToolsPrepareFunc",
    "args_digest",
    "tool",
)

TOOL_NAME_PATTERN = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
"""Names every major provider accepts."""
MAX_DESCRIPTION_LENGTH = 1024
"""OpenAI's limit on a function description."""
OUTPUT_TOOL_NAME = "final_result"
"""The tool through which the model gives a structured output; it ends the run."""
RESERVED_TOOL_NAMES = frozenset({OUTPUT_TOOL_NAME})
"""Names the run loop keeps for itself (structured output)."""


class _Inherit(enum.Enum):
    INHERIT = "inherit"


INHERIT = _Inherit.INHERIT
"""Timeout value meaning "use the agent's default"; `None` means "no limit"."""


@dataclass(kw_only=True)
class ToolReturn:
    """A tool result with extra content for the model and metadata for the app."""

    return_value: Any
    """The result the model receives for the call."""
    content: str | Sequence[Any] | None = None
    """Extra context sent to the model after the results (text, or a list of parts)."""
    metadata: Any = None
    """Kept with the result for the application; never sent to the model."""


ApprovalPredicate: TypeAlias = Callable[[RunContext[Any], Any], bool | Awaitable[bool]]
"""`(ctx, args) -> bool`: does this call, with these validated arguments, need a person?"""
ToolPrepareFunc: TypeAlias = Callable[
    [RunContext[Any], ToolDefinition], ToolDefinition | Awaitable[ToolDefinition | None] | None
]
"""Per-tool hook run before each model request: return a changed definition, or None to hide the tool."""
ToolsPrepareFunc: TypeAlias = Callable[
    [RunContext[Any], list[ToolDefinition]],
    list[ToolDefinition] | Awaitable[list[ToolDefinition] | None] | None,
]
"""Agent-wide hook run before each model request on all visible definitions."""

FunctionT = TypeVar("FunctionT", bound=Callable[..., Any])


class Tool(Generic[AgentDepsT]):
    """A function the model can call, with its schema, validator and policies."""

    function: Callable[..., Any]
    name: str
    takes_ctx: bool
    max_retries: int | None
    timeout: float | Literal[_Inherit.INHERIT] | None
    prepare: ToolPrepareFunc | None
    requires_approval: bool | ApprovalPredicate
    idempotent: bool
    approvals_required: int
    approval_ttl: float | None
    tool_def: ToolDefinition
    args_schema: ArgsSchema

    def __init__(
        self,
        function: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        takes_ctx: bool | None = None,
        retries: int | None = None,
        timeout: float | Literal[_Inherit.INHERIT] | None = INHERIT,
        prepare: ToolPrepareFunc | None = None,
        requires_approval: bool | ApprovalPredicate = False,
        idempotent: bool = False,
        approvals_required: int = 1,
        approval_ttl: float | None = None,
        strict: bool | None = None,
        sequential: bool = False,
        metadata: dict[str, Any] | None = None,
        docstring_format: DocstringFormat = "auto",
        require_parameter_descriptions: bool = False,
        allow_long_description: bool = False,
    ) -> None:
        """Describe `function` as a tool.

        Args:
            function: A plain or async function; a first parameter annotated `RunContext[...]`
                receives the run context and is not part of the schema.
            name: Name for the model; defaults to the function's name.
            description: Overrides the docstring's main text.
            takes_ctx: Declare whether the function takes the context; detected when None.
            retries: Failures in a row allowed before the run fails; None uses the agent's.
            timeout: Seconds a call may take; `INHERIT` uses the agent's default, None is unlimited.
            prepare: Hook to change or hide the definition before each model request.
            requires_approval: True, or a predicate `(ctx, args) -> bool` on the validated arguments.
            idempotent: Safe to run twice; a crash mid-call may then be retried automatically.
            approvals_required: Distinct people who must approve a call (a quorum), 1 by default.
            approval_ttl: Seconds a call may wait for decisions before it expires as a denial; None waits forever.
            strict: Ask for OpenAI's strict mode, which enforces the schema provider-side.
            sequential: Never run concurrently with other calls of the same step.
            metadata: Application data; never sent to the model.
            docstring_format: 'google', 'numpy', 'sphinx', or 'auto' to detect it.
            require_parameter_descriptions: Fail when a parameter has no description.
            allow_long_description: Allow a description over 1024 characters (some providers reject it).
        """
        built = function_schema(
            function,
            takes_ctx=takes_ctx,
            docstring_format=docstring_format,
            require_parameter_descriptions=require_parameter_descriptions,
        )
        self._setup(
            function,
            args_schema=built.args,
            name=name,
            description=built.description if description is None else description,
            takes_ctx=built.takes_ctx,
            problems=built.problems,
            retries=retries,
            timeout=timeout,
            prepare=prepare,
            requires_approval=requires_approval,
            idempotent=idempotent,
            approvals_required=approvals_required,
            approval_ttl=approval_ttl,
            strict=strict,
            sequential=sequential,
            metadata=metadata,
            allow_long_description=allow_long_description,
        )

    @classmethod
    def from_schema(
        cls,
        function: Callable[..., Any],
        *,
        name: str,
        description: str | None,
        json_schema: dict[str, Any],
        takes_ctx: bool = False,
        retries: int | None = None,
        timeout: float | Literal[_Inherit.INHERIT] | None = INHERIT,
        prepare: ToolPrepareFunc | None = None,
        requires_approval: bool | ApprovalPredicate = False,
        idempotent: bool = False,
        approvals_required: int = 1,
        approval_ttl: float | None = None,
        strict: bool | None = None,
        sequential: bool = False,
        metadata: dict[str, Any] | None = None,
        allow_long_description: bool = False,
        _validator: SchemaValidator | TypeAdapter[Any] | None = None,
    ) -> Tool[Any]:
        """A tool from a hand-written JSON schema, for functions without usable type hints.

        Arguments are validated against `json_schema` before the function is called with
        them as keyword arguments (after the context, when `takes_ctx`).
        """
        self: Tool[Any] = cls.__new__(cls)
        args_schema: ArgsSchema | None
        if _validator is not None:  # `from_validator`: the schema only describes the arguments
            problems, args_schema = [], _ValidatorArgs(_validator, json_schema)
        else:
            problems = check_json_schema(json_schema)
            args_schema = None if problems else JsonSchemaArgs(copy.deepcopy(json_schema))
        self._setup(
            function,
            args_schema=args_schema,
            name=name,
            description=description or "",
            takes_ctx=takes_ctx,
            problems=problems,
            retries=retries,
            timeout=timeout,
            prepare=prepare,
            requires_approval=requires_approval,
            idempotent=idempotent,
            approvals_required=approvals_required,
            approval_ttl=approval_ttl,
            strict=strict,
            sequential=sequential,
            metadata=metadata,
            allow_long_description=allow_long_description,
        )
        return self

    @classmethod
    def from_validator(
        cls,
        function: Callable[..., Any],
        *,
        validator: SchemaValidator | TypeAdapter[Any],
        json_schema: dict[str, Any],
        **options: Any,
    ) -> Tool[Any]:
        """A tool whose arguments `validator` checks (pydantic's, built elsewhere), described by `json_schema`.

        For tools another framework already described (pydantic-ai's): a call and a reviewer's
        edit are validated exactly as that framework validates them, into a dict of keyword
        arguments, and the model is shown `json_schema` as it is. The other options are
        `from_schema`'s (`name` and `description` are required).
        """
        return cls.from_schema(function, json_schema=json_schema, _validator=validator, **options)

    def _setup(
        self,
        function: Callable[..., Any],
        *,
        args_schema: ArgsSchema | None,
        name: str | None,
        description: str,
        takes_ctx: bool,
        problems: Sequence[str],
        retries: int | None,
        timeout: float | Literal[_Inherit.INHERIT] | None,
        prepare: ToolPrepareFunc | None,
        requires_approval: bool | ApprovalPredicate,
        idempotent: bool,
        approvals_required: int,
        approval_ttl: float | None,
        strict: bool | None,
        sequential: bool,
        metadata: dict[str, Any] | None,
        allow_long_description: bool,
    ) -> None:
        if name is None:
            name = getattr(function, "__name__", None) or type(function).__name__
        problems = [*check_tool_name(name), *problems]
        if len(description) > MAX_DESCRIPTION_LENGTH and not allow_long_description:
            problems.append(
                f"description is {len(description)} characters, over the {MAX_DESCRIPTION_LENGTH} "
                "that OpenAI accepts; shorten it or pass allow_long_description=True"
            )
        if approvals_required < 1:
            problems.append("approvals_required must be 1 or more")
        if approval_ttl is not None and approval_ttl <= 0:
            problems.append("approval_ttl must be positive seconds, or None to wait forever")
        if retries is not None and retries < 0:
            problems.append("retries must be 0 or more")
        if timeout is not INHERIT and timeout is not None and timeout <= 0:
            problems.append("timeout must be positive, or None for no limit")
        if not isinstance(requires_approval, bool) and not callable(requires_approval):
            problems.append("requires_approval must be a bool or a callable (ctx, args) -> bool")
        if problems or args_schema is None:
            raise ToolDefinitionError(f"tool {name!r}", problems)

        self.function = function
        self.name = name
        self.takes_ctx = takes_ctx
        self.max_retries = retries
        self.timeout = timeout
        self.prepare = prepare
        self.requires_approval = requires_approval
        self.idempotent = idempotent
        self.approvals_required = approvals_required
        self.approval_ttl = approval_ttl
        self.args_schema = args_schema
        self.tool_def = ToolDefinition(
            name=name,
            description=description,
            parameters_json_schema=_copy_json(args_schema.json_schema),
            strict=strict,
            sequential=sequential,
            metadata=metadata,
        )

    def __repr__(self) -> str:
        return f"Tool(name={self.name!r}, takes_ctx={self.takes_ctx}, requires_approval={self.requires_approval!r})"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the underlying function directly, bypassing validation (handy in tests)."""
        return self.function(*args, **kwargs)

    @cached_property
    def is_async(self) -> bool:
        """Whether the function is a coroutine function (awaited) or sync (run in a thread)."""
        target = self.function
        while isinstance(target, partial):
            target = target.func
        return inspect.iscoroutinefunction(target) or inspect.iscoroutinefunction(
            getattr(target, "__call__", None)  # noqa: B004 - callable objects with async __call__
        )

    def validate_args(self, args: str | bytes | dict[str, Any] | None, *, strict_nulls: bool = False) -> Any:
        """Validate a model's arguments (JSON text or a dict); raise `ToolRetryError` with a model-friendly message.

        With `strict_nulls`, nulls that OpenAI's strict mode sends for omitted optional
        parameters are dropped first, so their defaults apply.
        """
        if args is None or (isinstance(args, str | bytes) and not args.strip()):
            args = {}
        try:
            if strict_nulls:
                validated = self._validate_dropping_strict_nulls(args)
            elif isinstance(args, str | bytes):
                validated = self.args_schema.validate_json(args)
            else:
                validated = self.args_schema.validate_python(args)
            _refuse_non_finite(self.args_schema.dump(validated))
        except ArgsInvalid as exc:
            lines = "\n".join(f"- {e.location}: {e.message}" if e.location else f"- {e.message}" for e in exc.errors)
            message = f"Tool call validation failed for tool {self.name!r}:\n{lines}\nFix the errors and try again."
            raise ToolRetryError(self.name, message, [(e.location, e.message) for e in exc.errors]) from None
        return validated

    def _validate_dropping_strict_nulls(self, args: str | bytes | dict[str, Any]) -> Any:
        if isinstance(args, str | bytes):
            try:
                parsed: Any = json.loads(args)
            except ValueError:
                return self.args_schema.validate_json(args)  # reports the JSON error in the usual words
        else:
            parsed = args
        return self.args_schema.validate_python(_json_schema.drop_strict_nulls(parsed, self.args_schema.json_schema))

    def dump_args(self, validated: Any) -> dict[str, Any]:
        """Validated arguments as JSON-compatible data: what is stored and shown to a reviewer."""
        return self.args_schema.dump(validated)

    async def needs_approval(self, ctx: RunContext[Any], validated: Any) -> bool:
        """Apply the approval policy to one call's validated arguments."""
        policy = self.requires_approval
        if isinstance(policy, bool):
            return policy
        verdict = policy(ctx, validated)
        if inspect.isawaitable(verdict):
            verdict = await verdict
        return bool(verdict)

    async def prepare_definition(self, ctx: RunContext[Any]) -> ToolDefinition | None:
        """This step's definition: the base one, passed through the `prepare` hook if any."""
        if self.prepare is None:
            return self.tool_def
        candidate = replace(self.tool_def, parameters_json_schema=copy.deepcopy(self.tool_def.parameters_json_schema))
        prepared = self.prepare(ctx, candidate)
        if inspect.isawaitable(prepared):
            prepared = await prepared
        if prepared is not None and prepared.name != self.name:
            raise ToolDefinitionError(
                f"tool {self.name!r}", [f"prepare hook renamed the tool to {prepared.name!r}; it may not"]
            )
        return prepared

    async def call(self, ctx: RunContext[Any], validated: Any) -> ToolReturn:
        """Run the function on validated arguments: sync functions in a worker thread, async awaited.

        `ModelRetry`, `ApprovalRequired` and any other exception propagate unchanged;
        timeouts and retry accounting belong to the caller.
        """
        positional, keyword = self.args_schema.call_args(validated)
        if self.takes_ctx:
            positional = (ctx, *positional)
        if self.is_async:
            result = await self.function(*positional, **keyword)
        else:
            result = await anyio.to_thread.run_sync(
                partial(self.function, *positional, **keyword), abandon_on_cancel=True
            )
        return result if isinstance(result, ToolReturn) else ToolReturn(return_value=result)


class _ValidatorArgs(ArgsSchema):
    """A given pydantic validator behind our interface (`Tool.from_validator`)."""

    def __init__(self, validator: SchemaValidator | TypeAdapter[Any], json_schema: dict[str, Any]) -> None:
        self._validator = validator
        self.json_schema = json_schema

    def validate_python(self, data: Any) -> Any:
        try:
            return self._validator.validate_python(data)
        except ValidationError as exc:
            raise ArgsInvalid(_pydantic_errors(exc)) from None

    def validate_json(self, data: str | bytes) -> Any:
        try:
            return self._validator.validate_json(data or "{}")
        except ValidationError as exc:
            raise ArgsInvalid(_pydantic_errors(exc)) from None

    def call_args(self, validated: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (), dict(validated)

    def dump(self, validated: Any) -> dict[str, Any]:
        dumped: dict[str, Any] = to_jsonable_python(validated)
        return dumped


def _copy_json(value: Any) -> Any:
    """A copy of JSON data, so a definition edited in place never changes the schema it came from.

    Tools of one function share that schema (it is built once); `copy.deepcopy` would do, slower.
    """
    if isinstance(value, dict):
        return {key: _copy_json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_copy_json(item) for item in value]
    return value


def _refuse_non_finite(dumped_args: dict[str, Any]) -> None:
    """Infinity and NaN cannot be stored, digested or shown: a validation error the model can fix."""
    path = non_finite_path(dumped_args)
    if path is not None:
        location = ".".join(map(str, path))
        raise ArgsInvalid([ArgError(location, "Input should be a finite number (not infinity or NaN)")])


def args_digest(dumped_args: dict[str, Any]) -> str:
    """Digest binding a decision to exactly these (dumped, validated) arguments."""
    return digest(dumped_args)


def check_tool_name(name: str) -> list[str]:
    """Problems with a tool name: providers' pattern and our reserved names."""
    problems = []
    if not TOOL_NAME_PATTERN.match(name):
        problems.append(f"name {name!r} is not accepted by providers: use 1-64 letters, digits, '_' or '-'")
    if name in RESERVED_TOOL_NAMES:
        problems.append(f"name {name!r} is reserved")
    return problems


@overload
def tool(function: FunctionT, /) -> Tool[Any]: ...
@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    retries: int | None = None,
    timeout: float | Literal[_Inherit.INHERIT] | None = INHERIT,
    prepare: ToolPrepareFunc | None = None,
    requires_approval: bool | ApprovalPredicate = False,
    idempotent: bool = False,
    approvals_required: int = 1,
    approval_ttl: float | None = None,
    strict: bool | None = None,
    sequential: bool = False,
    metadata: dict[str, Any] | None = None,
    docstring_format: DocstringFormat = "auto",
    require_parameter_descriptions: bool = False,
    allow_long_description: bool = False,
) -> Callable[[Callable[..., Any]], Tool[Any]]: ...
def tool(
    function: Callable[..., Any] | None = None, /, **options: Any
) -> Tool[Any] | Callable[[Callable[..., Any]], Tool[Any]]:
    """Decorator form of `Tool(fn, ...)`, with or without options: `@tool` or `@tool(requires_approval=True)`."""
    if function is not None:
        return Tool(function, **options)
    return lambda fn: Tool(fn, **options)
