"""How long building a tool and validating one call take.

Targets (issue 2): `Tool(fn)` for six parameters and a Google docstring under 1 ms;
validating one call's arguments under 50 µs. Prints the best of several repeats
(the least disturbed by other work on the machine) and the median.
"""

from __future__ import annotations

import statistics
import timeit
from typing import Annotated, Literal

from pydantic import Field

from approvals import Tool
from approvals.tools import args_digest


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


def main() -> None:
    tool = Tool(refund)
    as_json = '{"order_id": "A-1", "amount": 12.5, "currency": "USD", "tags": ["late"]}'
    as_dict = {"order_id": "A-1", "amount": 12.5, "currency": "USD", "tags": ["late"]}
    report("Tool(fn), 6 parameters + Google docstring", lambda: Tool(refund), number=200)
    report("validate one call (JSON string)", lambda: tool.validate_args(as_json), number=20_000)
    report("validate one call (dict)", lambda: tool.validate_args(as_dict), number=20_000)
    validated = tool.validate_args(as_dict)
    report("dump + digest of validated args", lambda: args_digest(tool.dump_args(validated)), number=20_000)


if __name__ == "__main__":
    main()
