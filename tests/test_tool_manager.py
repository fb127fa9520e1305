"""Points 2-5 and 8: context injection, validation feedback, retries, execution, returns, approval."""

from __future__ import annotations

import threading
from typing import Any

import anyio
import pytest
from pydantic import BaseModel

from approvals import (
    ApprovalRequired,
    ModelRetry,
    RunContext,
    Tool,
    ToolExecutionError,
    ToolRetriesExceeded,
    ToolReturn,
    UserError,
)
from approvals.engines.native._tool_manager import CallDeferred, CallRetry, CallSucceeded, ToolManager

from .helpers import Call

pytestmark = pytest.mark.anyio


def manager(*tools: Tool[Any], **options: Any) -> ToolManager[Any]:
    return ToolManager({t.name: t for t in tools}, **options)


def ctx(deps: Any = None) -> RunContext[Any]:
    return RunContext(deps=deps, run_id="run-1")


class Deps(BaseModel):
    user: str


# -- 2. context injection ---------------------------------------------------------------


async def test_run_context_is_injected_and_left_out_of_the_schema() -> None:
    seen: list[RunContext[Deps]] = []

    def whoami(ctx: RunContext[Deps], greeting: str) -> str:
        seen.append(ctx)
        return f"{greeting} {ctx.deps.user}"

    t = Tool(whoami)
    assert t.takes_ctx
    assert set(t.tool_def.parameters_json_schema["properties"]) == {"greeting"}
    [outcome] = await manager(t).handle_calls(ctx(Deps(user="ann")), [Call("whoami", {"greeting": "hi"}, "c-7")])
    assert isinstance(outcome, CallSucceeded)
    assert outcome.result.return_value == "hi ann"
    assert seen[0].tool_call_id == "c-7"
    assert seen[0].run_id == "run-1"
    assert seen[0].idempotency_key == "run-1:c-7"
    assert seen[0].retry == 0
    assert seen[0].tool_name == "whoami"


async def test_retry_count_is_visible_to_the_tool() -> None:
    retries_seen: list[int] = []

    def flaky(ctx: RunContext[None]) -> str:
        retries_seen.append(ctx.retry)
        if ctx.retry < 2:
            raise ModelRetry("try again")
        return "ok"

    m = manager(Tool(flaky, retries=2))
    outcomes = [(await m.handle_calls(ctx(), [Call("flaky")]))[0] for _ in range(3)]
    assert [type(o) for o in outcomes] == [CallRetry, CallRetry, CallSucceeded]
    assert retries_seen == [0, 1, 2]


# -- 3. validation with feedback ----------------------------------------------------------


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


async def test_arguments_as_json_string_or_dict() -> None:
    m = manager(Tool(add))
    for args in ('{"a": 1, "b": 2}', {"a": 1, "b": 2}):
        [outcome] = await m.handle_calls(ctx(), [Call("add", args)])
        assert isinstance(outcome, CallSucceeded)
        assert outcome.result.return_value == 3


async def test_invalid_arguments_become_a_model_friendly_retry() -> None:
    [outcome] = await manager(Tool(add)).handle_calls(ctx(), [Call("add", '{"a": "x"}')])
    assert isinstance(outcome, CallRetry)
    assert outcome.message == (
        "Tool call validation failed for tool 'add':\n"
        '- a: Input should be a valid integer, unable to parse string as an integer (got "x")\n'
        "- b: Field required\n"
        "Fix the errors and try again."
    )
    assert "Traceback" not in outcome.message


async def test_malformed_json_becomes_a_retry() -> None:
    [outcome] = await manager(Tool(add)).handle_calls(ctx(), [Call("add", '{"a": 1,')])
    assert isinstance(outcome, CallRetry)
    assert outcome.message.startswith("Tool call validation failed for tool 'add':\n- Invalid JSON")


async def test_unknown_tool_becomes_a_retry_naming_the_available_tools() -> None:
    [outcome] = await manager(Tool(add)).handle_calls(ctx(), [Call("subtract", {})])
    assert isinstance(outcome, CallRetry)
    assert outcome.message == "Unknown tool name: 'subtract'. Available tools: add."


async def test_model_retry_from_the_tool() -> None:
    def lookup(order_id: str) -> str:
        raise ModelRetry(f"No order {order_id!r}; order ids look like A-123.")

    [outcome] = await manager(Tool(lookup)).handle_calls(ctx(), [Call("lookup", {"order_id": "x"})])
    assert isinstance(outcome, CallRetry)
    assert outcome.message == "No order 'x'; order ids look like A-123."


