"""Audit review: the log read as sentences and stories, questions asked of it, and proof that travels.

The chain itself (events appended in the transaction of the change they describe, each hashed
over the one before) is the store's (`approvals.store.audit`); this package reads it for people
and signs it for outsiders.
"""

from ..store.audit import GENESIS_HASH, AuditEvent, AuditVerification, event_hash, verify_audit_chain
from ..store.backends import append_event, append_events

__all__ = (
    "GENESIS_HASH",
    "AuditEvent",
    "AuditVerification",
    "append_event",
    "append_events",
    "event_hash",
    "verify_audit_chain",
)
