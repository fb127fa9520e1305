"""Gates: agents that run elsewhere ask for decisions over HTTP, or through a coding CLI's hook.

`engine`: the gate engines, one per wire format (`gate` for the generic API, one per coding
CLI), so the run page and the audit log say who asked. `answers`: what a waiting caller is
told of its call. `hooks`: the coding CLIs' hook formats, read into a `CallRequest` and
written back from an answer.
"""

from .engine import API_ENGINES, HOOK_ENGINES, MCP_ENGINE, GateEngine, engine

__all__ = ("API_ENGINES", "HOOK_ENGINES", "MCP_ENGINE", "GateEngine", "engine")
