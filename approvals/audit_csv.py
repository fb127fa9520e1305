"""The audit log as CSV rows, one shape for the API's export and the CLI's.

Cells a spreadsheet would run as a formula (starting with `=`, `+`, `-`, `@`, a tab or a
carriage return) are prefixed with `'`: an actor's or a tool's name comes from users and
models, and opening an export must never run what they wrote (CSV injection).
"""

from __future__ import annotations

import json

from .store.models import AuditEventRow

__all__ = ("CSV_COLUMNS", "csv_row", "spreadsheet_safe")

CSV_COLUMNS = (
    "id",
    "at",
    "actor",
    "action",
    "summary",
    "subject_type",
    "subject_id",
    "run_id",
    "agent",
    "tool",
    "details",
    "prev_hash",
    "hash",
)


def spreadsheet_safe(cell: str) -> str:
    """`cell`, with a leading `'` when a spreadsheet would run it as a formula."""
    return "'" + cell if cell.startswith(("=", "+", "-", "@", "\t", "\r")) else cell


def csv_row(row: AuditEventRow, summary: str = "") -> list[str]:
    """One event in the order of `CSV_COLUMNS`; `summary` is its sentence (`approvals.audit.sentences`);
    details as JSON, text cells made spreadsheet-safe."""
    texts = [row.actor, row.action, summary, row.subject_type, row.subject_id, row.run_id]
    texts += [row.agent_name, row.tool_name]
    details = json.dumps(row.details, sort_keys=True, ensure_ascii=False) if row.details is not None else ""
    return [
        str(row.id),
        row.at.isoformat(),
        *(spreadsheet_safe(text or "") for text in texts),
        spreadsheet_safe(details),
        row.prev_hash,
        row.hash,
    ]
