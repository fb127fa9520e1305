"""The audit log's public face: append events and verify the hash chain.

The event content and the chain live beside the tables in `approvals.store.audit`; appending is
each database's own (`approvals.store.backends`).
"""

from .store.audit import GENESIS_HASH, AuditEvent, AuditVerification, event_hash, verify_audit_chain
from .store.backends import append_event, append_events

__all__ = (
    "GENESIS_HASH",
    "AuditEvent",
    "AuditVerification",
    "append_event",
    "append_events",
    "event_hash",
    "verify_audit_chain",
)
