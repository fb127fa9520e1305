"""The MCP gateway (issue 28): what passing through it costs, and how soon an approved call reaches the upstream.

1. Pass-through: `read_text_file` of the real filesystem server (`mcp-server-filesystem`, from
   `make clis`), allowed by a standing rule, called through `approvals mcp`, through a bare
   FastMCP proxy of the same server (`create_proxy`, what the gateway is built on, with no gate:
   the floor of any proxy in Python) and straight on the upstream, by FastMCP clients over stdio,
   interleaved in the same run (one call each in turn, N=200 each after a warm-up). The gate's
   own share is one gate request to `approvals serve` (the rule answers at once); the outcome
   report goes off the caller's path. Prints p50/p95 of each, and the p50 differences, on
   SQLite and on PostgreSQL.
2. Decision -> forwarded call: a gated call waits in the gateway (no rule matches, so it asks a
   person); a reviewer approves through the JSON API; the time from the approval's HTTP response
   (and from sending it) to the upstream running the tool. The upstream is this file run as a
   tiny MCP server (`--stamping-upstream LOG`) whose one tool writes `time.monotonic()` (one
   clock for every process on the machine) to LOG as it runs. p50 of 30 samples, per database.

`approvals serve --no-worker` runs on a database of its own making (a SQLite file, or a
throwaway PostgreSQL database: APPROVALS_BENCH_PG_URL). Prints numbers; asserts only that calls
went through (read what was written, ran once each).
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _databases import migrated_database
from bench_gate import tokens, web_process

from approvals.policy.files import parse_rules
from approvals.store import SYSTEM, Database, Store

ROOT = Path(__file__).resolve().parent.parent
THIS_FILE = Path(__file__).resolve()
APPROVALS = Path(sys.executable).parent / "approvals"
PASS_THROUGH = 200
WARM_UP = 20
HANDOFFS = 30
GATEWAY_WAIT = 60


def filesystem_server() -> Path | None:
    """`mcp-server-filesystem` from tests/clis/install.sh (`APPROVALS_CLIS_DIR`, which the Makefile exports)."""
    folder = os.environ.get("APPROVALS_CLIS_DIR")
    binary = Path(folder) / "bin" / "mcp-server-filesystem" if folder else None
    return binary if binary is not None and binary.exists() else None


def prepare(database_url: str) -> tuple[str, str]:
    """The gate's tokens (`bench_gate.tokens`: one that asks, a reviewer's own), and the rule that lets reads through."""
    asking, deciding = tokens(database_url)

    async def allow_reads() -> None:
        store = Store(Database(database_url))
        [reads] = parse_rules([{"name": "reads", "engine": "mcp", "tool": "read_text_file", "effect": "allow"}])
        await store.rules.save_rule(reads, actor=SYSTEM)
        await store.db.dispose()

    asyncio.run(allow_reads())
    return asking, deciding


def gateway_transport(config: Path, url: str, token: str, log: Path) -> Any:
    """FastMCP's stdio transport starting `approvals mcp --config CONFIG`, as an MCP client's config would."""
    from fastmcp.client.transports import StdioTransport

    env = {"APPROVALS_URL": url, "APPROVALS_TOKEN": token}
    args = ["mcp", "--config", str(config), "--wait", str(GATEWAY_WAIT)]
    return StdioTransport(str(APPROVALS), args, env=env, keep_alive=False, log_file=log)


@asynccontextmanager
async def connected(transport: Any) -> AsyncIterator[Any]:
    from fastmcp import Client

    async with Client(transport) as client:
        yield client


def tool_named(names: list[str], suffix: str) -> str:
    """The gateway's name for an upstream tool (a proxy may prefix it with its server's name)."""
    [name] = [name for name in names if name == suffix or name.endswith(f"_{suffix}")]
    return name


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]


def shown(samples: list[float]) -> str:
    p50, p95 = percentiles(samples)
    return f"p50 {p50 * 1e3:7.2f} ms   p95 {p95 * 1e3:7.2f} ms"


# -- 1. pass-through ----------------------------------------------------------------------------------


async def pass_through(folder: Path, binary: Path, url: str, token: str, kind: str) -> None:
    from fastmcp.client.transports import StdioTransport

    note = folder / "note.txt"
    note.write_text("a short note the benchmark reads again and again\n")
    config = folder.parent / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"files": {"command": str(binary), "args": [str(folder)]}}}))
    direct_transport = StdioTransport(str(binary), [str(folder)], keep_alive=False, log_file=folder.parent / "fs.log")
    bare_args = [str(THIS_FILE), "--bare-proxy", str(config)]
    bare_transport = StdioTransport(sys.executable, bare_args, keep_alive=False, log_file=folder.parent / "bare.log")
    gateway_log = folder.parent / "gateway.log"
    async with (
        connected(gateway_transport(config, url, token, gateway_log)) as gateway,
        connected(bare_transport) as bare,
        connected(direct_transport) as direct,
    ):
        read = tool_named([tool.name for tool in await gateway.list_tools()], "read_text_file")
        bare_read = tool_named([tool.name for tool in await bare.list_tools()], "read_text_file")
        arguments = {"path": str(note)}
        through: list[float] = []
        proxied: list[float] = []
        straight: list[float] = []
        clients = ((gateway, read, through), (bare, bare_read, proxied), (direct, "read_text_file", straight))
        for i in range(WARM_UP + PASS_THROUGH):
            for client, name, samples in clients:
                started = time.perf_counter()
                result = await client.call_tool(name, arguments)
                elapsed = time.perf_counter() - started
                assert "again and again" in str(result.content), result
                if i >= WARM_UP:
                    samples.append(elapsed)
    gate_p50, _ = percentiles(through)
    bare_p50, _ = percentiles(proxied)
    direct_p50, _ = percentiles(straight)
    print(f"[{kind}] read_text_file through approvals mcp (allowed by a rule): {shown(through)}")
    print(f"[{kind}] read_text_file through a bare FastMCP proxy (no gate):    {shown(proxied)}")
    print(f"[{kind}] read_text_file straight to the upstream:                  {shown(straight)}")
    print(
        f"[{kind}] pass-through p50: +{(gate_p50 - direct_p50) * 1e3:.2f} ms over the direct call "
        f"({gate_p50 / direct_p50:.1f}x), of which the gate +{(gate_p50 - bare_p50) * 1e3:.2f} ms and "
        f"FastMCP's proxying +{(bare_p50 - direct_p50) * 1e3:.2f} ms ({PASS_THROUGH} calls each, interleaved)"
    )


def bench_pass_through(kind: str) -> None:
    binary = filesystem_server()
    if binary is None:
        print(f"[{kind}] pass-through: skipped, no mcp-server-filesystem (run `make clis`, export APPROVALS_CLIS_DIR)")
        return
    with migrated_database(kind) as database_url, tempfile.TemporaryDirectory() as scratch:
        asking, _ = prepare(database_url)
        folder = Path(scratch) / "files"
        folder.mkdir()
        with web_process(database_url) as (url, _):
            asyncio.run(pass_through(folder, binary, url, asking, kind))


# -- 2. decision -> forwarded call --------------------------------------------------------------------


def serve_stamps(log: Path) -> None:
    """The tiny upstream: one tool, `stamp`, that notes when it ran (`label monotonic-seconds`)."""
    from fastmcp import FastMCP

    server = FastMCP("stamps")

    @server.tool
    def stamp(label: str) -> str:
        """Note that this call reached the upstream, and when."""
        with log.open("a") as out:
            out.write(f"{label} {time.monotonic()!r}\n")
        return f"stamped {label}"

    server.run(show_banner=False)


def serve_bare_proxy(config: Path) -> None:
    """A FastMCP proxy of the config's one server with nothing in front: what proxying alone costs."""
    from fastmcp.client.transports import StdioTransport
    from fastmcp.server import create_proxy
    from fastmcp.server.providers.proxy import ProxyClient

    [(name, server)] = json.loads(config.read_text())["mcpServers"].items()
    upstream = StdioTransport(server["command"], server.get("args", []), keep_alive=True)
    create_proxy(ProxyClient(upstream), name=name).run(show_banner=False)


