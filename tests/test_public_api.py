"""The public surface: `__all__` is sorted, complete, and the core never imports the web app."""

from __future__ import annotations

import ast
import pathlib

import approvals
import approvals.formats
import approvals.tools

PACKAGE = pathlib.Path(approvals.__file__).parent


def test_all_is_sorted_and_importable() -> None:
    for module in (approvals, approvals.tools, approvals.formats):
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
