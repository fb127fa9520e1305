"""How long building a tool and validating one call take.

Targets (issue 2): `Tool(fn)` for six parameters and a Google docstring under 1 ms;
validating one call's arguments under 50 µs. Prints the best of several repeats
(the least disturbed by other work on the machine) and the median.

Issue 16: our `Tool(fn)` at most half of pydantic-ai's for the same function, timed here
in the same run. A function described again reuses its built schema ("repeated"); a new
function object is built from scratch ("first build": copies of `refund`, each new).
"""

from __future__ import annotations

import statistics
import timeit
import types
from collections.abc import Callable, Iterator
from typing import Annotated, Any, Literal

from pydantic import Field

from approvals import Tool
from approvals.engines.native.tools import args_digest


def refund(
    order_id: str,
    amount: Annotated[float, Field(gt=0)],
    currency: Literal["EUR", "USD", "GBP"] = "EUR",
    reason: str | None = None,
    notify_customer: bool = True,
    tags: list[str] | None = None,
) -> str:
    """Refund part or all of an order.

    Args:
        order_id: The order to refund.
        amount: How much to refund.
        currency: Currency of the amount.
        reason: Why, for the customer's record.
        notify_customer: Email the customer about it.
        tags: Labels for reporting.

    Returns:
        The refund's reference.
    """
    return "R-1"


def report(label: str, fn: object, number: int, repeat: int = 7) -> None:
    times = [t / number for t in timeit.repeat(fn, number=number, repeat=repeat)]  # type: ignore[arg-type]
    print(f"{label:<48} best {min(times) * 1e6:8.1f} µs   median {statistics.median(times) * 1e6:8.1f} µs")


def fresh_copies(function: Callable[..., Any], count: int) -> Iterator[Callable[..., Any]]:
    """New function objects with `function`'s code, docstring and annotations: never described before."""
    for _ in range(count):
        copy = types.FunctionType(function.__code__, function.__globals__, function.__name__, function.__defaults__)
        copy.__annotations__ = dict(function.__annotations__)
        copy.__kwdefaults__ = function.__kwdefaults__
        yield copy


def compare_with_pydantic_ai() -> None:
    """Both `Tool(fn)`s on the same functions, and our time as a share of pydantic-ai's.

    The four timings take turns, repeat after repeat, so a busy moment on the machine
    falls on both sides alike.
    """
    try:
        from pydantic_ai import Tool as PydanticAiTool
    except ImportError:
        print("pydantic-ai is not installed (it is in the dev group): no comparison")
        return
    number, repeat = 200, 7
    ours_copies, their_copies = fresh_copies(refund, number * repeat), fresh_copies(refund, number * repeat)
    best = interleaved(
        {
            "Tool(fn), repeated (schema reused)": lambda: Tool(refund),
            "Tool(fn), first build (a new function)": lambda: Tool(next(ours_copies)),
            "pydantic-ai Tool(fn), same function": lambda: PydanticAiTool(refund),
            "pydantic-ai Tool(fn), a new function": lambda: PydanticAiTool(next(their_copies)),
        },
        number=number,
        repeat=repeat,
    )
    ours_repeated, ours_first, theirs, theirs_first = best
    print(f"ours / pydantic-ai, repeated: {ours_repeated / theirs:.2f}x   (issue 16: at most 0.5x)")
    print(f"ours / pydantic-ai, first build: {ours_first / theirs_first:.2f}x")


def interleaved(candidates: dict[str, Callable[[], object]], number: int, repeat: int) -> list[float]:
    """Time each candidate `repeat` times in turns; print as `report` does and return the bests."""
    times: dict[str, list[float]] = {label: [] for label in candidates}
    for _ in range(repeat):
        for label, fn in candidates.items():
            times[label].append(timeit.timeit(fn, number=number) / number)
    for label, measured in times.items():
        print(f"{label:<48} best {min(measured) * 1e6:8.1f} µs   median {statistics.median(measured) * 1e6:8.1f} µs")
    return [min(measured) for measured in times.values()]


def main() -> None:
    tool = Tool(refund)
    as_json = '{"order_id": "A-1", "amount": 12.5, "currency": "USD", "tags": ["late"]}'
    as_dict = {"order_id": "A-1", "amount": 12.5, "currency": "USD", "tags": ["late"]}
    report("Tool(fn), 6 parameters + Google docstring", lambda: Tool(refund), number=200)
    report("validate one call (JSON string)", lambda: tool.validate_args(as_json), number=20_000)
    report("validate one call (dict)", lambda: tool.validate_args(as_dict), number=20_000)
    validated = tool.validate_args(as_dict)
    report("dump + digest of validated args", lambda: args_digest(tool.dump_args(validated)), number=20_000)
    compare_with_pydantic_ai()


if __name__ == "__main__":
    main()
