"""How forwarded calls went, reported to approvals off the caller's path and never lost (issue 41).

An approved call's outcome used to be reported before the model got its result: a second
round trip to the approvals server on every allowed call. Now the gateway writes the report
to a folder of its own (one file a call, written whole then renamed into place) and answers
the client at once; a task sends the files in order and removes each once the server took it
(or already had it). A gateway that exits or is killed right after answering leaves its
files, and the next gateway on the same folder sends them first. A report the server refuses
for good (a bad token, an unknown call) is moved to `refused/`, kept for a person, not retried.

The folder is per approvals server (`default_folder`): reports go where their calls live.
A file is written without `fsync`: it outlives the gateway's process, not the machine's crash.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
import uuid
from pathlib import Path
from typing import Any

import anyio

from .gate_client import GateClient, GateConflict, GateRefused, GateUnavailable

__all__ = ("OutcomeOutbox", "default_folder")

logger = logging.getLogger("approvals.mcp")

RETRY_EVERY = 1.0
"""Seconds before the first retry while the approvals server cannot be reached; doubles up to `RETRY_AT_MOST`."""
RETRY_AT_MOST = 30.0
REFUSED = "refused"


def default_folder(data_dir: Path, approvals_url: str) -> Path:
    """`<data dir>/mcp-outcomes/<a hash of the server's URL>`: one folder per approvals server."""
    key = hashlib.sha256(approvals_url.rstrip("/").encode()).hexdigest()[:16]
    return data_dir / "mcp-outcomes" / key


class OutcomeOutbox:
    """Reports written now and sent soon: `put` from the call's path, `run` in the background, `flush` at exit."""

    def __init__(self, folder: Path, gate: GateClient) -> None:
        self.folder = folder
        self.gate = gate
        folder.mkdir(parents=True, exist_ok=True)
        self._wake: anyio.Event | None = None
        """Set by `put` for the sender; made by `run` (an event belongs to the running loop)."""

    def put(self, call_id: str, outcome: str, result: Any) -> None:
        """Keep the report in a file of its own (whole or not at all), then wake the sender."""
        report = {"call_id": call_id, "outcome": outcome, "result": result}
        name = f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}.json"
        partial = self.folder / f".{name}.part"
        partial.write_text(json.dumps(report, default=str))
        os.replace(partial, self.folder / name)
        if self._wake is not None:
            self._wake.set()

    def waiting(self) -> list[Path]:
        """The reports not sent yet, oldest first."""
        return sorted(self.folder.glob("*.json"))

    async def run(self) -> None:
        """Send what is waiting (a previous gateway's first), then each new report as it comes; until cancelled."""
        retry = RETRY_EVERY
        while True:
            wake = self._wake = anyio.Event()
            if await self.send_waiting():
                retry = RETRY_EVERY
                await wake.wait()
            else:  # the server cannot be reached: try again later, or as soon as a new report comes
                with anyio.move_on_after(retry):
                    await wake.wait()
                retry = min(retry * 2, RETRY_AT_MOST)

    async def send_waiting(self) -> bool:
        """Send the waiting reports in order; False when the server could not be reached (the rest stay)."""
        for path in self.waiting():
            try:
                report = json.loads(path.read_text())
            except FileNotFoundError:  # another gateway on the same folder sent it
                continue
            except ValueError:
                self._set_aside(path, "it is not a report (unreadable JSON)")
                continue
            try:
                await self.gate.report(str(report["call_id"]), str(report["outcome"]), report.get("result"))
            except GateConflict:
                logger.info("call %s was settled already; its outcome report is dropped", report["call_id"])
            except GateRefused as exc:
                self._set_aside(path, str(exc))
                continue
            except GateUnavailable as exc:
                logger.warning("outcome reports wait: %s (%d waiting)", exc, len(self.waiting()))
                return False
            path.unlink(missing_ok=True)
        return True

    async def flush(self, seconds: float) -> int:
        """Send what is waiting within `seconds` (at exit); returns how many stay for the next gateway."""
        with anyio.move_on_after(seconds):
            await self.send_waiting()
        left = len(self.waiting())
        if left:
            logger.warning("%d outcome report(s) stay in %s for the next gateway to send", left, self.folder)
        return left

    def _set_aside(self, path: Path, why: str) -> None:
        refused = self.folder / REFUSED
        refused.mkdir(exist_ok=True)
        os.replace(path, refused / path.name)
        logger.error("the approvals server refused an outcome report (%s): kept in %s", why, refused / path.name)
