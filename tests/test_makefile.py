"""What the Makefile sets up before uv makes the virtual environment: nothing may land in `.venv` first."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _variables_of(target: str) -> dict[str, str]:
    """The variables `make` would set while building `target` (its database, without running a recipe):
    the global ones, then the target's own over them."""
    printed = subprocess.run(
        ["make", "--no-print-directory", "-n", "-p", target], cwd=ROOT, capture_output=True, text=True, timeout=60
    ).stdout
    global_ = dict(re.findall(r"^([A-Z_]+) :?= (.*)$", printed, re.MULTILINE))
    own = dict(re.findall(rf"^{target}: ([A-Z_]+) :?= (.*)$", printed, re.MULTILINE))
    return global_ | own


@pytest.mark.parametrize("target", ["check", "test"])
def test_the_bytecode_cache_is_kept_outside_the_virtual_environment(target: str) -> None:
    """A target's exported variables reach its prerequisites, the first of which makes uv's tools with
    `python -m venv`: a bytecode cache inside `.venv` made a `.venv` folder that `uv sync` then refused
    on a fresh clone ("not a valid Python environment")."""
    variables = _variables_of(target)
    venv, cache = Path(variables["VENV"]), Path(variables["PYTHONPYCACHEPREFIX"])
    assert cache != venv and venv not in cache.parents, (cache, venv)
