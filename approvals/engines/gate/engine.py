"""Gates: engines for agents that run elsewhere and wait for decisions themselves.

A gate has no history to store or resume: its caller requests a decision on each risky call
(`store.calls.request_call`), waits for it (`store.calls.wait_for_decision`), runs the tool itself and
reports how it went (`store.calls.settle_call`). Each wire format that asks this way (the HTTP
gate, a coding CLI's hook, an MCP proxy) is a gate engine under its own name, so the run
page and the audit log say who asked.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...calls.engines import EngineKind, HistoryCodec

__all__ = ("API_ENGINES", "HOOK_ENGINES", "MCP_ENGINE", "GateEngine", "engine")


@dataclass(frozen=True)
class GateEngine:
    """An engine whose runs are continued by their own agent, never by our worker."""

    name: str
    kind: EngineKind = EngineKind.GATE

    @property
    def codec(self) -> HistoryCodec | None:
        return None

    def adopt(self, candidate: object, *, name: str | None = None) -> None:
        """A gate runs no agent of ours."""
        return None


engine = GateEngine("gate")
"""The generic gate: any program that asks over the API."""

MCP_ENGINE = GateEngine("mcp")
"""The MCP gateway (`approvals mcp`, `approvals.engines.mcp`): MCP clients' tool calls, asked through the HTTP gate."""

API_ENGINES = {"gate": engine, "mcp": MCP_ENGINE}
"""The gates that ask over the HTTP gate API (`POST /api/gate/calls`), by the name a request gives."""

HOOK_ENGINES = {name: GateEngine(name) for name in ("claude_code", "codex", "gemini", "cursor")}
"""The coding CLIs whose pre-tool hooks ask us (`approvals.engines.gate.hooks`), each a gate of its own."""
