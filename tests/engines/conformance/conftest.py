"""The conformance suite's matrix: every registered engine (`registry.HARNESSES`) on every database.

The databases are the store tests' own fixtures (`db_url`, `store`: SQLite and PostgreSQL),
imported whole so that how they are made stays defined in one place.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from approvals.store import Store

from ...store.conftest import *  # noqa: F403  (db_url, store and the session databases behind them)
from .driver import Driver
from .harnesses import Harness
from .registry import HARNESSES


@pytest.fixture(params=list(HARNESSES))
def harness(request: pytest.FixtureRequest) -> Harness:
    return HARNESSES[request.param]


@pytest.fixture
def driver(harness: Harness, store: Store, db_url: str, tmp_path: Path) -> Driver:
    return Driver(harness, store, db_url, tmp_path / "log")
