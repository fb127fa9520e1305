"""The public surface: `__all__` is sorted, complete, and the core never imports the web app or an optional engine."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import approvals
import approvals.engines.native.formats
import approvals.engines.native.tools

PACKAGE = pathlib.Path(approvals.__file__).parent


def test_all_is_sorted_and_importable() -> None:
    for module in (approvals, approvals.engines.native.tools, approvals.engines.native.formats):
        names = list(module.__all__)
        assert names == sorted(names, key=lambda n: (not n.isupper(), n)), module.__name__
        for name in names:
            assert hasattr(module, name), f"{module.__name__}.{name}"


# The web app and what only it and the CLI use (the `server` extra): none of it is the core's.
WEB_STACK = frozenset(
    {
        *("approvals_web", "web", "fastapi", "starlette", "uvicorn", "jinja2", "jinja2_fragments", "sse_starlette"),
        *("pydantic_settings", "itsdangerous", "multipart", "python_multipart", "typer", "click"),
    }
)


def test_core_does_not_import_the_web_layer() -> None:
    for path in PACKAGE.rglob("*.py"):
        if path == PACKAGE / "cli.py":
            continue  # the CLI starts the web app, as the architecture allows
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                modules = [node.module or ""]
            else:
                continue
            for module in modules:
                assert module.split(".")[0] not in WEB_STACK, f"{path}: {module}"


def _imported_modules(path: pathlib.Path) -> list[str]:
    """The absolute names of the modules a file of the package imports, relative imports resolved."""
    package = path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1]  # a module's, or an `__init__`'s
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[: len(package) - node.level + 1]) if node.level else ""
            module = ".".join(part for part in (base, node.module or "") if part)
            names.append(module)
            names += [f"{module}.{alias.name}" for alias in node.names]  # `from . import pydantic_ai`
    return names


def test_the_core_imports_no_optional_engine() -> None:
    """Only `approvals/engines/pydantic_ai/` imports pydantic-ai; the core finds that engine by its import path."""
    engine_package = PACKAGE / "engines" / "pydantic_ai"
    for path in PACKAGE.rglob("*.py"):
        if engine_package in path.parents:
            continue
        for module in _imported_modules(path):
            assert module.split(".")[0] != "pydantic_ai", f"{path}: {module}"
            assert not (module + ".").startswith("approvals.engines.pydantic_ai."), f"{path}: {module}"


# Runs a native agent through the registry and reads its history back: none of it may load pydantic-ai.
USE_THE_CORE = """
import sys
import approvals, approvals.engines.native.messages, approvals.worker.resumer, approvals.engines
from approvals.engines.native.messages import (
    ModelRequest, UserPromptPart, as_approvals_messages, dump_message, load_stored_history,
)
from approvals.engines.native.models import TestModel
from approvals.worker.resumer import AgentRegistry
import json

registry = AgentRegistry([approvals.Agent(TestModel(), name="plain")])
history = [ModelRequest(parts=[UserPromptPart(content="hi")])]
rows = [(json.dumps(dump_message(m)), 1) for m in history]
assert load_stored_history(rows) == as_approvals_messages(history) == history
assert registry.get("plain").codec.view(history) == history
optional = [
    name for name in sys.modules
    if name.partition(".")[0] == "pydantic_ai" or name.startswith("approvals.engines.pydantic_ai")
]
print(" ".join(sorted(optional)))
"""


def test_importing_and_using_the_core_does_not_import_pydantic_ai() -> None:
    result = subprocess.run(
        [sys.executable, "-c", USE_THE_CORE],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=PACKAGE.parent / "tests",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [], "the core imported pydantic-ai"
