"""The audit log's public face: append events and verify the hash chain.

The implementation lives beside the tables in `approvals.store.audit`; see its docstring.
"""

from .store.audit import (
    GENESIS_HASH,
    AuditEvent,
    AuditVerification,
    append_event,
    append_events,
    event_hash,
    verify_audit_chain,
)

__all__ = (
    "GENESIS_HASH",
    "AuditEvent",
    "AuditVerification",
    "append_event",
    "append_events",
    "event_hash",
    "verify_audit_chain",
)
