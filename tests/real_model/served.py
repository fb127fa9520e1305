"""`approvals serve` as a separate process, reached over real HTTP, for the real-model tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
APPROVALS = Path(sys.executable).parent / "approvals"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Served:
    base_url: str
    log: Path
    process: subprocess.Popen[bytes]

    def output(self) -> str:
        return self.log.read_text()


@contextmanager
def served(args: list[str], env: dict[str, str], log: Path, *, startup: float = 120.0) -> Iterator[Served]:
    """`approvals serve ARGS` on a free port, until the block ends (then SIGTERM)."""
    port = free_port()
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("APPROVALS_", "OPENAI_"))}
    environment |= {"PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", **env}
    with log.open("wb") as output:
        process = subprocess.Popen(
            [str(APPROVALS), "serve", "--port", str(port), *args],
            cwd=ROOT,
            env=environment,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + startup
        while True:
            if process.poll() is not None:
                raise AssertionError(f"approvals serve exited with {process.returncode}:\n{log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{base_url}/login", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"approvals serve did not answer:\n{log.read_text()[-3000:]}"
            time.sleep(0.2)
        yield Served(base_url=base_url, log=log, process=process)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_for(check: Callable[[], Any], what: str, *, seconds: float = 180.0) -> Any:
    """Poll until `check()` returns something truthy; fail naming `what`."""
    deadline = time.monotonic() + seconds
    while not (result := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)
    return result
