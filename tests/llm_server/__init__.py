"""A real OpenAI-compatible model server for the tests: llama.cpp's server and Gemma 3 270M.

`make llm-server` builds it into a cache outside the repository and exports where it is
(`APPROVALS_LLM_SERVER_PYTHON`, `APPROVALS_LLM_MODEL`); `running_server()` starts it on a
free loopback port and stops it afterwards. No test fakes this server: it is the first
real counterpart our OpenAI adapter meets, chat template and all.

The server runs with the `chatml-function-calling` chat format, llama-cpp-python's format
for tool calls: with `tool_choice` "auto" it shows the model its tools, a named tool is
forced by a grammar, and "required" is refused with a bare HTTP 500, as a user meets it.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..processes import free_port, stop, wait_until_answering

__all__ = ("MODEL_ALIAS", "LocalModelServer", "running_server")

MODEL_ALIAS = "gemma-3-270m"
STARTUP_SECONDS = 120.0


class ServerNotBuilt(RuntimeError):
    """The server or its model is missing: `make llm-server` builds them."""


@dataclass(frozen=True)
class LocalModelServer:
    base_url: str
    """Ends in /v1, as OpenAI's does."""
    model: str
    log: Path


THREADS = 1 if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1 else 2
"""llama.cpp's threads: one when other xdist workers share the 2 cores. Its threads meet at spinning barriers,
which under oversubscription wait out each other's time slices: the real-model browser test took 480 s
beside three busy workers, against 28 s alone."""


def _configured_paths() -> tuple[Path, Path]:
    python = os.environ.get("APPROVALS_LLM_SERVER_PYTHON")
    model = os.environ.get("APPROVALS_LLM_MODEL")
    if not python or not model or not Path(python).exists() or not Path(model).exists():
        raise ServerNotBuilt(
            "The local model server is not built, or APPROVALS_LLM_SERVER_PYTHON / APPROVALS_LLM_MODEL do not "
            "point at it: run the tests with `make test`, or `make llm-server` first and export what it prints "
            f"(now: APPROVALS_LLM_SERVER_PYTHON={python!r}, APPROVALS_LLM_MODEL={model!r})"
        )
    return Path(python), Path(model)


@contextmanager
def running_server(log_dir: Path) -> Iterator[LocalModelServer]:
    """Start llama.cpp's server on a free loopback port; stop it when the block ends."""
    python, model = _configured_paths()
    port = free_port()
    log = log_dir / "llama-server.log"
    command = [
        str(python),
        "-m",
        "llama_cpp.server",
        "--model",
        str(model),
        "--model_alias",
        MODEL_ALIAS,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        "4096",
        "--n_threads",
        str(THREADS),
        "--n_threads_batch",
        str(THREADS),
        "--chat_format",
        "chatml-function-calling",
        "--verbose",
        "False",
    ]
    with log.open("wb") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        wait_until_answering(process, f"{base_url}/models", log, seconds=STARTUP_SECONDS)
        yield LocalModelServer(base_url=base_url, model=MODEL_ALIAS, log=log)
    finally:
        stop(process, grace=10)
