"""The application's front door: what the web app, the API and the CLI call.

It joins the store (durable state) with the agent registry (the tools' validators), so a
reviewer's edited arguments are checked by the same validator that checked the model's,
a run can only be started for an agent this process knows, and a resume can be run on
the spot and waited for.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
from anyio.abc import TaskGroup
from typing_extensions import TypeVarTuple

from . import tracing
from .calls import CallRequest, validate_request, validate_with_schema
from .calls.bounded_jsonschema import TooCostly, quick_pass
from .calls.canonical import digest
from .calls.states import RESUMABLE_RUN_STATUSES, SETTLED_RUN_STATUSES
from .calls.tools import ArgsValidator
from .calls.verdicts import EditAndApprove, Verdict
from .engines import EngineKind, get_engine
from .exceptions import Conflict, InvalidArguments, InvalidEdit, NotFound, ToolRetryError
from .logs import with_call
from .store import RUNS_CHANNEL, Actor, Store
from .store.errors import is_transient
from .store.models import RunRow, ToolCallRow
from .worker.resumer import AgentRegistry, Resumer

__all__ = ("ApprovalService",)

logger = logging.getLogger("approvals.service")
T = TypeVar("T")
Ts = TypeVarTuple("Ts")


class ApprovalService:
    """Starting runs, deciding calls and resuming runs, with validation and permissions."""

    def __init__(
        self,
        store: Store,
        registry: AgentRegistry,
        *,
        worker_id: str | None = None,
        background: TaskGroup | None = None,
    ) -> None:
        self.store = store
        self.registry = registry
        self.resumer = Resumer(store, registry, worker_id=worker_id)
        self.background = background
        """Where resumes started by `resume_now` run, so they outlive the request that asked."""

    async def start_run(self, agent_name: str, prompt: str, *, actor: Actor, deps: Any = None) -> str:
        """Queue a run of a registered agent; returns its id."""
        registered = self.registry.get(agent_name)  # NotFound for an agent this deployment does not know
        engine = registered.engine.name if registered.engine is not None else "native"
        return await self.store.start_run(agent_name, prompt, actor=actor, deps=deps, engine=engine)

    def registered_tool(self, agent_name: str, tool_name: str) -> ArgsValidator | None:
        """The tool an agent registered in this process has under that name, if any."""
        if agent_name not in self.registry:
            return None
        return self.registry.get(agent_name).agent.tools.get(tool_name)

    async def request_call(
        self, request: CallRequest, *, actor: Actor, hand_out: bool = False
    ) -> tuple[ToolCallRow, bool]:
        """Ask people about one call of an agent that runs elsewhere; returns the call and whether it is new.

        The arguments are validated against the request's JSON Schema, else the registered
        tool of that name, else taken as any JSON object; `InvalidArguments` lists the errors.
        `hand_out`: the caller runs a call a standing rule allows at once, so it is stored handed
        out (`executing`) in the same transaction.
        """
        tool = self.registered_tool(request.source, request.tool_name) if request.json_schema is None else None
        validated = await _off_the_loop_if_slow(validate_request, request, tool)
        return await self.store.request_call(validated, actor=actor, hand_out=hand_out)

    async def validate_edit(self, call: ToolCallRow, args: Any) -> dict[str, Any]:
        """A reviewer's edited arguments, checked by the validator that checked the call's own.

        That is the tool's own validator for a registered agent's call, and the JSON Schema
        stored with the call for one that was requested with a schema (a gate's). `InvalidEdit`
        lists the field errors.
        """
        tool = self.registered_tool(call.agent_name, call.tool_name)
        if tool is not None:
            try:
                validated = tool.validate_args(args if isinstance(args, dict | str) else {})
            except ToolRetryError as exc:
                raise InvalidEdit(call.tool_name, exc.errors, exc.message) from None
            return tool.dump_args(validated)
        run = await self.store.get_run(call.run_id)
        if get_engine(run.engine).kind is not EngineKind.GATE:
            raise NotFound(f"Tool {call.tool_name!r} of agent {call.agent_name!r} is not available to validate edits")
        definition = await self.store.tool_definition(call.tool_version)
        try:
            schema = definition.parameters_json_schema
            return await _off_the_loop_if_slow(validate_with_schema, call.tool_name, schema, args)
        except InvalidArguments as exc:
            raise InvalidEdit(exc.tool_name, exc.errors, str(exc)) from None

    async def decide(self, call_id: str, verdict: Verdict, *, actor: Actor) -> ToolCallRow:
        """Record a verdict; edits are validated first and nothing is saved when they fail."""
        with with_call(call_id):  # lines logged while deciding name the call
            if isinstance(verdict, EditAndApprove):
                call = await self.store.get_call(call_id)
                edited = await self.validate_edit(call, verdict.args)
                verdict = EditAndApprove(args=edited, args_digest=verdict.args_digest)
            with tracing.deciding(call_id, verdict) as trace:
                decided, trace.run_trace_context = await self.store.record_verdict(call_id, verdict, actor=actor)
            logger.info("call %s (%s) decided by %s: %s", call_id, decided.tool_name, actor.id, decided.status)
            return decided

    async def resumable_run(self, run_id: str) -> RunRow:
        """The run, when it can be resumed now (ready, or being resumed); `Conflict` when it cannot."""
        run = await self.store.get_run(run_id)
        if run.status not in RESUMABLE_RUN_STATUSES:
            raise Conflict(f"Run {run_id!r} is {run.status}, not ready to resume", status=run.status)
        return run

    async def resume_now(self, run_id: str, *, wait: float = 30.0) -> RunRow:
        """Continue a ready run in this process, waiting up to `wait` seconds for it to settle.

        The resume itself is never cut short by the wait: abandoning a run midway would leave
        its lease held and an executing call's outcome unknown. With a `background` task group
        (the web app's) it goes on there after the wait; without one, the wait ends when it does.
        If another worker already holds the run, wait for that worker instead.
        """
        async with self.store.notifier.listen(RUNS_CHANNEL) as changes:
            with anyio.move_on_after(wait):
                if self.background is not None:
                    self.background.start_soon(self._resume_logged, run_id)
                else:
                    with anyio.CancelScope(shield=True):
                        await self.resumer.resume(run_id)
                while (await self.store.get_run(run_id)).status not in SETTLED_RUN_STATUSES:
                    with anyio.move_on_after(1.0):  # a missed wake-up costs at most a second
                        while await changes.receive() != run_id:
                            pass
        return await self.store.get_run(run_id)

    async def _resume_logged(self, run_id: str) -> None:
        """A resume in the app's task group: its failure is logged, never allowed to end the app's other tasks."""
        try:
            await self.resumer.resume(run_id)
        except Exception as exc:
            if is_transient(exc):
                logger.warning("run %s: resume stopped by a database outage (%s); a worker retries", run_id, exc)
            else:
                logger.exception("run %s: resume failed", run_id)

    @staticmethod
    def args_digest(args: dict[str, Any]) -> str:
        """The digest a reviewer's client sends back to bind an approval to what it showed."""
        return digest(args)


async def _off_the_loop_if_slow(check: Callable[[*Ts], T], *args: *Ts) -> T:
    """`check(*args)` here if it takes at most a few milliseconds, else again in a worker thread.

    A caller's schema may take up to a second to check (`calls.bounded_jsonschema`), which must never be
    the event loop's; a thread hop costs ~200 µs, more than most checks take, so each is tried first
    where it is, within `QUICK_SECONDS`.
    """
    try:
        with quick_pass():
            return check(*args)
    except TooCostly:
        return await anyio.to_thread.run_sync(check, *args)
