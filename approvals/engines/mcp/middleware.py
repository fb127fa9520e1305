"""The gate in front of one upstream server's tools: every `tools/call` asks approvals before it is forwarded.

One `ApprovalMiddleware` sits on each upstream's proxy (see proxy.py), so it knows the
upstream's name and sees the tool's own name, definition and annotations, whatever prefix
the gateway shows the client. A call is forwarded only on an `approved` answer, with the
arguments that answer carries (a reviewer's edit); every other path ends in a tool error
(`isError`) the model reads, or a reviewer's answer in the tool's place.

Waiting is long polls of the gate, so it needs nothing from the MCP client but patience:
no server-initiated request (MCP's 2026-07-28 revision removes them), only progress
notifications between polls when the client asked for them. A client that disconnects
cancels the wait: the call stays pending in the inbox, nothing is forwarded, and the
client's retry with the same arguments finds the call again (`same_arguments_same_call`):
an approval is only ever acted on by a live request.

Over stdio the client's going ends the gateway's session (and its process), which cancels
the wait. Over streamable HTTP it does not: the SDK runs a tool call in the MCP session's
task group, apart from the POST whose SSE stream carries its answer, and the session outlives
a client killed mid-call (nothing sends `notifications/cancelled`; the session only ends
after its idle timeout). So the middleware watches the POST itself (`ClientRequest`): its
ASGI `http.disconnect` cancels the wait, whose long poll then closes and the approvals server
hands nothing out (it checks the poll is still open first); and right before forwarding the
request is checked once more.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import anyio
import mcp.types as mt
from fastmcp import FastMCP
from fastmcp.exceptions import ToolError
from fastmcp.server.context import Context
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from fastmcp.tools.base import Tool, ToolResult

from .gate_client import GateAnswer, GateClient, GateRefused, GateUnavailable, InvalidArguments
from .outcomes import OutcomeOutbox

__all__ = ("ApprovalMiddleware", "ClientRequest", "GateSettings")

logger = logging.getLogger("approvals.mcp")

DEFAULT_WAIT = 300.0
"""Seconds a tool call waits for a person by default: reviewers reached by Slack or e-mail need minutes,
while an agent's turn should not hang for ever; past it the model is told the call still waits."""
POLL_EVERY = 10.0
"""Seconds per long poll: between two polls the client hears a progress notification."""
RETRY_EVERY = 1.0
"""Seconds between tries while the approvals server cannot be reached during a wait (a restart, say)."""
REPORT_GRACE = 10.0
"""Seconds an outcome report told on the call's path (the outbox could not keep it) may take."""


@dataclass(frozen=True)
class GateSettings:
    """How the gateway asks: who it says it is, which session, how long it waits."""

    source: str | None = None
    """`--source`: the agent name when the client gives none in `initialize`."""
    session: str | None = None
    """`--session`: the session (run) every call goes to; None: `default_session(client)`."""
    wait: float = DEFAULT_WAIT
    poll_every: float = POLL_EVERY


