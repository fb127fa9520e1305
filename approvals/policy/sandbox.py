"""Conditions that are not provably cheap run in a separate process, with a time budget.

The Rust evaluator holds the GIL while it runs (measured: a thread evaluating a 0.15 s
condition stops every other thread of the process for as long), and a thread cannot be
stopped. So a condition whose cost depends on the call, or is estimated above
`cost.INLINE_COST`, is sent to one worker process over a pipe (`_evaluator_process`), started
the first time one is needed. When an evaluation outlasts the budget (`condition_budget`,
0.2 s unless set; `APPROVALS_CONDITION_BUDGET` for the server and workers), the process is
killed, the condition counts as failed (the call asks a person), and the next evaluation starts
a new process. One evaluation runs at a time; callers on an event loop wait in a thread
(`RuleSet.needs_worker` tells them when to), so the loop never waits for a condition.
"""

from __future__ import annotations

import atexit
import json
import os
import pickle
import select
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

__all__ = (
    "DEFAULT_BUDGET",
    "EvaluatorFailed",
    "OverBudget",
    "condition_budget",
    "evaluator",
    "set_condition_budget",
)

DEFAULT_BUDGET = 0.2
"""Seconds one evaluation of a condition may take before it counts as failed."""
START_TIMEOUT = 10.0
"""Seconds the worker process may take to be ready (not counted in an evaluation's budget)."""
_HEADER = struct.Struct(">I")
_SCRIPT = Path(__file__).with_name("_evaluator_process.py")
_budget = DEFAULT_BUDGET


def set_condition_budget(seconds: float) -> None:
    """The time one evaluation of a condition may take in this process (the server's and workers' setting)."""
    global _budget
    if not 0 < seconds <= 60:
        raise ValueError("a condition's time budget is more than 0 and at most 60 seconds")
    _budget = float(seconds)


def condition_budget() -> float:
    return _budget


class EvaluatorFailed(Exception):
    """The worker process could not evaluate: it did not start, or it stopped."""


class OverBudget(EvaluatorFailed):
    """The evaluation outlasted its budget; the process was killed."""


class Evaluator:
    """One worker process, started when first needed and again after it is killed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._owner = 0
        self.starts = 0
        """How many processes this evaluator started (tests read it)."""

    @property
    def pid(self) -> int | None:
        process = self._process
        return process.pid if process is not None and process.poll() is None else None

    def evaluate(self, text: str, variables: dict[str, Any], budget: float | None = None) -> dict[str, Any]:
        """The worker's answer for `text` over `variables`.

        `OverBudget` past `budget` seconds (the process is killed), `EvaluatorFailed` if it could not answer.
        """
        budget = _budget if budget is None else budget
        try:
            request = pickle.dumps((text, variables), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # a value that cannot be sent is one CEL could not take either
            raise EvaluatorFailed(f"TypeError: cannot pass the call's values: {exc}") from None
        with self._lock:
            process = self._running()
            assert process.stdin is not None
            assert process.stdout is not None
            started = time.monotonic()
            try:
                process.stdin.write(_HEADER.pack(len(request)) + request)
                process.stdin.flush()
                answer = _frame(process.stdout.fileno(), started + budget)
            except TimeoutError:
                self._stop()
                raise OverBudget(f"the condition took longer than its time budget ({budget:g} s)") from None
            except (OSError, EOFError) as exc:
                self._stop()
                raise EvaluatorFailed(f"the condition's evaluator stopped ({exc or type(exc).__name__})") from None
        found: dict[str, Any] = json.loads(answer)
        return found

    def close(self) -> None:
        with self._lock:
            self._stop()

    def _running(self) -> subprocess.Popen[bytes]:
        process = self._process
        if process is not None and process.poll() is None and self._owner == os.getpid():
            return process
        self._process = None
        try:
            process = subprocess.Popen(  # noqa: S603 - this interpreter and our own script
                [sys.executable, str(_SCRIPT)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0
            )
        except OSError as exc:
            raise EvaluatorFailed(f"the condition's evaluator did not start: {exc}") from None
        self.starts += 1
        self._process, self._owner = process, os.getpid()
        assert process.stdout is not None
        try:
            _frame(process.stdout.fileno(), time.monotonic() + START_TIMEOUT)
        except (TimeoutError, OSError, EOFError) as exc:
            self._stop()
            raise EvaluatorFailed(f"the condition's evaluator did not start ({exc or type(exc).__name__})") from None
        return process

    def _stop(self) -> None:
        process, self._process = self._process, None
        if process is None or self._owner != os.getpid():
            return
        if process.poll() is None:
            process.kill()
        process.wait()
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                stream.close()


def _frame(fd: int, deadline: float) -> bytes:
    """One answer from the worker by `deadline` (monotonic): `TimeoutError` past it, `EOFError` if it stopped."""
    size = _HEADER.unpack(_read(fd, _HEADER.size, deadline))[0]
    return _read(fd, size, deadline) if size else b""


def _read(fd: int, size: int, deadline: float) -> bytes:
    data = b""
    while len(data) < size:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
            raise TimeoutError
        chunk = os.read(fd, size - len(data))
        if not chunk:
            raise EOFError("it exited")
        data += chunk
    return data


_EVALUATOR = Evaluator()
atexit.register(_EVALUATOR.close)


def evaluator() -> Evaluator:
    """This process's evaluator."""
    return _EVALUATOR
