"""Servers the tests start as their own processes: a free port, waiting until they answer, stopping them."""

from __future__ import annotations

import signal
import socket
import subprocess
from pathlib import Path

import httpx
import pytest

from .eventually import eventually_sync

__all__ = ("free_port", "stop", "wait_until_answering")


def free_port() -> int:
    """A loopback port nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_until_answering(process: subprocess.Popen[bytes], url: str, log: Path, *, seconds: float) -> None:
    """Return once GET `url` answers 200; fail with the end of `log` if the process exits or time runs out."""

    def answering() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"{process.args!r} exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            return httpx.get(url, timeout=2.0).status_code == 200
        except httpx.TransportError:
            return False

    try:
        eventually_sync(answering, f"{url} to answer", seconds=seconds, interval=0.2)
    except pytest.fail.Exception as timed_out:
        raise AssertionError(f"{timed_out}:\n{log.read_text()[-3000:]}") from None


def stop(process: subprocess.Popen[bytes], *, grace: float = 30.0) -> None:
    """SIGTERM, then SIGKILL after `grace` seconds."""
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