class ApprovalMiddleware(Middleware):
    """Asks approvals about each call to `upstream`'s tools, and forwards only approved ones."""

    def __init__(
        self,
        upstream: str,
        proxy: FastMCP[Any],
        gate: GateClient,
        settings: GateSettings,
        default_session: Callable[[str], str],
        outbox: OutcomeOutbox,
    ) -> None:
        self.upstream = upstream
        self.proxy = proxy
        self.gate = gate
        self.outbox = outbox
        self.settings = settings
        self.default_session = default_session

    async def on_call_tool(
        self, context: MiddlewareContext[mt.CallToolRequestParams], call_next: CallNext[mt.CallToolRequestParams, Any]
    ) -> Any:
        name = context.message.name
        args = dict(context.message.arguments or {})
        tool = await self.proxy.get_tool(name)
        if tool is None:  # fail closed: nothing we could not ask about is forwarded
            raise ToolError(f"No tool {name!r} on the MCP server {self.upstream!r}")
        ctx = context.fastmcp_context
        client = _client_name(ctx)
        source = client or self.settings.source or "mcp"
        request = ClientRequest.of(ctx)
        try:
            answer = await self._decision_while_there(request, ctx, tool, args, source=source, client=client)
        except InvalidArguments as exc:  # the model's to fix: not an outage
            raise ToolError(
                f"{name} was not run: its arguments are not valid ({exc.errors}). "
                f"Call {name} again with arguments that match its input schema."
            ) from None
        except GateUnavailable as exc:
            raise ToolError(f"approvals could not be asked, so {name} was not run: {exc}") from None
        if answer.decision == "approved" and not answer.handed_out:  # two identical calls waited on one approval
            raise ToolError(
                f"{name} was not run by this request: its call {answer.call_id} was approved once and handed to "
                "another request with the same arguments, which runs it."
            )
        if answer.decision == "approved" and await request.gone():  # the last look before forwarding
            await self._not_forwarded(answer)
            raise ToolError(f"{name} was not run: the client left before it could be.")
        if answer.decision == "approved":
            edited = dict(answer.args) if isinstance(answer.args, dict) else args
            forwarded = context.copy(message=context.message.model_copy(update={"arguments": edited}))
            return await self._forward(forwarded, call_next, answer)
        if answer.decision == "answered":
            return ToolResult(content=_text(answer.answer))
        if answer.decision == "denied":
            raise ToolError(f"Denied by approvals: {answer.reason or 'no reason given'}")
        raise ToolError(f"Not run: {answer.reason or 'nobody decided in time; the call expired.'}")

    async def _decision_while_there(
        self,
        request: ClientRequest,
        ctx: Context | None,
        tool: Tool,
        args: dict[str, Any],
        *,
        source: str,
        client: str | None,
    ) -> GateAnswer:
        """`_decision`, cancelled as soon as the client's HTTP request is gone (a `ToolError` then).

        Cancelling closes the long poll in flight, so the approvals server hands nothing out: an
        approved call stays approved for the client's retry with the same arguments to find.
        """
        asked: list[GateAnswer] = []
        outcome: GateAnswer | Exception | None = None
        async with anyio.create_task_group() as group:

            async def cancel_when_gone() -> None:
                await request.wait_gone()
                group.cancel_scope.cancel()

            group.start_soon(cancel_when_gone)
            try:
                outcome = await self._decision(ctx, tool, args, source=source, client=client, asked=asked)
            except Exception as exc:  # raised outside the task group, not wrapped in an exception group
                outcome = exc
            group.cancel_scope.cancel()
        if isinstance(outcome, Exception):
            raise outcome
        if outcome is None:  # the watcher cancelled the wait
            where = f"call {asked[-1].call_id} stays {asked[-1].status}" if asked else "it may not have been stored"
            logger.warning(
                "the MCP client left while %s waited for approval: the wait is cancelled and nothing is forwarded; "
                "%s for a retry with the same arguments",
                tool.name,
                where,
            )
            raise ToolError(f"{tool.name} was not run: the client left while it waited for approval.")
        return outcome

    async def _not_forwarded(self, answer: GateAnswer) -> None:
        """The client left between the gate's approval and the forward: nothing runs.

        If the approvals server had handed the call out already (the client left in the moment
        between its check that the gateway's poll was open and ours), the call is `executing`
        with nobody to run it; it is settled `failed`, saying it never ran, rather than left
        `executing` for ever, and a retry asks anew.
        """
        if answer.status == "executing":
            why = "not run: the MCP client left after the approval, before the call was forwarded to its server"
            await self._report(answer, "failed", {"error": why})
        logger.warning(
            "the MCP client left before approved call %s was forwarded: nothing ran (the call is %s)",
            answer.call_id,
            "settled failed" if answer.status == "executing" else f"still {answer.status}",
        )

    async def _decision(
        self,
        ctx: Context | None,
        tool: Tool,
        args: dict[str, Any],
        *,
        source: str,
        client: str | None,
        asked: list[GateAnswer],
    ) -> GateAnswer:
        """The call's decision, asked for and waited on up to `settings.wait` seconds."""
        wait = self.settings.wait
        deadline = time.monotonic() + wait
        body = {
            "engine": "mcp",
            "same_arguments_same_call": True,
            "idempotency_key": f"mcp-{uuid.uuid4().hex}",
            "source": source,
            "session_id": self.settings.session or self.default_session(source),
            "tool_name": tool.name,
            "args": args,
            "json_schema": tool.parameters,
            "description": tool.description or "",
            "context": {
                "mcp_server": self.upstream,
                "annotations": _annotations(tool),
                "client": client,
            },
        }
        answer = await self.gate.ask(body, wait=min(self.settings.poll_every, wait))
        asked.append(answer)
        problem: GateUnavailable | None = None
        while answer.decision == "pending":
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ToolError(_still_waiting(tool.name, answer, problem))
            await _progress(ctx, wait - remaining, wait, f"Waiting for a person to approve {tool.name}: {answer.url}")
            try:
                answer = await self.gate.wait(answer.call_id, wait=min(self.settings.poll_every, remaining))
                problem = None
            except GateRefused:
                raise
            except GateUnavailable as exc:  # the call is stored: keep asking until the deadline
                problem = exc
                await anyio.sleep(min(RETRY_EVERY, max(deadline - time.monotonic(), 0)))
        return answer

    async def _forward(
        self,
        context: MiddlewareContext[mt.CallToolRequestParams],
        call_next: CallNext[mt.CallToolRequestParams, Any],
        answer: GateAnswer,
    ) -> Any:
        """Run the approved call on the upstream and report how it went (the call is `executing` until then);
        the report goes through the outbox, so the result reaches the client without waiting for it.

        An upstream error result is the outcome `failed` and goes back to the model as it is. An
        exception (the upstream process died, the connection broke, the client went away
        mid-call) is `outcome_unknown`: the upstream may have acted before it failed, so a
        person settles it in the inbox rather than anyone running it again.
        """
        try:
            result = await call_next(context)
        except BaseException as exc:
            await self._report(answer, "outcome_unknown", {"error": _describe(exc)})
            if isinstance(exc, Exception):  # the proxy raises a dead upstream's "Connection closed" as a ToolError
                raise ToolError(
                    f"The MCP server {self.upstream!r} failed while running the approved call ({_describe(exc)}); "
                    f"it may or may not have acted. Its outcome is for a person to settle: {answer.url}"
                ) from None
            raise
        await self._report(answer, "failed" if getattr(result, "is_error", False) else "succeeded", _result(result))
        return result

    async def _report(self, answer: GateAnswer, outcome: str, result: Any) -> None:
        """Kept in the outbox before the client hears anything, and sent to approvals off the client's path;
        told at once, on the path, when the outbox cannot keep it (a full disk)."""
        try:
            self.outbox.put(answer.call_id, outcome, result)
            return
        except OSError as exc:
            logger.warning("could not keep the outcome of call %s (%s): reporting it now", answer.call_id, exc)
        with anyio.CancelScope(shield=True), anyio.move_on_after(REPORT_GRACE):
            try:
                await self.gate.report(answer.call_id, outcome, result)
            except GateUnavailable as exc:  # the call stays `executing` for a person to settle
                logger.warning("could not report the outcome of call %s (%s): %s", answer.call_id, outcome, exc)


