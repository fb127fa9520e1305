"""How long the command hook holds a coding CLI up when approvals cannot be reached.

A server that is down from the start (nothing ever answered): the hook blocks the tool after
the grace period (10 s by default), as the README says, not after the wait plus the grace. A
server the hook reached once, that went away while the hook waited (a restart): the call is
stored, so the hook keeps asking until the wait plus the grace. A clock the hook takes counts
the seconds here; nothing sleeps them.
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from approvals.hook_client import DEFAULT_WAIT, RESTART_GRACE, HookFailed, ask_server

from .processes import free_port

HOOK_INPUT = json.dumps(
    {
        "session_id": "cc-1",
        "cwd": "/home/dev/project",
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": "ls"},
        "tool_use_id": "toolu_1",
    }
).encode()


class FakeClock:
    """A monotonic clock that moves only when the hook sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.now += seconds


def test_a_server_down_from_the_start_blocks_after_the_grace_not_the_wait() -> None:
    clock = FakeClock()
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(HookFailed) as failed:
        ask_server("claude-code", HOOK_INPUT, url=url, token="apv_x", wait=DEFAULT_WAIT, clock=clock, sleep=clock.sleep)
    assert clock.now - 1000.0 == pytest.approx(RESTART_GRACE)  # 10 s, not 55 + 10
    assert "could not be reached within 10 s" in str(failed.value) and "Connection refused" in str(failed.value)


class _Restarting(http.server.BaseHTTPRequestHandler):
    """Answers 503: the server is there, but restarting."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(503)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def restarting() -> Iterator[http.server.ThreadingHTTPServer]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Restarting)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.server_close()


def test_a_server_that_went_away_mid_wait_is_asked_until_the_wait_plus_the_grace() -> None:
    clock = FakeClock()
    with restarting() as server:
        url = f"http://127.0.0.1:{server.server_address[1]}"

        def sleep(seconds: float) -> None:
            if not gone:  # after its first answer the server goes away: every later try is refused
                server.shutdown()
                server.server_close()
                gone.append(True)
            clock.sleep(seconds)

        gone: list[bool] = []

        with pytest.raises(HookFailed) as failed:
            ask_server("claude-code", HOOK_INPUT, url=url, token="apv_x", wait=DEFAULT_WAIT, clock=clock, sleep=sleep)
    assert clock.now - 1000.0 == pytest.approx(DEFAULT_WAIT + RESTART_GRACE)  # reached once: the wait + the grace
    assert "gave no decision in time" in str(failed.value) and "Connection refused" in str(failed.value)


def test_the_hook_command_with_the_server_down_blocks_within_its_grace() -> None:
    """The command itself, with a short grace on a port nobody listens on: exit 2 at once, not after --wait."""
    down = f"http://127.0.0.1:{free_port()}"
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "approvals", "hook", "claude-code", "--url", down, "--wait", "30", "--grace", "0.5"],
        input=HOOK_INPUT,
        env={**os.environ, "APPROVALS_TOKEN": "apv_x"},
        capture_output=True,
        timeout=60,
    )
    elapsed = time.monotonic() - started
    assert done.returncode == 2, done.stderr
    assert b"could not be reached within 0.5 s" in done.stderr
    assert elapsed < 10, elapsed  # Python's start-up and one refused connection, not the 30 s wait
