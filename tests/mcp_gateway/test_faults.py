"""The gateway's faults, each caused for real: approvals unreachable or refusing the token, a call nobody decided
in time, the gateway restarted (and its client gone) while a call waits, an upstream error, an upstream that dies."""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx
import pytest
import uvicorn
from fastmcp import Client
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..eventually import eventually
from ..processes import free_port
from .conftest import GIT_SERVER, Approvals, Gateway, _until_listening
from .test_gateway import READ_ONLY_RULES, _log, staged, text, while_waiting

pytestmark = pytest.mark.anyio


async def test_approvals_unreachable_or_refusing_the_token_runs_nothing(approvals: Approvals, gateway: Gateway) -> None:
    repo = gateway.upstreams.repo
    gateway.servers = ("git",)
    gateway.url = f"http://127.0.0.1:{free_port()}"
    async with gateway.client() as client:
        result = await client.call_tool("git_commit", staged(repo), raise_on_error=False)
    assert result.is_error and "cannot reach the approvals server" in text(result), text(result)
    gateway.url, gateway.token = None, "apv_not-a-token"
    async with gateway.client() as client:
        result = await client.call_tool("git_commit", staged(repo), raise_on_error=False)
    assert result.is_error and "refused the gateway's token" in text(result), text(result)
    assert "apv_not-a-token" not in text(result) and "apv_not-a-token" not in gateway.log.read_text()
    assert _log(repo) == ["first"] and await approvals.calls() == []


async def test_a_call_nobody_decided_in_time_is_found_again_by_the_retry(
    approvals: Approvals, gateway: Gateway
) -> None:
    repo = gateway.upstreams.repo
    gateway.servers, gateway.wait = ("git",), 1
    args = staged(repo)
    async with gateway.client() as client:
        timed_out = await client.call_tool("git_commit", args, raise_on_error=False)
        [call] = await approvals.calls("pending")
        assert timed_out.is_error
        assert call.id in text(timed_out) and f"/calls/{call.id}" in text(timed_out)
        assert "again with the same arguments" in text(timed_out)
        await approvals.decide(call.id, {"verdict": "approve"})
        result = await client.call_tool("git_commit", args, raise_on_error=False)
    assert not result.is_error, text(result)
    assert _log(repo) == ["approved", "first"]
    assert [(c.id, c.status) for c in await approvals.settled()] == [(call.id, "succeeded")]


async def test_a_gateway_restarted_while_a_call_waits_loses_nothing(approvals: Approvals, gateway: Gateway) -> None:
    """The client goes away mid-wait (its gateway process ends with it): the call stays pending and decidable,
    nothing runs after the disconnect, and the retry through a new gateway finds the call and its approval."""
    repo = gateway.upstreams.repo
    gateway.servers = ("git",)
    args = staged(repo)
    async with gateway.client() as client, anyio.create_task_group() as group:
        group.start_soon(functools.partial(client.call_tool, "git_commit", args))
        await approvals.pending_call()
        group.cancel_scope.cancel()  # the client gives up; leaving the block ends the gateway process
    [call] = await approvals.calls("pending")
    await approvals.decide(call.id, {"verdict": "approve"})
    await anyio.sleep(1)
    assert _log(repo) == ["first"]  # approved, but nobody is there to run it: nothing ran
    assert (await approvals.call(call.id)).status == "approved"
    async with gateway.client() as client:
        result = await client.call_tool("git_commit", args, raise_on_error=False)
    assert not result.is_error, text(result)
    assert _log(repo) == ["approved", "first"]
    assert [(c.id, c.status) for c in await approvals.settled()] == [(call.id, "succeeded")]


async def test_an_upstream_error_is_the_calls_failed_outcome_and_reaches_the_model(
    approvals: Approvals, gateway: Gateway
) -> None:
    await approvals.apply_rules(READ_ONLY_RULES)
    gateway.servers = ("git",)
    async with gateway.client() as client:
        result = await client.call_tool("git_status", {"repo_path": "/nowhere"}, raise_on_error=False)
    assert result.is_error and "outside the allowed repository" in text(result), text(result)
    [call] = await approvals.settled()
    assert call.status == "failed" and "outside the allowed repository" in str(call.result)


