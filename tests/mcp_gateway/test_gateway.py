"""`approvals mcp` end to end: FastMCP's client, the gateway as a process, a real approvals server, and the real
`mcp-server-git` and `@modelcontextprotocol/server-filesystem` behind it, on SQLite and PostgreSQL.

A reviewer decides through the JSON API while the client's tool call waits on the gateway;
what reaches the upstream is read back from disk and from the git repository.
"""

from __future__ import annotations

import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from fastmcp import Client
from fastmcp.client.client import CallToolResult

from .conftest import Approvals, Gateway

pytestmark = pytest.mark.anyio

READ_ONLY_RULES = """
rules:
  - name: mcp-read-only
    engine: mcp
    when: has(context.annotations.readOnlyHint) && context.annotations.readOnlyHint == true
    effect: allow
"""


async def while_waiting(
    client: Client[Any], tool: str, args: dict[str, Any], decide: Callable[[], Awaitable[None]]
) -> CallToolResult:
    """Call `tool` and, while the call waits on the gateway, run `decide`; the call's result."""
    result: dict[str, CallToolResult] = {}

    async def call() -> None:
        result["r"] = await client.call_tool(tool, args, raise_on_error=False)

    async with anyio.create_task_group() as group:
        group.start_soon(call)
        await decide()
    return result["r"]


def text(result: CallToolResult) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)


async def test_a_write_approved_in_the_inbox_lands_on_disk(approvals: Approvals, gateway: Gateway) -> None:
    target = gateway.upstreams.files / "note.txt"
    seen: dict[str, Any] = {}

    async def approve() -> None:
        call = await approvals.pending_call()
        seen["call"] = call
        assert not target.exists()  # nothing runs before the approval
        await approvals.decide(call.id, {"verdict": "approve"})

    async with gateway.client("claude-code") as client:
        names = {tool.name for tool in await client.list_tools()}
        assert {"fs_write_file", "git_git_commit", "git_git_status"} <= names  # several servers: prefixed
        result = await while_waiting(client, "fs_write_file", {"path": str(target), "content": "approved"}, approve)
    assert not result.is_error, text(result)
    assert target.read_text() == "approved"
    call = await approvals.settled_call(seen["call"].id)
    assert call.status == "succeeded" and call.tool_name == "write_file" and call.agent_name == "claude-code"
    run = await anyio.to_thread.run_sync(
        lambda: approvals.server.call(approvals.server.store.runs.get_run(call.run_id))
    )
    assert run.engine == "mcp"
    assert call.context["mcp_server"] == "fs" and call.context["client"] == "claude-code"
    assert call.context["annotations"]["readOnlyHint"] is False
    assert "Successfully wrote" in str(call.result)
    assert approvals.audit_verifies()


async def test_a_denied_write_does_not_land_and_the_model_reads_why(approvals: Approvals, gateway: Gateway) -> None:
    target = gateway.upstreams.files / "note.txt"

    async def deny() -> None:
        call = await approvals.pending_call()
        await approvals.decide(call.id, {"verdict": "deny", "reason": "Not in the shared folder, please."})

    async with gateway.client() as client:
        result = await while_waiting(client, "fs_write_file", {"path": str(target), "content": "x"}, deny)
    assert result.is_error
    assert "Not in the shared folder, please." in text(result)
    assert not target.exists()


async def test_an_edited_write_lands_with_the_reviewers_content(approvals: Approvals, gateway: Gateway) -> None:
    target = gateway.upstreams.files / "note.txt"

    async def edit() -> None:
        call = await approvals.pending_call()
        await approvals.decide(call.id, {"verdict": "edit", "args": {"path": str(target), "content": "edited"}})

    async with gateway.client() as client:
        result = await while_waiting(client, "fs_write_file", {"path": str(target), "content": "original"}, edit)
    assert not result.is_error, text(result)
    assert target.read_text() == "edited"


async def test_git_commit_waits_for_approval_and_commits_once_approved(approvals: Approvals, gateway: Gateway) -> None:
    repo = gateway.upstreams.repo
    args = staged(repo)
    await approvals.apply_rules(READ_ONLY_RULES)

    async def approve() -> None:
        call = await approvals.pending_call()
        assert call.tool_name == "git_commit"
        assert _log(repo) == ["first"]
        await approvals.decide(call.id, {"verdict": "approve"})

    gateway.servers = ("git",)
    async with gateway.client() as client:
        status = await client.call_tool("git_status", {"repo_path": str(repo)})  # one server: names unprefixed
        assert "change.txt" in text(status)
        assert [c.status for c in await approvals.settled()] == ["succeeded"]  # read-only: a rule let it pass
        result = await while_waiting(client, "git_commit", args, approve)
    assert not result.is_error, text(result)
    assert _log(repo) == ["approved", "first"]


