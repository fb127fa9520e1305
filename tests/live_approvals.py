"""A live approvals server as an agent elsewhere meets it: an asking token, a reviewer's token, and what was stored.

Shared by the tests that drive real clients against `approvals serve` over HTTP: the coding
CLIs' hooks (tests/clis) and the MCP gateway (tests/mcp_gateway).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
import pytest

from approvals.store import SYSTEM
from approvals.store.models import ToolCallRow

from .eventually import eventually_sync
from .live_server import LiveServer

__all__ = ("REVIEWER", "Approvals", "accounts")

REVIEWER = "rita"
A = TypeVar("A")


@dataclass
class Approvals:
    """Our server, the token a client asks with, and a reviewer's token to decide with."""

    server: LiveServer
    asking_token: str
    reviewer_token: str

    @property
    def url(self) -> str:
        return self.server.url

    def calls(self) -> list[ToolCallRow]:
        """Every stored call, whatever its status, newest first."""
        return list(self.server.call(self.server.store.calls.list_calls(status=None)).items)

    def pending(self) -> list[ToolCallRow]:
        return list(self.server.call(self.server.store.calls.list_calls()).items)

    def decide(self, call_id: str, decision: Mapping[str, Any]) -> dict[str, Any]:
        """Decide like a reviewer does, through the JSON API."""
        response = httpx.post(
            f"{self.url}/api/calls/{call_id}/decision",
            json=dict(decision),
            headers={"Authorization": f"Bearer {self.reviewer_token}"},
            timeout=30,
        )
        assert response.status_code == 200, response.text
        decided: dict[str, Any] = response.json()
        return decided

    def wait_for_pending(self, running: Future[Any], *, seconds: float = 60) -> ToolCallRow:
        """The one call the client waits on, once it is stored; fail if the client ended first."""

        def stored() -> ToolCallRow | None:
            if pending := self.pending():
                [call] = pending
                return call
            if running.done():
                result = running.result()
                told = result.describe() if hasattr(result, "describe") else repr(result)
                pytest.fail(f"the client ended without a pending call:\n{told}")
            return None

        return eventually_sync(stored, "a pending call", seconds=seconds, interval=0.1)

    def call_actions(self, run_id: str) -> list[str]:
        """The audit log's `call.*` actions in run `run_id` (a gate session), oldest first."""
        page = self.server.call(self.server.store.audit.audit_events(run_id=run_id, newest_first=False))
        return [event.action for event in page.items if event.action.startswith("call.")]

    def audit_verifies(self) -> bool:
        return self.server.call(self.server.store.audit.verify_audit()).ok


def accounts(server: LiveServer, asking_name: str, kind: Callable[[LiveServer, str, str], A]) -> A:
    """`kind` over `server`: a token named `asking_name` that may only ask (`calls:ask`), and the reviewer's own."""
    store = server.store
    asking = server.call(store.people.create_token(asking_name, role="reviewer", actor=SYSTEM, scopes=["calls:ask"]))
    server.call(store.people.create_user(REVIEWER, "pw-123456789", role="reviewer", actor=SYSTEM))
    reviewing = server.call(store.people.create_token("rita-token", role="reviewer", actor=SYSTEM, user=REVIEWER))
    return kind(server, asking, reviewing)
