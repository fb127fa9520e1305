"""`approvals serve` as a separate process, reached over real HTTP, for the real-model tests."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..eventually import eventually_sync
from ..processes import free_port, stop, wait_until_answering

ROOT = Path(__file__).resolve().parents[2]
APPROVALS = Path(sys.executable).parent / "approvals"


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
        wait_until_answering(process, f"{base_url}/login", log, seconds=startup)
        yield Served(base_url=base_url, log=log, process=process)
    finally:
        stop(process, grace=60)


def wait_for(check: Callable[[], Any], what: str, *, seconds: float = 180.0) -> Any:
    """Poll until `check()` returns something truthy (each check asks the served app); fail naming `what`."""
    return eventually_sync(check, what, seconds=seconds, interval=0.3)
