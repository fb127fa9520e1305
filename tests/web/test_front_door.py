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
    "people.scim_group",
    "people.scim_groups",
    "people.scim_user",
    "people.scim_users",
    "audit.audit_event",
    "audit.audit_events",
    "audit.last_audit_event_id",
    "audit.verify_audit",
    "calls.count_calls_by_status",
    "calls.decisions_for",
    "calls.get_call",
    "calls.list_calls",
    "calls.review_facts",
    "calls.run_calls",
    "calls.tool_definition",
    "outbound.email_link",
    "people.get_user",
    "people.list_users",
    "people.session_user",
    "people.token_actor",
    "people.user_by_email",
    "people.user_by_slack_id",
    "people.reviewer_actor",
    "rules.list_rules",
    "rules.rule_versions",
    "runs.get_run",
    "runs.list_runs",
}
"""What a web module may ask the store's aggregates itself: reads, each one query."""


def _modules() -> list[tuple[str, ast.Module]]:
    return [(str(path.relative_to(WEB)), ast.parse(path.read_text())) for path in sorted(WEB.rglob("*.py"))]


def test_the_web_app_is_split_by_what_it_serves() -> None:
    folders = {path.name for path in WEB.iterdir() if (path / "__init__.py").exists()}
    assert folders == {"api", "email_links", "gate", "pages", "rules", "scim", "slack", "sso"}


def test_no_web_module_imports_the_store_tables() -> None:
    found = [
        name
        for name, tree in _modules()
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("approvals.store.models")
    ]
    assert found == []


def _is_store(node: ast.expr) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "store") or (
        isinstance(node, ast.Name) and node.id == "store"
    )


def _store_call(func: ast.Attribute) -> str | None:
    """`calls.get_call` for `<x>.store.calls.get_call(...)`, `get_call` for `store.get_call(...)`; else None."""
    if isinstance(func.value, ast.Attribute) and _is_store(func.value.value):
        return f"{func.value.attr}.{func.attr}"
    return func.attr if _is_store(func.value) else None


def test_handlers_only_read_the_store() -> None:
    """Each call `<x>.store.<aggregate>.<method>(...)` (or on the store itself) names a read; changes go through the
    service."""
    calls: set[tuple[str, str]] = set()
    for name, tree in _modules():
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            method = _store_call(node.func)
            if method is not None:
                calls.add((name, method))
    assert {method for _, method in calls} <= READS, sorted(c for c in calls if c[1] not in READS)
    assert ("pages/inbox.py", "calls.get_call") in calls  # the check sees the handlers' reads
