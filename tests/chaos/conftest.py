"""The store tests' databases (a fresh copy of a migrated template per test), and a summary.

Each chaos session adds its numbers to `REPORTS`; they travel with the test's report (so
from an xdist worker to the controller too); tests/conftest.py prints them at the end of
the test session, passed or failed.
"""

from __future__ import annotations

from collections.abc import Generator

import pytest

from tests.conftest import CHAOS_REPORT
from tests.store.conftest import anyio_backend, db_url, postgres_url, sqlite_template, store

__all__ = ("REPORTS", "anyio_backend", "db_url", "postgres_url", "sqlite_template", "store")

REPORTS: list[str] = []
"""What the chaos sessions in this process report; moved onto the test's report when it ends."""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if call.when == "call":
        report.user_properties.extend((CHAOS_REPORT, text) for text in REPORTS)
        REPORTS.clear()
    return report
