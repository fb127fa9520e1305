"""The gateway itself: one FastMCP server with a proxy per upstream, each behind an `ApprovalMiddleware`.

Built on FastMCP rather than the bare `mcp` SDK: `create_proxy` already forwards tools,
resources, prompts, progress and both protocol eras, and its middleware hook is exactly
"before a tool call". We mount one proxy per upstream ourselves (instead of handing FastMCP
the whole `mcpServers` dict) so each middleware knows its upstream's name and the tool's
own name, and so each stdio upstream is one long-lived process (a `ProxyClient` on a
keep-alive transport) rather than one per request.

Naming follows FastMCP's for several servers: with one upstream its tools keep their names;
with several, each tool is `{server}_{tool}` (FastMCP's `mount(namespace=...)`, as
`create_proxy` does for a multi-server config), so `git` and `fs` give `git_git_status`
and `fs_write_file`. Approvals record the tool's own name, with the server in
`context.mcp_server`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
from fastmcp import FastMCP
from fastmcp.client.transports import ClientTransport, StdioTransport, StreamableHttpTransport
from fastmcp.server import create_proxy
from fastmcp.server.providers.proxy import ProxyClient

from .config import HttpServer, StdioServer, UpstreamServer
from .gate_client import GateClient
from .middleware import ApprovalMiddleware, GateSettings
from .outcomes import OutcomeOutbox

__all__ = ("build_gateway", "default_session", "serve")

FLUSH_SECONDS = 5.0
"""Seconds a stopping gateway gives its waiting outcome reports; the rest stay for the next gateway."""


def default_session(cwd: Path, config: Path | None) -> Callable[[str], str]:
    """The session a client's calls go to when `--session` is not given, made from what survives a restart.

    It is a hash of the client's name, the gateway's working directory (where the MCP client
    started it: the project) and the config file, so a gateway restarted by the same client in
    the same project asks in the same session, and a retry there finds the call that waited.
    Two projects, or two clients, get two sessions.
    """
    where = str(cwd.resolve())
    config_path = str(config.resolve()) if config is not None else ""

    def session_for(client: str) -> str:
        digest = hashlib.sha256(f"{client}\0{where}\0{config_path}".encode()).hexdigest()[:16]
        return f"{cwd.resolve().name or 'root'}-{digest}"[-200:]

    return session_for


def _transport(server: UpstreamServer) -> ClientTransport:
    if isinstance(server, StdioServer):
        return StdioTransport(
            command=server.command, args=list(server.args), env=server.env or None, cwd=server.cwd, keep_alive=True
        )
    assert isinstance(server, HttpServer)
    return StreamableHttpTransport(server.url, headers=server.headers or None)


def build_gateway(
    servers: Sequence[UpstreamServer],
    gate: GateClient,
    settings: GateSettings,
    session_for: Callable[[str], str],
    outbox: OutcomeOutbox,
    *,
    name: str = "approvals-mcp",
) -> FastMCP[Any]:
    """A FastMCP server that proxies `servers`, asking `gate` before every tool call."""
    if len(servers) == 1:  # the proxy itself: a mount is one more server's dispatch on every call (~1 ms)
        [server] = servers
        return _gated_proxy(server, name, gate, settings, session_for, outbox)
    gateway: FastMCP[Any] = FastMCP(name=name)
    for server in servers:
        gateway.mount(_gated_proxy(server, server.name, gate, settings, session_for, outbox), namespace=server.name)
    return gateway


def _gated_proxy(
    server: UpstreamServer,
    name: str,
    gate: GateClient,
    settings: GateSettings,
    session_for: Callable[[str], str],
    outbox: OutcomeOutbox,
) -> FastMCP[Any]:
    """A proxy of one upstream with its `ApprovalMiddleware`."""
    proxy = create_proxy(ProxyClient(_transport(server)), name=name)
    proxy.add_middleware(ApprovalMiddleware(server.name, proxy, gate, settings, session_for, outbox))
    return proxy


async def serve(
    gateway: FastMCP[Any],
    gate: GateClient,
    outbox: OutcomeOutbox,
    *,
    transport: str,
    host: str = "127.0.0.1",
    port: int = 8765,
) -> None:
    """Serve the gateway until the client goes (stdio) or the process is stopped (HTTP); the outbox sends
    outcome reports meanwhile, and what is left at the end gets `FLUSH_SECONDS` to go."""
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(outbox.run)
            if transport == "stdio":
                await gateway.run_stdio_async(show_banner=False)
            else:
                await gateway.run_http_async(transport="http", host=host, port=port, show_banner=False)
            group.cancel_scope.cancel()
        with anyio.CancelScope(shield=True):
            await outbox.flush(FLUSH_SECONDS)
    finally:
        await gate.aclose()
