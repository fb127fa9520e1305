"""Moved to `run_plan` (a worker's write as data); `run_sql` holds its statements.

Kept for the two callers outside the store that still import from here (`tests/store/conftest.py`,
`tests/web/test_webhooks.py`), until they move.
"""

from .run_plan import RunWrite, utcnow

__all__ = ("RunWrite", "utcnow")
