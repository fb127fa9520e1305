"""The web app goes through the front door: it changes state only through `ApprovalService`.

Handlers may read the store (a call, a run, a page of the inbox), but every change (a
decision, a rule, a user, a session) is one `ApprovalService` method, so the pages, the
JSON API, Slack and the e-mail links share one path for each; and no web module imports
the store's tables (`approvals.store.models`): rows come back under the service's names.
"""

from __future__ import annotations

import ast
from pathlib import Path

import approvals_web

WEB = Path(approvals_web.__file__).parent
READS = {
    "audit_events",
    "count_calls_by_status",
    "decisions_for",
    "email_link",
    "get_call",
    "get_run",
    "get_user",
    "last_audit_event_id",
    "list_calls",
    "list_rules",
    "list_runs",
    "list_users",
    "review_facts",
    "rule_versions",
    "run_calls",
    "session_user",
    "token_actor",
    "tool_definition",
    "user_by_email",
    "user_by_slack_id",
    "verify_audit",
}
"""What a web module may ask the store itself: reads, each one query."""


def _modules() -> list[tuple[str, ast.Module]]:
    return [(str(path.relative_to(WEB)), ast.parse(path.read_text())) for path in sorted(WEB.rglob("*.py"))]


def test_the_web_app_is_split_by_what_it_serves() -> None:
    folders = {path.name for path in WEB.iterdir() if (path / "__init__.py").exists()}
    assert folders == {"api", "email_links", "gate", "pages", "rules", "slack"}


def test_no_web_module_imports_the_store_tables() -> None:
    found = [
        name
        for name, tree in _modules()
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("approvals.store.models")
    ]
    assert found == []


def test_handlers_only_read_the_store() -> None:
    """Each call `<x>.store.<method>(...)` or `store.<method>(...)` names a read; changes go through the service."""
    calls: set[tuple[str, str]] = set()
    for name, tree in _modules():
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            owner = node.func.value
            on_store = (isinstance(owner, ast.Attribute) and owner.attr == "store") or (
                isinstance(owner, ast.Name) and owner.id == "store"
            )
            if on_store:
                calls.add((name, node.func.attr))
    assert {method for _, method in calls} <= READS, sorted(c for c in calls if c[1] not in READS)
    assert ("pages/inbox.py", "get_call") in calls  # the check sees the handlers' reads
