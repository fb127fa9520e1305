"""Shared fixtures."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .llm_server import LocalModelServer, running_server


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def llm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalModelServer]:
    """The real model server, started once for the whole session (see tests/llm_server)."""
    with running_server(tmp_path_factory.mktemp("llm")) as server:
        yield server
