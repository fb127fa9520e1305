"""Shared fixtures, and the markers that split the suite into tiers.

Every test gets its markers here, from where it lives and what it uses, so no test file
names them:

- `browser`: tests/browser/ (headless Chromium).
- `real_model`: tests/real_model/, and any test that uses the `llm_server` fixture.
- `chaos`: tests/chaos/ (worker processes killed with SIGKILL).
- `coding_cli`: tests/clis/ (the real Claude Code, Codex and Gemini CLIs, from `make clis`).
- `postgresql`: a test parametrized on PostgreSQL (`db_url`, `empty_db_url`: a parameter
  "postgresql"), one that uses `postgres_url`, starts a cluster of its own (calls
  `own_cluster`, tests/pg_cluster.py), goes through the databases itself (names `BACKENDS` or
  `PG_SERVER` in its body), or is skipped without PostgreSQL (a `skipif` whose reason says PostgreSQL).
- `slow`: any other test that takes more than about 5 s by itself (`SLOW`, `SLOW_FIXTURES` below).

`make check` runs what none of these mark; `make test` runs everything.
"""

from __future__ import annotations

import functools
import gc
import itertools
import os
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from _pytest.mark.expression import Expression
from _pytest.nodeid import NodeId
from argon2 import PasswordHasher

from approvals import security

from .llm_server import LocalModelServer, running_server

TESTS = Path(__file__).resolve().parent
BY_FOLDER = {"browser": "browser", "real_model": "real_model", "chaos": "chaos", "clis": "coding_cli"}
"""The first folder under tests/ -> the marker every test in it gets."""
SLOW = (
    "tests/test_quickstart.py",  # clones the repository and installs it from scratch
    "tests/test_cli.py::test_worker_stops_cleanly_on_sigterm",
    "tests/store/test_resumer.py::test_paused_in_one_process_resumed_in_another",
    "tests/engines/conformance/test_conformance.py::test_a_worker_killed_between_running_a_call_and_storing_its_result_never_runs_it_again",
    "tests/store/test_migrations.py::test_each_downgrade_restores_the_schema_before_its_upgrade[postgresql]",
    "tests/store/test_write_paths_agree.py",  # one test: random write sequences on SQLite and PostgreSQL
    "tests/store/test_outages.py::test_a_worker_process_outlives_a_postgresql_restart",
    "tests/web/test_webhooks.py::test_two_served_processes_with_a_restart_deliver_every_event_once_in_order",
    "tests/web/test_webhooks.py::test_two_app_instances_on_one_database_deliver_each_event_once_in_total[sqlite]",
    "tests/worker/test_worker_command.py::test_the_worker_delivers_webhooks_and_hands_them_back_when_it_stops",
    "tests/worker/test_follow_ups_processes.py",  # two `approvals worker` processes, one killed and restarted
    "tests/mcp_gateway/test_gateway.py",  # `approvals mcp` processes before real MCP servers, an approvals server each
    "tests/mcp_gateway/test_faults.py",
    "tests/web/test_schemathesis.py",  # every API operation (32) with 25 generated requests each over HTTP: ~25 s
    "tests/web/test_metrics_prometheus.py",  # a real Prometheus scraping uvicorn servers; a PostgreSQL cluster stopped
    "tests/store/test_call_waiters.py::test_calls_decided_one_by_one_in_another_process_each_wake_their_waiter",
    "tests/test_tracing_otlp.py",  # three processes exporting to a real OTLP/HTTP receiver
    "tests/test_tracing_calls.py::test_a_native_pause_is_traced_per_call_across_three_processes",
)
"""Tests that take more than about 5 s by themselves: a module, a test (all its parameters) or one node id."""
COSTLY_TO_COLLECT = {
    "tests/web/test_schemathesis.py": "slow",  # schemathesis builds every operation's test when collecting: ~2 s
    "tests/mcp_gateway/test_gateway.py": "slow",  # these three import FastMCP's client: ~0.9 s
    "tests/mcp_gateway/test_faults.py": "slow",
    "tests/mcp_gateway/test_pydantic_ai_mcp.py": "real_model",  # each of its tests uses the model server
}
"""Modules whose collection alone is costly (a process), every test of which has the marker: not collected when
`-m` deselects every test that has it (tests/test_markers.py checks they all have it)."""
SHARED_BY_MODULE = (
    "tests/browser/",  # a Chromium per module
    "tests/test_packaging.py",  # a wheel built, and a virtual environment installed from it
    "tests/web/test_schemathesis.py",  # one served app
    "tests/test_readme_api.py",  # one app
    "tests/test_markers.py",  # one collection of the suite in a subprocess
    "tests/web/test_metrics_prometheus.py",  # one Prometheus process
)
"""Modules whose tests share a module- or session-scoped fixture that is costly to build: under
`--dist loadgroup` each runs whole on one xdist worker, so the fixture is built once."""
CHAOS_REPORT = "chaos report"
"""The user property tests/chaos/conftest.py puts each chaos session's numbers in."""
CHAOS_REPORTS: list[str] = []
"""The chaos sessions' numbers, from this process or an xdist worker, printed when the session ends."""
SLOW_FIXTURES = {"core_only_venv"}
"""Fixtures that make any test using them slow (a virtual environment installed from PyPI)."""
COLLECTED = pytest.StashKey[list[tuple[str, pytest.Item]]]()
"""Every test this process collected, by its node id, before `-m` deselected any: tests/test_markers.py reads
their tier markers here when the session collected what it checks, instead of collecting again in a subprocess."""