async def test_retries_are_bounded_and_then_the_run_fails_clearly() -> None:
    m = manager(Tool(add, retries=2))
    for _ in range(2):
        [outcome] = await m.handle_calls(ctx(), [Call("add", {"a": "bad"})])
        assert isinstance(outcome, CallRetry)
    with pytest.raises(ToolRetriesExceeded) as err:
        await m.handle_calls(ctx(), [Call("add", {"a": "bad"})])
    assert err.value.tool_name == "add"
    assert err.value.max_retries == 2
    assert "exceeded its retry limit of 2" in str(err.value)


async def test_agent_default_retries_apply_when_the_tool_sets_none() -> None:
    m = manager(Tool(add), default_retries=0)
    with pytest.raises(ToolRetriesExceeded):
        await m.handle_calls(ctx(), [Call("add", {})])


async def test_a_success_resets_the_failure_count() -> None:
    m = manager(Tool(add, retries=1))
    for _ in range(3):
        assert isinstance((await m.handle_calls(ctx(), [Call("add", {})]))[0], CallRetry)
        assert isinstance((await m.handle_calls(ctx(), [Call("add", {"a": 1, "b": 1})]))[0], CallSucceeded)


async def test_a_tool_that_raises_fails_with_the_cause_attached() -> None:
    def boom() -> None:
        raise ValueError("disk on fire")

    with pytest.raises(ToolExecutionError, match=r"Tool 'boom' \(call call-1\) raised ValueError: disk on fire") as err:
        await manager(Tool(boom)).handle_calls(ctx(), [Call("boom")])
    assert isinstance(err.value.__cause__, ValueError)


# -- 4. execution ---------------------------------------------------------------------


async def test_sync_tools_run_in_a_worker_thread_and_async_tools_on_the_loop() -> None:
    threads: dict[str, int] = {}

    def sync_tool() -> None:
        threads["sync"] = threading.get_ident()

    async def async_tool() -> None:
        threads["async"] = threading.get_ident()

    await manager(Tool(sync_tool), Tool(async_tool)).handle_calls(ctx(), [Call("sync_tool"), Call("async_tool")])
    assert threads["async"] == threading.get_ident()
    assert threads["sync"] != threading.get_ident()


async def slow() -> str:
    await anyio.sleep(0.2)
    return "done"


async def stuck() -> str:
    await anyio.sleep_forever()
    return "never"


async def test_tool_timeout_becomes_a_retry_message() -> None:
    [outcome] = await manager(Tool(stuck, timeout=0.05)).handle_calls(ctx(), [Call("stuck")])
    assert isinstance(outcome, CallRetry)
    assert outcome.message == "Timed out after 0.05 seconds."


async def test_agent_default_timeout_applies_and_the_tool_value_wins() -> None:
    [outcome] = await manager(Tool(stuck), default_timeout=0.05).handle_calls(ctx(), [Call("stuck")])
    assert isinstance(outcome, CallRetry)
    assert outcome.message == "Timed out after 0.05 seconds."
    [outcome] = await manager(Tool(stuck, timeout=0.02), default_timeout=30).handle_calls(ctx(), [Call("stuck")])
    assert isinstance(outcome, CallRetry)
    assert outcome.message == "Timed out after 0.02 seconds."
    [outcome] = await manager(Tool(slow, timeout=None), default_timeout=0.01).handle_calls(ctx(), [Call("slow")])
    assert isinstance(outcome, CallSucceeded)
    assert outcome.result.return_value == "done"


async def test_timeouts_count_as_retries() -> None:
    m = manager(Tool(stuck, timeout=0.01, retries=0))
    with pytest.raises(ToolRetriesExceeded, match=r"Timed out after 0\.01 seconds"):
        await m.handle_calls(ctx(), [Call("stuck")])


async def test_concurrent_tools_overlap() -> None:
    """Two tools that each wait for the other can only finish when they run at the same time."""
    first, second = anyio.Event(), anyio.Event()

    async def ping() -> str:
        first.set()
        await second.wait()
        return "ping"

    async def pong() -> str:
        second.set()
        await first.wait()
        return "pong"

    with anyio.fail_after(5):  # guards against a deadlock, should the calls run one by one
        outcomes = await manager(Tool(ping), Tool(pong)).handle_calls(ctx(), [Call("ping"), Call("pong")])
    assert [o.result.return_value for o in outcomes if isinstance(o, CallSucceeded)] == ["ping", "pong"]


async def test_sequential_tool_runs_alone_and_order_is_kept() -> None:
    log: list[str] = []

    async def step(name: str) -> str:
        log.append(f"start {name}")
        await anyio.sleep(0.01)
        log.append(f"end {name}")
        return name

    async def alone(name: str) -> str:
        return await step(name)

    async def together(name: str) -> str:
        return await step(name)

    m = manager(Tool(alone, sequential=True), Tool(together))
    calls = [Call("together", {"name": "a"}), Call("alone", {"name": "b"}), Call("together", {"name": "c"})]
    outcomes = await m.handle_calls(ctx(), calls)
    assert [o.result.return_value for o in outcomes if isinstance(o, CallSucceeded)] == ["a", "b", "c"]
    b_start, b_end = log.index("start b"), log.index("end b")
    assert log.index("end a") < b_start
    assert b_end < log.index("start c")


