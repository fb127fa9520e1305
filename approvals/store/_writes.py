"""Moved to `run_plan` (a worker's write as data); `run_sql` holds its statements.

Kept for the callers outside the store that still import from here (`tests/store/conftest.py`,
`tests/web/test_webhooks.py`, `backends/postgres.py` as committed), until they move.
"""

from .run_plan import RunWrite, lease_lost, utcnow

__all__ = ("RunWrite", "lease_lost", "utcnow")
