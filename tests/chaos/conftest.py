"""The store tests' databases (a fresh SQLite file, or truncated PostgreSQL tables, per test), and a summary.

Each chaos session adds its numbers to `REPORTS`; they are printed at the end of the test
session, passed or failed.
"""

from __future__ import annotations

import pytest

from tests.store.conftest import anyio_backend, db_url, postgres_url, sqlite_template, store

__all__ = ("REPORTS", "anyio_backend", "db_url", "postgres_url", "sqlite_template", "store")

REPORTS: list[str] = []


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if REPORTS:
        terminalreporter.section("chaos: workers killed with SIGKILL")
        for report in REPORTS:
            terminalreporter.write_line(report)
