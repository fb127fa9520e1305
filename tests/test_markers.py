"""tests/conftest.py gives every test its tier's markers, so `pytest -m browser` (or `make check`'s
`-m "not ..."`) selects what it says, on a few modules: as this session collected them (before `-m`
deselected any) when it collected all of them on both databases, as `make check` and `make test` do;
else collected once in a subprocess (~5 s)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from .conftest import COLLECTED, COSTLY_TO_COLLECT, SLOW, _deselects_all_marked
from .databases import BACKENDS

ROOT = Path(__file__).resolve().parents[1]
TIERS = ("postgresql", "browser", "real_model", "chaos", "coding_cli", "slow")
MODULES = [
    "tests/browser/test_api_docs.py",
    "tests/browser/test_pydantic_ai_real_model.py",
    "tests/real_model/test_agent_runs.py",
    "tests/chaos/test_checks.py",
    "tests/clis/test_claude_code_harness.py",
    "tests/store/test_hot_path_sql.py",
    "tests/web/test_health.py",
    "tests/test_quickstart.py",
    "tests/test_cli.py",
    "tests/test_webhook_signature.py",
]
# Prints each selected test's tier markers after the real `-m` selection (and --strict-markers) ran.
COLLECT = f"""
import json, sys
import pytest

class Report:
    def pytest_collection_finish(self, session):
        for item in session.items:
            marks = sorted(m.name for m in item.iter_markers() if m.name in {TIERS!r})
            print("MARKS", json.dumps([item.nodeid, marks]))

sys.exit(pytest.main(sys.argv[1:], plugins=[Report()]))
"""


@pytest.fixture(scope="module")
def marked(request: pytest.FixtureRequest) -> dict[str, set[str]]:
    """Node id -> tier markers of the tests in MODULES that `-m "postgresql or browser or ..."` selects."""
    collected = request.config.stash.get(COLLECTED, [])
    modules = {nodeid.split("::", 1)[0] for nodeid, _ in collected}
    if modules.issuperset(MODULES) and {"sqlite", "postgresql"}.issubset(BACKENDS):
        in_modules = ((nodeid, item) for nodeid, item in collected if nodeid.split("::", 1)[0] in MODULES)
        tiers = {nodeid: {m.name for m in item.iter_markers() if m.name in TIERS} for nodeid, item in in_modules}
        return {nodeid: marks for nodeid, marks in tiers.items() if marks}
    env = {**os.environ, "APPROVALS_TEST_DATABASES": "sqlite,postgresql"}
    args = ["--collect-only", "-q", "-p", "no:cacheprovider", "-m", " or ".join(TIERS), *MODULES]
    done = subprocess.run(
        [sys.executable, "-c", COLLECT, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [json.loads(line.removeprefix("MARKS ")) for line in done.stdout.splitlines() if line.startswith("MARKS ")]
    return {nodeid: set(marks) for nodeid, marks in lines}


def test_each_tier_is_marked_and_quick_tests_are_not(marked: dict[str, set[str]]) -> None:
    docs = "tests/browser/test_api_docs.py::test_the_api_docs_render_with_nothing_from_other_sites"
    assert marked[f"{docs}[sqlite]"] == {"browser"}
    assert marked[f"{docs}[postgresql]"] == {"browser", "postgresql"}
    real_in_browser = [n for n in marked if n.startswith("tests/browser/test_pydantic_ai_real_model.py::")]
    assert real_in_browser and all({"browser", "real_model"} <= marked[n] for n in real_in_browser)  # its fixture's
    assert marked["tests/real_model/test_agent_runs.py::test_run_sync_three_times_on_one_agent"] == {"real_model"}
    assert marked["tests/chaos/test_checks.py::test_an_untouched_run_keeps_every_promise[sqlite]"] == {"chaos"}
    clis = [n for n in marked if n.startswith("tests/clis/")]
    assert clis and all(marked[n] == {"coding_cli"} for n in clis)

    health = "tests/web/test_health.py::test_healthz_answers_and_readyz_says_what_is_ready"
    assert marked[f"{health}[postgresql]"] == {"postgresql"}  # the web fixture's db_url
    assert f"{health}[sqlite]" not in marked
    restarts = "tests/web/test_health.py::test_while_postgresql_is_down_clients_get_503_and_readyz_says_not_ready"
    assert marked[restarts] == {"postgresql"}  # a cluster of its own
    assert marked["tests/store/test_hot_path_sql.py::test_migrations_install_exactly_the_file"] == {"postgresql"}

    assert marked["tests/test_quickstart.py::test_quick_start_from_a_fresh_clone"] == {"slow"}
    assert marked["tests/test_cli.py::test_worker_stops_cleanly_on_sigterm"] == {"slow"}
    assert "tests/test_cli.py::test_db_upgrade_and_current" not in marked
    assert not [n for n in marked if n.startswith("tests/test_webhook_signature.py::")]


def test_browser_is_every_test_in_tests_browser_and_no_other(marked: dict[str, set[str]]) -> None:
    browser = {n for n, marks in marked.items() if "browser" in marks}
    assert browser == {n for n in marked if n.startswith("tests/browser/")}
    assert len([n for n in browser if n.startswith("tests/browser/test_api_docs.py::")]) == 2  # both databases


def test_every_slow_entry_names_a_test_that_exists() -> None:
    """A renamed test must not silently leave the slow tier (and make `make check` slow)."""
    for entry in SLOW:
        path, _, rest = entry.partition("::")
        assert (ROOT / path).is_file(), entry
        if rest:
            tree = ast.parse((ROOT / path).read_text())
            names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
            assert rest.split("[", 1)[0] in names, entry


def test_no_two_collected_tests_share_a_node_id(request: pytest.FixtureRequest) -> None:
    """xdist schedules by node id, so of tests sharing one only one ran (schemathesis's 32, under pytest 9.2)."""
    counted = Counter(nodeid for nodeid, _ in request.config.stash.get(COLLECTED, []))
    assert not [nodeid for nodeid, times in counted.items() if times > 1]


QUICK = "not postgresql and not browser and not real_model and not chaos and not coding_cli and not slow"
DESELECT_ALL_SLOW = (QUICK, "not slow", "browser and not slow", "not (slow or browser)")
MAY_SELECT_SLOW = ("", "slow", "not browser", "not slow or postgresql", "slow(x=1)")


@pytest.mark.parametrize("expression", DESELECT_ALL_SLOW + MAY_SELECT_SLOW)
def test_a_costly_module_is_left_uncollected_only_when_none_of_its_tests_could_be_selected(expression: str) -> None:
    assert _deselects_all_marked(expression, "slow") is (expression in DESELECT_ALL_SLOW)


def test_every_test_of_a_module_left_uncollected_has_its_marker(request: pytest.FixtureRequest) -> None:
    """Checked on the modules this session collected (all of them in `make test`)."""
    for nodeid, item in request.config.stash.get(COLLECTED, []):
        marker = COSTLY_TO_COLLECT.get(nodeid.split("::", 1)[0])
        assert marker is None or item.get_closest_marker(marker) is not None, (nodeid, marker)
