"""What the coding-CLI tests share: running a CLI in the background while the test decides."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest


@pytest.fixture
def background() -> Iterator[Callable[..., Future[Any]]]:
    """Run the CLI in a thread (`background(run_claude, ...)`), while the test decides.

    Not waited for at the end: a failed test's CLI ends once our server stops (the hook fails
    and blocks), or at its run's timeout.
    """
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cli")
    try:
        yield lambda *args, **kwargs: pool.submit(*args, **kwargs)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
