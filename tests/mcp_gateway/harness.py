"""What the real-client tests of the MCP gateway share: our server, its tokens, the upstream and the gateway's command.

A real client (a pydantic-ai agent, Claude Code, FastMCP's client) starts `approvals mcp --config
mcp.json` over stdio, as its users would; the gateway asks our live server (tests/live_server.py)
with a `calls:ask` token, and a reviewer decides through the JSON API with a token of their own.
The upstream is the real `@modelcontextprotocol/server-filesystem` from tests/clis/install.sh
(`APPROVALS_CLIS_DIR`); a test that needs it skips, saying how to install it, when it is missing.

    with approvals_on(db_url, tmp_path) as approvals:
        gateway = Gateway.over(filesystem_upstream(folder), tmp_path, approvals)
        async with Client(gateway.transport()) as client: ...
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from approvals.policy.files import parse_rules
from approvals.store import SYSTEM
from approvals.store.models import ToolCallRow
from approvals.worker.resumer import AgentRegistry

from .. import live_approvals
from ..clis.cli_process import clis_dir, find_binary
from ..eventually import eventually_sync
from ..live_approvals import REVIEWER, accounts
from ..live_server import serving

__all__ = (
    "APPROVALS",
    "RAN",
    "REVIEWER",
    "Approvals",
    "Gateway",
    "accounts",
    "approvals_on",
    "filesystem_server",
    "filesystem_upstream",
    "named",
)

APPROVALS = Path(sys.executable).parent / "approvals"
"""The `approvals` command of this virtual environment: what a user's MCP client config names."""
RAN = ["call.requested", "call.approved", "call.executing", "call.succeeded"]
"""A call asked about, approved, handed to the gateway, forwarded, and its outcome reported."""
GATEWAY_WAIT = 60.0
"""Seconds the gateway waits for a person: far more than a test needs to decide."""


def filesystem_server() -> Path:
    """`mcp-server-filesystem` from tests/clis/install.sh, or skip the test saying how to install it."""
    root = clis_dir("The MCP filesystem server")
    candidates = [root / "bin" / "mcp-server-filesystem", root / "node_modules" / ".bin" / "mcp-server-filesystem"]
    return find_binary(root, candidates, "mcp-server-filesystem (bin/mcp-server-filesystem)")


def filesystem_upstream(folder: Path, *, name: str = "files") -> dict[str, Any]:
    """An `mcpServers` config with one server: the filesystem server, allowed `folder` only."""
    folder.mkdir(parents=True, exist_ok=True)
    return {"mcpServers": {name: {"command": str(filesystem_server()), "args": [str(folder)]}}}


class Approvals(live_approvals.Approvals):
    """Our live server and its tokens (`tests/live_approvals.py`), and what the gateway's tests look for."""

    def wait_for_status(self, call_id: str, *statuses: str, seconds: float = 30) -> ToolCallRow:
        """The call once its status is one of `statuses` (the gateway reports outcomes after answering)."""

        def settled() -> ToolCallRow | None:
            call = self.server.call(self.server.store.calls.get_call(call_id))
            return call if call.status in statuses else None

        return eventually_sync(settled, f"call {call_id} to be one of {statuses}", seconds=seconds, interval=0.1)

    def allow(self, name: str, tool: str = "*", *, when: str | None = None, engine: str = "mcp") -> None:
        """A standing rule that lets the gateway's calls of `tool` (and `when`) run unasked."""
        entry: dict[str, Any] = {"name": name, "tool": tool, "engine": engine, "effect": "allow"}
        if when:
            entry["when"] = when
        [spec] = parse_rules([entry])
        self.server.call(self.server.store.rules.save_rule(spec, actor=SYSTEM))


@contextmanager
def approvals_on(database_url: str, tmp_path: Path) -> Iterator[Approvals]:
    """Our server over HTTP on `database_url`, with the gateway's and the reviewer's tokens."""
    with serving(database_url, tmp_path, AgentRegistry(), users=False) as server:
        yield accounts(server, "mcp-gateway", Approvals)


@dataclass
class Gateway:
    """`approvals mcp --config FILE` as an MCP client starts it over stdio: command, arguments, environment."""

    config: Path
    approvals_url: str
    token: str
    wait: float = GATEWAY_WAIT
    extra: list[str] = field(default_factory=list)
    log: Path | None = None
    """Where the gateway's standard error goes, when the client lets us say (FastMCP's transport does)."""

    @classmethod
    def over(
        cls, upstreams: Mapping[str, Any], folder: Path, approvals: Approvals, *, wait: float = GATEWAY_WAIT
    ) -> Gateway:
        """The gateway in front of `upstreams` (an `mcpServers` config, written to `folder/mcp.json`)."""
        config = folder / "mcp.json"
        config.write_text(json.dumps(dict(upstreams), indent=2))
        return cls(config, approvals.url, approvals.asking_token, wait=wait, log=folder / "gateway.log")

    @property
    def command(self) -> str:
        return str(APPROVALS)

    @property
    def args(self) -> list[str]:
        return ["mcp", "--config", str(self.config), "--wait", f"{self.wait:g}", *self.extra]

    @property
    def env(self) -> dict[str, str]:
        """What the gateway reads besides its arguments: where our server is, the token to ask with, and the
        test's own folder for outcome reports not sent yet."""
        return {
            "APPROVALS_URL": self.approvals_url,
            "APPROVALS_TOKEN": self.token,
            "APPROVALS_MCP_OUTBOX": str(self.outbox),
        }

    @property
    def outbox(self) -> Path:
        return self.config.parent / "outbox"

    def server_entry(self) -> dict[str, Any]:
        """This gateway as one entry of a client's `mcpServers` (Claude Code's `--mcp-config`)."""
        return {"type": "stdio", "command": self.command, "args": self.args, "env": self.env}

    def transport(self) -> Any:
        """FastMCP's stdio transport that starts this gateway (a new process for each connection)."""
        from fastmcp.client.transports import StdioTransport

        return StdioTransport(self.command, self.args, env=self.env, keep_alive=False, log_file=self.log)

    def tool_names(self) -> list[str]:
        """The tools the gateway lists: it started, reached its upstreams and answered `tools/list`."""
        from fastmcp import Client

        async def listing() -> list[str]:
            async with Client(self.transport()) as client:
                return [tool.name for tool in await client.list_tools()]

        return asyncio.run(listing())

    def stderr(self) -> str:
        return self.log.read_text() if self.log and self.log.exists() else ""


def named(names: list[str], suffix: str) -> str:
    """The one name in `names` that is `suffix` or ends in `_suffix` (a proxy may prefix its upstreams' tools)."""
    [name] = [name for name in names if name == suffix or name.endswith(f"_{suffix}")]
    return name
