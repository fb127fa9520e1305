"""The MCP gateway's real parts: an approvals server over HTTP, `approvals mcp` as a process, real upstreams.

`Approvals` is a live server (tests/live_server.py) with the gateway's `calls:ask` token and a
reviewer's token to decide with through the JSON API, as a person does in the inbox.
`Gateway` starts `python -m approvals mcp` in front of the real `mcp-server-git` (on a git
repository of the test's) and `@modelcontextprotocol/server-filesystem` (on a folder of the
test's), and connects FastMCP's `Client` to it over stdio or streamable HTTP.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import httpx
import pytest

from approvals.store.models import ToolCallRow
from approvals.worker.resumer import AgentRegistry

from ..eventually import eventually
from ..live_approvals import accounts
from ..live_server import LiveServer, serving
from ..processes import free_port, stop
from ..store.conftest import db_url, postgres_url, sqlite_template  # noqa: F401 - fixtures shared with the store tests
from .harness import filesystem_server

if TYPE_CHECKING:  # FastMCP's client is imported where it is used: `make check` collects no test here that does
    from fastmcp import Client

GIT_SERVER = Path(sys.executable).parent / "mcp-server-git"


@dataclass
class Approvals:
    """Our server, the gateway's asking token and a reviewer's token."""

    server: LiveServer
    asking_token: str
    reviewer_token: str

    @property
    def url(self) -> str:
        return self.server.url

    async def calls(self, status: str | None = None) -> list[ToolCallRow]:
        """Stored calls with `status` (None: all)."""
        page = await anyio.to_thread.run_sync(
            lambda: self.server.call(self.server.store.calls.list_calls(status=status))
        )
        return list(page.items)

    async def pending_call(self, *, seconds: float = 30) -> ToolCallRow:
        """The one call waiting for a person, once it is stored."""
        [call] = await eventually(lambda: self.calls("pending"), "a pending call", seconds=seconds, interval=0.05)
        return call

    async def call(self, call_id: str) -> ToolCallRow:
        return await anyio.to_thread.run_sync(lambda: self.server.call(self.server.store.calls.get_call(call_id)))

    async def settled(self) -> list[ToolCallRow]:
        """Every stored call, once none is `executing`: the gateway reports how a call went after answering."""

        async def none_executing() -> list[ToolCallRow] | None:
            calls = await self.calls()
            return calls if calls and all(c.status != "executing" for c in calls) else None

        return await eventually(none_executing, "the gateway to report every outcome", seconds=30, interval=0.05)

    async def settled_call(self, call_id: str) -> ToolCallRow:
        """The call once it is no longer `executing` (its outcome reported)."""

        async def reported() -> ToolCallRow | None:
            call = await self.call(call_id)
            return call if call.status != "executing" else None

        return await eventually(reported, f"the gateway to report call {call_id}'s outcome", seconds=30, interval=0.05)

    async def decide(self, call_id: str, decision: dict[str, Any]) -> None:
        """Decide as a reviewer does, through the JSON API."""
        async with httpx.AsyncClient(timeout=30) as http:
            response = await http.post(
                f"{self.url}/api/calls/{call_id}/decision",
                json=decision,
                headers={"Authorization": f"Bearer {self.reviewer_token}"},
            )
        assert response.status_code == 200, response.text

    async def apply_rules(self, text: str) -> None:
        from approvals.policy import load_rules
        from approvals.store import Actor

        admin = Actor("ada", "admin")
        await anyio.to_thread.run_sync(
            lambda: self.server.call(self.server.store.rules.apply_rules(load_rules(text), actor=admin))
        )

    def audit_verifies(self) -> bool:
        return self.server.call(self.server.store.audit.verify_audit()).ok


@pytest.fixture
def approvals(db_url: str, tmp_path: Path) -> Iterator[Approvals]:  # noqa: F811 - the shared fixture
    with serving(db_url, tmp_path, AgentRegistry(), users=False) as server:
        yield accounts(server, "mcp-gateway", Approvals)


@dataclass
class Upstreams:
    """What the upstream servers work on: a git repository and a folder the filesystem server may write."""

    repo: Path
    files: Path
    config: Path

    def servers(self, *names: str) -> dict[str, Any]:
        every = {
            "git": lambda: {"command": str(GIT_SERVER), "args": ["--repository", str(self.repo)]},
            "fs": lambda: {"command": str(filesystem_server()), "args": [str(self.files)]},
        }
        return {"mcpServers": {name: every[name]() for name in names}}


@pytest.fixture
def upstreams(tmp_path: Path) -> Upstreams:
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "README.md").write_text("hello\n")
    subprocess.run([*git, "add", "README.md"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "first"], check=True)
    files = tmp_path / "files"
    files.mkdir()
    return Upstreams(repo=repo.resolve(), files=files.resolve(), config=tmp_path / "mcp.json")


@dataclass
class Gateway:
    """How to start `approvals mcp` against `approvals`, with `servers` as its config."""

    approvals: Approvals
    upstreams: Upstreams
    workdir: Path
    servers: tuple[str, ...] = ("git", "fs")
    wait: float = 20
    token: str | None = None
    url: str | None = None
    extra: tuple[str, ...] = ()
    """More `approvals mcp` options."""
    log: Path = field(init=False)
    port: int = field(init=False, default=0)
    """Where `http_client` serves the gateway."""

    def __post_init__(self) -> None:
        self.log = self.workdir / "gateway.log"

    def args(self, *more: str) -> list[str]:
        self.upstreams.config.write_text(json.dumps(self.upstreams.servers(*self.servers)))
        config = ["--config", str(self.upstreams.config), "--wait", f"{self.wait:g}"]
        return ["-m", "approvals", "mcp", *config, *self.extra, *more]

    def env(self) -> dict[str, str]:
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.workdir),
            "APPROVALS_URL": self.url or self.approvals.url,
            "APPROVALS_TOKEN": self.token or self.approvals.asking_token,
        }

    @asynccontextmanager
    async def client(self, name: str = "test-client") -> AsyncIterator[Client[Any]]:
        """FastMCP's client on the gateway over stdio, as Claude Code would start it (`keep_alive=False`:
        leaving the block ends the gateway process)."""
        from fastmcp import Client
        from fastmcp.client.transports import StdioTransport

        transport = StdioTransport(
            sys.executable, self.args(), env=self.env(), cwd=str(self.workdir), keep_alive=False, log_file=self.log
        )
        async with Client(transport, client_info=_info(name), timeout=60) as client:
            yield client

    def _start(self, *more: str) -> subprocess.Popen[bytes]:
        with self.log.open("ab") as log:
            return subprocess.Popen(
                [sys.executable, *self.args(*more)],
                env=self.env(),
                cwd=self.workdir,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    @asynccontextmanager
    async def http_client(self, name: str = "test-client") -> AsyncIterator[Client[Any]]:
        """The gateway serving streamable HTTP, and FastMCP's client on it."""
        from fastmcp import Client

        self.port = port = free_port()
        process = self._start("--transport", "http", "--port", str(port))
        try:
            await _until_listening(process, port, self.log)
            async with Client(f"http://127.0.0.1:{port}/mcp", client_info=_info(name), timeout=60) as client:
                yield client
        finally:
            stop(process, grace=10)


def _info(name: str) -> Any:
    from mcp.types import Implementation

    return Implementation(name=name, version="1.0")


def _tail(log: Path) -> str:
    return log.read_text()[-3000:]


async def _until_listening(process: subprocess.Popen[bytes], port: int, log: Path) -> None:
    async def listening() -> bool:
        if process.poll() is not None:
            pytest.fail(f"the gateway exited with {process.returncode}:\n{_tail(log)}")
        async with await anyio.connect_tcp("127.0.0.1", port):
            return True

    await eventually(listening, "the gateway to listen", seconds=30, interval=0.1, ignoring=(OSError,))


@pytest.fixture
def gateway(approvals: Approvals, upstreams: Upstreams, tmp_path: Path) -> Gateway:
    workdir = tmp_path / "project"
    workdir.mkdir()
    shutil.which("git") or pytest.skip("git is not installed")
    return Gateway(approvals, upstreams, workdir)