def _needs_postgresql(item: pytest.Item) -> bool:
    callspec = getattr(item, "callspec", None)
    if callspec is not None and "postgresql" in callspec.params.values():
        return True
    if "postgres_url" in getattr(item, "fixturenames", ()):
        return True
    code = getattr(getattr(item, "function", None), "__code__", None)
    if code is not None and not {"own_cluster", "PG_SERVER", "BACKENDS"}.isdisjoint(code.co_names):
        return True  # starts a cluster of its own, or goes through the databases itself
    return any("postgresql" in str(mark.kwargs.get("reason", "")).lower() for mark in item.iter_markers("skipif"))


def _is_slow(item: pytest.Item) -> bool:
    if any(item.nodeid == slow or item.nodeid.startswith((f"{slow}[", f"{slow}::")) for slow in SLOW):
        return True
    return not SLOW_FIXTURES.isdisjoint(getattr(item, "fixturenames", ()))


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if not collection_path.is_relative_to(TESTS):
        return None
    marker = COSTLY_TO_COLLECT.get(collection_path.relative_to(TESTS.parent).as_posix(), "")
    return True if marker and _deselects_all_marked(config.option.markexpr, marker) else None


@functools.cache
def _deselects_all_marked(text: str, marker: str) -> bool:
    """Whether the `-m` expression `text` deselects every test that has `marker`, whatever other markers it has."""
    if not text or "=" in text:  # none, or one matching markers' arguments: assume it may select some
        return False
    try:
        expression = Expression.compile(text)
    except SyntaxError:
        return False  # pytest says what is wrong
    others = sorted(set(re.findall(r"[A-Za-z_][\w-]*", text)) - {"and", "or", "not", "True", "False", marker})
    if len(others) > 12:
        return False
    for present in itertools.product((False, True), repeat=len(others)):
        marks = {marker, *(name for name, there in zip(others, present, strict=True) if there)}
        if expression.evaluate(_having(marks)):
            return False
    return True


def _having(marks: set[str]) -> Callable[..., bool]:
    """The matcher of an item with `marks`, for `Expression.evaluate`."""
    return lambda name, /, **kwargs: name in marks


@pytest.hookimpl(tryfirst=True)  # before xdist's, which turns the xdist_group markers into node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        _name_in_node_id(item)
    config.stash[COLLECTED] = [(item.nodeid, item) for item in items]
    for item in items:
        path = item.path.resolve()
        if TESTS in path.parents and (folder := path.relative_to(TESTS).parts[0]) in BY_FOLDER:
            item.add_marker(BY_FOLDER[folder])
        if "llm_server" in getattr(item, "fixturenames", ()):
            item.add_marker("real_model")
        if _needs_postgresql(item):
            item.add_marker("postgresql")
        if _is_slow(item):
            item.add_marker("slow")
        if group := _xdist_group(item):
            item.add_marker(pytest.mark.xdist_group(group))
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=_start_early)