async def test_an_upstream_that_died_while_a_call_waited_is_started_again_for_it(
    approvals: Approvals, gateway: Gateway, tmp_path: Path
) -> None:
    """The upstream process killed (SIGKILL) while its call waits for a person: once approved, the call is
    forwarded to a new process (FastMCP's keep-alive stdio transport notices the dead session and starts
    the command again), and its outcome is recorded. A death in the middle of a call is `outcome_unknown`
    (middleware.py): the upstream may have acted."""
    repo = gateway.upstreams.repo
    pid_file = tmp_path / "upstream.pid"
    script = f"echo $$ > {pid_file}; exec {GIT_SERVER} --repository {repo}"
    gateway.servers = ("git",)
    gateway.upstreams.servers = lambda *names: {"mcpServers": {"git": {"command": "sh", "args": ["-c", script]}}}  # type: ignore[method-assign]
    args = staged(repo)
    first: dict[str, int] = {}

    async def kill_then_approve() -> None:
        call = await approvals.pending_call()
        first["pid"] = int(pid_file.read_text())
        os.kill(first["pid"], signal.SIGKILL)
        await approvals.decide(call.id, {"verdict": "approve"})

    async with gateway.client() as client:
        await client.list_tools()
        result = await while_waiting(client, "git_commit", args, kill_then_approve)
    assert not result.is_error, text(result)
    assert int(pid_file.read_text()) != first["pid"]
    assert _log(repo) == ["approved", "first"]
    assert [c.status for c in await approvals.settled()] == ["succeeded"]


SLOW_UPSTREAM = '''
"""An MCP server whose one tool takes its time: it says where it runs, then sleeps, then writes."""
import os
import sys
import time

from fastmcp import FastMCP

server = FastMCP("slow")


@server.tool
def slow_write(path: str, text: str, seconds: float = 60) -> str:
    """Write `text` to `path` after `seconds`."""
    with open(sys.argv[1], "w") as running:
        running.write(str(os.getpid()))
    time.sleep(seconds)
    with open(path, "w") as out:
        out.write(text)
    return "written"


server.run(show_banner=False)
'''


async def test_an_upstream_that_dies_in_the_middle_of_a_call_leaves_its_outcome_to_a_person(
    approvals: Approvals, gateway: Gateway, tmp_path: Path
) -> None:
    """Killed (SIGKILL) while it runs an approved call: it may or may not have acted, so the call is
    `outcome_unknown` in the inbox, never run again by anyone, and the model reads where it is settled."""
    script, running, target = tmp_path / "slow.py", tmp_path / "slow.pid", tmp_path / "written.txt"
    script.write_text(SLOW_UPSTREAM)
    entry = {"command": sys.executable, "args": [str(script), str(running)]}
    gateway.servers = ("slow",)
    gateway.upstreams.servers = lambda *names: {"mcpServers": {"slow": entry}}  # type: ignore[method-assign]

    async def approve_then_kill_mid_call() -> None:
        call = await approvals.pending_call()
        await approvals.decide(call.id, {"verdict": "approve"})
        with anyio.fail_after(30):
            while not running.exists() or not running.read_text():
                await anyio.sleep(0.05)
        os.kill(int(running.read_text()), signal.SIGKILL)

    async with gateway.client() as client:
        result = await while_waiting(
            client, "slow_write", {"path": str(target), "text": "hi"}, approve_then_kill_mid_call
        )
    assert result.is_error and "may or may not have acted" in text(result), text(result)
    [call] = await approvals.settled()
    assert call.status == "outcome_unknown" and f"/calls/{call.id}" in text(result)
    assert not target.exists()


async def test_arguments_the_tools_schema_refuses_are_told_as_invalid_not_as_an_outage(
    approvals: Approvals, gateway: Gateway
) -> None:
    """The gate answers 422 with the schema's errors: the model reads that its arguments were wrong, and which,
    so it can call again with better ones; nothing is stored and nothing runs."""
    repo = gateway.upstreams.repo
    gateway.servers = ("git",)
    staged(repo)
    async with gateway.client() as client:
        result = await client.call_tool("git_commit", {"repo_path": str(repo), "message": 7}, raise_on_error=False)
    assert result.is_error
    assert "git_commit was not run: its arguments are not valid" in text(result), text(result)
    assert "message" in text(result) and "again with arguments that match its input schema" in text(result)
    assert "could not be asked" not in text(result)
    assert _log(repo) == ["first"] and await approvals.calls() == []


MCP_SDK_CLIENT = """
\"\"\"The official MCP SDK's streamable HTTP client: initialize, say so, then call one tool and wait.\"\"\"
import json
import sys

import anyio
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.types import Implementation


async def main(url: str, tool: str, arguments: str) -> None:
    async with streamable_http_client(url) as (read, write):
        async with ClientSession(read, write, client_info=Implementation(name="sdk-client", version="1")) as session:
            await session.initialize()
            print("calling", flush=True)
            await session.call_tool(tool, json.loads(arguments))


anyio.run(main, *sys.argv[1:])
"""


