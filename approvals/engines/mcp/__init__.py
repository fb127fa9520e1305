"""The MCP gateway (`approvals mcp`): approvals in front of any MCP server's tools.

- config.py: the `{"mcpServers": {...}}` file, read and checked (standard library only).
- gate_client.py: the approvals server's HTTP gate, asked over httpx with a `calls:ask` token.
- middleware.py: every `tools/call` asks the gate, waits, then forwards or refuses.
- outcomes.py: how forwarded calls went, kept in a folder and sent to approvals off the caller's path.
- proxy.py: the FastMCP server that proxies the upstreams, served over stdio or streamable HTTP.

Nothing here imports FastMCP at `import approvals` time: it is the optional `mcp` extra,
imported by `run` (and the modules that need it) only when the gateway starts.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from ...first_run import data_dir
from .config import ConfigError, load_config

__all__ = ("ConfigError", "load_config", "run")

DEFAULT_URL = "http://127.0.0.1:8000"


def run(
    config: Path,
    *,
    url: str | None = None,
    token: str | None = None,
    transport: str = "stdio",
    host: str = "127.0.0.1",
    port: int = 8765,
    source: str | None = None,
    session: str | None = None,
    wait: float | None = None,
    progress_every: float | None = None,
    outbox: Path | None = None,
) -> None:
    """Start the gateway and serve until the client goes; `ConfigError` or `ValueError` for bad settings.

    The URL and token come from the arguments, else `APPROVALS_URL` / `APPROVALS_TOKEN`, as
    the coding-CLI hook reads them. Without a token nothing could be asked, so it refuses to start.
    `outbox`: the folder for outcome reports not sent yet (default: per server, in the data directory).
    """
    import anyio

    if transport not in ("stdio", "http"):
        raise ValueError(f"--transport is stdio or http, not {transport!r}")
    servers = load_config(config)
    token = (token or os.environ.get("APPROVALS_TOKEN", "")).strip()
    if not token:
        raise ValueError("APPROVALS_TOKEN is not set (nor --token): the gateway could not ask approvals")
    try:
        from .gate_client import GateClient
        from .middleware import DEFAULT_WAIT, GateSettings
        from .outcomes import OutcomeOutbox, default_folder
        from .proxy import build_gateway, default_session, serve
    except ModuleNotFoundError as exc:  # fastmcp (the mcp extra) or httpx (the server extra) is not installed
        raise ValueError(f"the MCP gateway needs {exc.name}: pip install 'agent-approvals[mcp,server]'") from None

    approvals_url = url or os.environ.get("APPROVALS_URL") or DEFAULT_URL
    gate = GateClient(approvals_url, token)
    settings = GateSettings(source=source, session=session, wait=DEFAULT_WAIT if wait is None else wait)
    if progress_every is not None:
        settings = dataclasses.replace(settings, poll_every=progress_every)
    folder = outbox or default_folder(data_dir(), approvals_url)
    try:
        reports = OutcomeOutbox(folder, gate)
    except OSError as exc:
        raise ValueError(f"the folder for outcome reports ({folder}) cannot be made: {exc}") from None
    gateway = build_gateway(servers, gate, settings, default_session(Path.cwd(), config), reports)
    anyio.run(lambda: serve(gateway, gate, reports, transport=transport, host=host, port=port))