def staged(repo: Path) -> dict[str, str]:
    """A change staged in `repo`, and git_commit's arguments to commit it."""
    (repo / "change.txt").write_text("change\n")
    subprocess.run(["git", "-C", str(repo), "add", "change.txt"], check=True)
    return {"repo_path": str(repo), "message": "approved"}


def _log(repo: Path) -> list[str]:
    out = subprocess.run(["git", "-C", str(repo), "log", "--format=%s"], check=True, capture_output=True, text=True)
    return out.stdout.split()


async def test_served_over_streamable_http_an_approved_write_lands(approvals: Approvals, gateway: Gateway) -> None:
    target = gateway.upstreams.files / "over-http.txt"

    async def approve() -> None:
        call = await approvals.pending_call()
        await approvals.decide(call.id, {"verdict": "approve"})

    gateway.servers = ("fs",)
    async with gateway.http_client("cursor") as client:
        result = await while_waiting(client, "write_file", {"path": str(target), "content": "via http"}, approve)
    assert not result.is_error, text(result)
    assert target.read_text() == "via http"
    [call] = await approvals.settled()
    assert call.agent_name == "cursor" and call.status == "succeeded"


async def test_a_waiting_call_sends_progress_naming_its_page_until_it_is_decided(
    approvals: Approvals, gateway: Gateway
) -> None:
    """Progress notifications (when the client asks for them) keep a client's own timeout from firing and say
    where the call waits; nothing else is sent to the client: no server-initiated request."""
    repo = gateway.upstreams.repo
    gateway.servers, gateway.extra = ("git",), ("--progress-every", "0.3")
    heard: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        heard.append((progress, total, message))

    async def approve_after_some_progress() -> None:
        call = await approvals.pending_call()
        with anyio.fail_after(20):
            while len(heard) < 3:
                await anyio.sleep(0.05)
        await approvals.decide(call.id, {"verdict": "approve"})

    async with gateway.client() as client:
        result: dict[str, Any] = {}

        async def call() -> None:
            result["r"] = await client.call_tool(
                "git_commit", staged(repo), progress_handler=on_progress, raise_on_error=False
            )

        async with anyio.create_task_group() as group:
            group.start_soon(call)
            await approve_after_some_progress()
    assert not result["r"].is_error, text(result["r"])
    [stored] = await approvals.calls()
    done = [d for d, _, _ in heard]
    assert done == sorted(done) and done[-1] > done[0]
    assert all(total == gateway.wait for _, total, _ in heard)
    assert all(message and f"/calls/{stored.id}" in message for _, _, message in heard)


async def test_two_identical_calls_waiting_at_once_run_once_on_one_approval(
    approvals: Approvals, gateway: Gateway
) -> None:
    """The model calls the same tool with the same arguments twice in one turn: both wait on one call
    (`same_arguments_same_call`), and its one approval runs it once; the other request is told why not.
    Before, both heard `approved` and both were forwarded."""
    target = gateway.upstreams.files / "once.txt"
    args = {"path": str(target), "content": "once"}
    results: list[CallToolResult] = []

    async with gateway.client("claude-code") as client:

        async def call() -> None:
            results.append(await client.call_tool("fs_write_file", args, raise_on_error=False))

        async with anyio.create_task_group() as group:
            group.start_soon(call)
            pending = await approvals.pending_call()
            group.start_soon(call)  # asked once the first is stored, it finds the same call and waits on it too
            await anyio.sleep(1.0)
            await approvals.decide(pending.id, {"verdict": "approve"})
    errors = [text(r) for r in results if r.is_error]
    assert len(results) == 2 and len(errors) == 1, [text(r) for r in results]
    assert "handed to another request with the same arguments" in errors[0]
    assert target.read_text() == "once"
    [stored] = await approvals.settled()
    assert stored.id == pending.id and stored.status == "succeeded"
    assert approvals.audit_verifies()
