"""Audit review: the log read as sentences and stories, questions asked of it, and proof that travels.

The chain itself (events appended in the transaction of the change they describe, each hashed
over the one before) is the store's (`approvals.store.audit`); this package reads it for people
and signs it for outsiders.
"""