@runtime_checkable
class Request(Protocol):
    """What the gateway uses of the HTTP request a call came on (Starlette's, under FastMCP), by its shape:
    the core imports no web framework."""

    async def is_disconnected(self) -> bool: ...

    async def receive(self) -> Any: ...


class ClientRequest:
    """The HTTP request a tool call came on (streamable HTTP), to tell whether its client is still there.

    The POST's body is read by then, so the only message its ASGI `receive` has left is
    `http.disconnect` (the connection closed, or the response ended), which stays: reading
    it here takes nothing from the SSE response that also listens for it. Over stdio there
    is no request and the client never counts as gone here (its going ends the session).
    """

    def __init__(self, request: Request | None) -> None:
        self._request = request
        self._gone = False

    @classmethod
    def of(cls, ctx: Context | None) -> ClientRequest:
        try:
            request_context = ctx.request_context if ctx is not None else None
        except RuntimeError:
            request_context = None
        request = getattr(request_context, "request", None)
        return cls(request if isinstance(request, Request) else None)

    async def gone(self) -> bool:
        """Whether the client's connection closed, without waiting."""
        if self._request is not None and not self._gone:
            self._gone = await self._request.is_disconnected()
        return self._gone

    async def wait_gone(self) -> None:
        """Return once the client's connection closed (never over stdio)."""
        if self._request is None:
            await anyio.sleep_forever()
            return
        while (await self._request.receive())["type"] != "http.disconnect":
            pass
        self._gone = True


def _client_name(ctx: Context | None) -> str | None:
    """The client's name from `initialize` (clientInfo.name), if it gave one."""
    try:
        params = ctx.session.client_params if ctx is not None else None
    except RuntimeError:
        return None
    name = params.client_info.name if params is not None else None
    return name.strip()[:200] or None if isinstance(name, str) else None


def _annotations(tool: Tool) -> dict[str, Any]:
    """The upstream's hints (`readOnlyHint`, `destructiveHint`, ...) as rules read them in `context.annotations`."""
    if tool.annotations is None:
        return {}
    dumped: dict[str, Any] = tool.annotations.model_dump(mode="json", by_alias=True, exclude_none=True)
    return dumped


def _still_waiting(tool: str, answer: GateAnswer, problem: GateUnavailable | None) -> str:
    why = f" (the approvals server could not be reached at the end: {problem})" if problem else ""
    return (
        f"{tool} was not run yet: call {answer.call_id} is still waiting for a person's approval at {answer.url}{why}. "
        f"Calling {tool} again with the same arguments continues waiting for this call instead of asking again."
    )


async def _progress(ctx: Context | None, done: float, total: float, message: str) -> None:
    """A progress notification, if the client asked for them; a failure to send one does not end the wait."""
    if ctx is None:
        return
    try:
        await ctx.report_progress(progress=round(done, 1), total=total, message=message)
    except Exception as exc:  # a closed stream: the cancel that follows ends the wait
        logger.debug("progress notification not sent: %s", exc)


def _text(value: Any) -> list[mt.ContentBlock]:
    text = value if isinstance(value, str) else json.dumps(value)
    return [mt.TextContent(type="text", text=text)]


def _result(result: Any) -> Any:
    """A tool result as the call's stored outcome: its structured content, else its text (or its blocks)."""
    structured = getattr(result, "structured_content", None)
    if structured is not None:
        return structured
    blocks: Sequence[Any] = getattr(result, "content", None) or []
    if all(isinstance(block, mt.TextContent) for block in blocks):
        return "\n".join(block.text for block in blocks)
    return [block.model_dump(mode="json", by_alias=True, exclude_none=True) for block in blocks]


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text[:300]}" if text else type(exc).__name__