@pytest.hookimpl(trylast=True, specname="pytest_collection_modifyitems")
def pytest_collection_modifyitems_xdist_groups(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`--dist loadgroup` for pytest 9.2, where xdist 3.8's own step no longer takes: it renames a
    grouped test to `nodeid@group` through the old `_nodeid` field, and pytest now reads `_id`
    (pytest-xdist issue 1386). The same renaming, through the field pytest reads; a no-op once xdist's works."""
    if not getattr(config.option, "loadgroup", False):  # set in xdist's workers only
        return
    for item in items:
        mark = item.get_closest_marker("xdist_group")
        if mark is not None and "@" not in item.nodeid and hasattr(item, "_id"):
            item._id = NodeId.parse(f"{item.nodeid}@{mark.args[0]}")


def _name_in_node_id(item: pytest.Item) -> None:
    """Schemathesis names its test of each API operation `test[GET /api/calls]`, but pytest 9.2 builds a node id
    from the bare name and parameters only: the 32 operations shared one id, and xdist, which schedules by node id,
    ran one of them. Such an item gets its whole name back in its id."""
    last = item.nodeid.rsplit("::", 1)[-1]
    if item.name != last and item.name.startswith(f"{last}[") and hasattr(item, "_id"):
        item._id = NodeId.parse(item.nodeid + item.name.removeprefix(last))


def _start_early(item: pytest.Item) -> int:
    """Under xdist, the long tests first (a stable sort: each worker collects the same order), so the
    run does not end with one worker on a long test the others could have shared out."""
    if item.get_closest_marker("slow") or item.get_closest_marker("chaos"):
        return 0
    return 1 if item.get_closest_marker("coding_cli") else 2


def _xdist_group(item: pytest.Item) -> str | None:
    """The tests that share an expensive fixture run on one xdist worker (`--dist loadgroup`): every
    user of the model server on one (a server each would share the same 2 cores), a module of
    SHARED_BY_MODULE on one; any other test (None) is free to go anywhere."""
    if "llm_server" in getattr(item, "fixturenames", ()):
        return "llm_server"
    module = item.nodeid.split("::", 1)[0]
    return module if module.startswith(SHARED_BY_MODULE) else None


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    CHAOS_REPORTS.extend(str(value) for name, value in report.user_properties if name == CHAOS_REPORT)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if CHAOS_REPORTS:
        terminalreporter.section("chaos: workers killed with SIGKILL")
        for report in CHAOS_REPORTS:
            terminalreporter.write_line(report)


def pytest_sessionfinish() -> None:
    """Drop the PostgreSQL databases this process made (each xdist worker runs this for its own). tests/databases.py
    is not imported here (0.7 s: the store and its drivers), so an xdist controller starts its workers sooner; a
    process none of whose tests imported it made none."""
    databases = sys.modules.get(f"{__package__}.databases")
    if databases is not None:
        databases.DATABASES.close()


@pytest.hookimpl(trylast=True)
def pytest_unconfigure() -> None:
    """The process exits next: spare it the last garbage collection's walk over every object the session made
    (1-2 s an xdist worker, which the controller waits for). Exiting frees the memory all the same."""
    gc.freeze()


@pytest.fixture(scope="session", autouse=True)
def cheap_password_hashes() -> Iterator[None]:
    """Argon2 at its lowest cost in this process: the library's default takes ~180 ms a hash, and
    every web test creates seven users. Hashes and checks still go through argon2id; servers the
    tests start as processes of their own keep the real cost."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(security, "_hasher", PasswordHasher(time_cost=1, memory_cost=8, parallelism=1))
        yield


@pytest.fixture(scope="session", autouse=True)
def own_data_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A data directory of the session's own (`XDG_DATA_HOME`, inherited by the processes tests start): a command
    run without a database URL uses a per-user database there, never the real user's."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_DATA_HOME", str(tmp_path_factory.mktemp("data-home")))
        yield


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def llm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalModelServer]:
    """The real model server, started once for the whole session (see tests/llm_server)."""
    with running_server(tmp_path_factory.mktemp("llm")) as server:
        yield server