async def test_a_client_killed_over_streamable_http_while_its_call_waits_runs_nothing_once_approved(
    approvals: Approvals, gateway: Gateway, tmp_path: Path
) -> None:
    """The gateway serves streamable HTTP; the official SDK's client, in a process of its own, is killed (SIGKILL)
    while its git_commit waits for a person. The gateway stops waiting for it: approved afterwards, the call stays
    approved, not handed out, and nothing runs; the retry of a live client with the same arguments finds that very
    call and runs it once."""
    repo = gateway.upstreams.repo
    gateway.servers = ("git",)
    args = staged(repo)
    script = tmp_path / "sdk_client.py"
    script.write_text(MCP_SDK_CLIENT)
    async with gateway.http_client("sdk-client") as retrying:
        url = f"http://127.0.0.1:{gateway.port}/mcp"
        command = [sys.executable, str(script), url, "git_commit", json.dumps(args)]
        with (tmp_path / "client.log").open("wb") as out:
            killed = await anyio.open_process(command, stdout=out, stderr=subprocess.STDOUT)
        try:
            call = await approvals.pending_call()
        finally:
            killed.kill()  # SIGKILL: no cancel notification, no DELETE of its session
            await killed.wait()
        await eventually(
            lambda: "the MCP client left while git_commit waited" in gateway.log.read_text(),
            f"the gateway to notice its client left:\n{gateway.log.read_text()[-3000:]}\n",
            seconds=30,
        )
        await approvals.decide(call.id, {"verdict": "approve"})
        assert (await approvals.call(call.id)).status == "approved"  # decided, and handed out to nobody
        assert _log(repo) == ["first"]
        result = await retrying.call_tool("git_commit", args, raise_on_error=False)
    assert not result.is_error, text(result)
    assert _log(repo) == ["approved", "first"]
    assert [(c.id, c.status) for c in await approvals.settled()] == [(call.id, "succeeded")]


@asynccontextmanager
async def holding_outcome_reports(target: str) -> AsyncIterator[str]:
    """An HTTP proxy to `target` that forwards every request but outcome reports, which it holds unanswered:
    the gateway has answered its client and is still reporting when it is killed."""
    release = anyio.Event()
    async with httpx.AsyncClient(base_url=target, timeout=60) as upstream:

        async def forward(request: Request) -> Response:
            if request.url.path.endswith("/outcome"):
                await release.wait()
                return Response("held", 503)
            headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")}
            answer = await upstream.request(
                request.method,
                request.url.path,
                params=request.query_params,
                headers=headers,
                content=await request.body(),
            )
            return Response(answer.content, answer.status_code, media_type=answer.headers.get("content-type"))

        methods = ["GET", "POST", "PUT", "PATCH", "DELETE"]
        app = Starlette(routes=[Route("/{path:path}", forward, methods=methods)])
        port = free_port()
        config = uvicorn.Config(app, port=port, log_level="warning", lifespan="off", timeout_graceful_shutdown=1)
        server = uvicorn.Server(config)
        async with anyio.create_task_group() as group:
            group.start_soon(server.serve)
            await eventually(lambda: server.started, "the proxy to listen", seconds=10)
            yield f"http://127.0.0.1:{port}"
            release.set()
            server.should_exit = True


async def test_an_outcome_a_killed_gateway_kept_is_sent_by_the_next_one(approvals: Approvals, gateway: Gateway) -> None:
    """The gateway answers its client before it reports how the call went: killed in between, it leaves the
    report in its folder, and the next gateway on that folder sends it. Nothing is lost, nothing sent twice."""
    await approvals.apply_rules(READ_ONLY_RULES)
    gateway.servers = ("git",)
    outbox = gateway.workdir / "outbox"
    gateway.extra = ("--outbox", str(outbox))
    async with holding_outcome_reports(approvals.url) as proxy:
        gateway.url = proxy
        gateway.port = port = free_port()
        process = gateway._start("--transport", "http", "--port", str(port))
        try:
            await _until_listening(process, port, gateway.log)
            async with Client(f"http://127.0.0.1:{port}/mcp", timeout=60) as client:
                status = await client.call_tool("git_status", {"repo_path": str(gateway.upstreams.repo)})
            assert "Repository status" in text(status)  # the client has its answer while the report is held
            [kept] = await eventually(lambda: list(outbox.glob("*.json")), "the report to be kept")
        finally:
            process.kill()
            process.wait(timeout=10)
    assert json.loads(kept.read_text())["outcome"] == "succeeded"
    [call] = await approvals.calls()
    assert call.status == "executing"  # ran, not reported yet

    gateway.url = None
    async with gateway.client() as client:  # the next gateway, straight to approvals, on the same folder
        await client.list_tools()
        [reported] = await approvals.settled()
    assert (reported.id, reported.status) == (call.id, "succeeded")
    assert list(outbox.glob("*.json")) == [] and not (outbox / "refused").exists()