# -- 5. rich returns --------------------------------------------------------------------


async def test_tool_return_keeps_metadata_apart() -> None:
    def shot(x: int) -> ToolReturn:
        return ToolReturn(return_value=f"clicked {x}", content=["before", "after"], metadata={"x": x})

    [outcome] = await manager(Tool(shot)).handle_calls(ctx(), [Call("shot", {"x": 4})])
    assert isinstance(outcome, CallSucceeded)
    assert outcome.result == ToolReturn(return_value="clicked 4", content=["before", "after"], metadata={"x": 4})


async def test_plain_returns_are_wrapped() -> None:
    class Out(BaseModel):
        n: int

    def make() -> Out:
        return Out(n=1)

    [outcome] = await manager(Tool(make)).handle_calls(ctx(), [Call("make")])
    assert isinstance(outcome, CallSucceeded)
    assert outcome.result == ToolReturn(return_value=Out(n=1))


# -- 8. approval policy -------------------------------------------------------------------


class RefundArgs(BaseModel):
    order_id: str
    amount: float


def refund(order_id: str, amount: float) -> str:
    return f"refunded {amount} on {order_id}"


async def test_static_approval_defers_with_validated_args_and_digest() -> None:
    executed: list[int] = []

    def delete_user(user_id: int) -> None:
        executed.append(user_id)

    m = manager(Tool(delete_user, requires_approval=True))
    [outcome] = await m.handle_calls(ctx(), [Call("delete_user", '{"user_id": "42"}')])
    assert isinstance(outcome, CallDeferred)
    assert outcome.validated.dumped_args == {"user_id": 42}
    assert len(outcome.validated.digest) == 64
    assert executed == []


async def test_predicate_on_validated_args_decides() -> None:
    m = manager(Tool(refund, requires_approval=lambda ctx, args: args.amount > 100))
    small, large = await m.handle_calls(
        ctx(),
        [
            Call("refund", {"order_id": "A", "amount": "20"}, "c1"),
            Call("refund", {"order_id": "B", "amount": 500}, "c2"),
        ],
    )
    assert isinstance(small, CallSucceeded)
    assert small.result.return_value == "refunded 20.0 on A"
    assert isinstance(large, CallDeferred)
    assert large.validated.call.tool_call_id == "c2"


async def test_async_predicate_sees_the_context() -> None:
    async def over_limit(ctx: RunContext[dict[str, int]], args: Any) -> bool:
        return bool(args.amount > ctx.deps["limit"])

    m = manager(Tool(refund, requires_approval=over_limit))
    [outcome] = await m.handle_calls(ctx({"limit": 10}), [Call("refund", {"order_id": "A", "amount": 11})])
    assert isinstance(outcome, CallDeferred)


async def test_tool_may_raise_approval_required_itself_and_runs_once_approved() -> None:
    def transfer(ctx: RunContext[None], amount: int) -> str:
        if amount > 10 and not ctx.approved:
            raise ApprovalRequired("large transfer")
        return f"sent {amount}"

    m = manager(Tool(transfer))
    [outcome] = await m.handle_calls(ctx(), [Call("transfer", {"amount": 50})])
    assert isinstance(outcome, CallDeferred)
    assert outcome.reason == "large transfer"
    approved = await m.execute(ctx(), outcome.validated, approved=True)
    assert isinstance(approved, CallSucceeded)
    assert approved.result.return_value == "sent 50"


async def test_approval_required_after_approval_is_a_clear_error() -> None:
    def nag() -> None:
        raise ApprovalRequired()

    m = manager(Tool(nag))
    [outcome] = await m.handle_calls(ctx(), [Call("nag")])
    assert isinstance(outcome, CallDeferred)
    with pytest.raises(UserError, match="already approved"):
        await m.execute(ctx(), outcome.validated, approved=True)


async def test_mixed_step_runs_safe_calls_and_defers_the_risky_one() -> None:
    m = manager(Tool(add), Tool(refund, requires_approval=True))
    outcomes = await m.handle_calls(
        ctx(),
        [
            Call("add", {"a": 1, "b": 2}, "c1"),
            Call("refund", {"order_id": "A", "amount": 1}, "c2"),
            Call("add", {}, "c3"),
        ],
    )
    assert [type(o) for o in outcomes] == [CallSucceeded, CallDeferred, CallRetry]