def stamps(log: Path) -> dict[str, float]:
    lines = log.read_text().splitlines() if log.exists() else []
    found: dict[str, float] = {}
    for line in lines:
        label, at = line.split()
        assert label not in found, f"{label} reached the upstream twice"
        found[label] = float(at)
    return found


async def pending_call(reviewer: httpx.AsyncClient, label: str) -> str:
    """The id of the pending call for `label`, once the gateway stored it."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for call in (await reviewer.get("/api/calls", params={"limit": 20})).json()["items"]:
            if call["args"] == {"label": label}:
                return str(call["id"])
        await asyncio.sleep(0.02)
    raise RuntimeError(f"the call {label} was never pending")


def stamping_config(scratch: Path) -> tuple[Path, Path]:
    """An `mcpServers` config whose one server is this file's stamping upstream; the config and the stamps' log."""
    log = scratch / "stamps.log"
    config = scratch / "mcp.json"
    upstream = {
        "command": sys.executable,
        "args": [str(Path(__file__).resolve()), "--stamping-upstream", str(log)],
        "env": {"FASTMCP_LOG_LEVEL": "WARNING"},
    }
    config.write_text(json.dumps({"mcpServers": {"stamps": upstream}}))
    return config, log


async def handoffs(scratch: Path, url: str, asking: str, deciding: str, kind: str) -> None:
    config, log = stamping_config(scratch)
    from_response: list[float] = []
    from_sending: list[float] = []
    headers = {"Authorization": f"Bearer {deciding}"}
    async with (
        connected(gateway_transport(config, url, asking, scratch / "gateway.log")) as gateway,
        httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as reviewer,
    ):
        name = tool_named([tool.name for tool in await gateway.list_tools()], "stamp")
        for i in range(HANDOFFS + 3):
            label = f"h{i}"
            waiting = asyncio.create_task(gateway.call_tool(name, {"label": label}))
            call_id = await pending_call(reviewer, label)
            await asyncio.sleep(0.15)  # the gateway is waiting on the gate for the decision
            assert label not in stamps(log)
            sent = time.monotonic()
            (await reviewer.post(f"/api/calls/{call_id}/decision", json={"verdict": "approve"})).raise_for_status()
            answered = time.monotonic()
            result = await asyncio.wait_for(waiting, 30)
            assert f"stamped {label}" in str(result.content), result
            ran = stamps(log)[label]
            if i >= 3:
                from_response.append(ran - answered)
                from_sending.append(ran - sent)
    print(f"[{kind}] approval's HTTP response -> upstream ran the call: {shown(from_response)}")
    print(f"[{kind}] approval sent -> upstream ran the call:            {shown(from_sending)}  ({HANDOFFS} calls)")


def bench_handoff(kind: str) -> None:
    with migrated_database(kind) as database_url, tempfile.TemporaryDirectory() as scratch:
        asking, deciding = prepare(database_url)
        with web_process(database_url) as (url, _):
            asyncio.run(handoffs(Path(scratch), url, asking, deciding, kind))


def main() -> None:
    if sys.argv[1:2] == ["--stamping-upstream"]:
        serve_stamps(Path(sys.argv[2]))
        return
    if sys.argv[1:2] == ["--bare-proxy"]:
        serve_bare_proxy(Path(sys.argv[2]))
        return
    for kind in ("sqlite", "postgresql"):
        bench_pass_through(kind)
    for kind in ("sqlite", "postgresql"):
        bench_handoff(kind)


if __name__ == "__main__":
    main()
