"""The `approvals` command's entry point (also `python -m approvals`).

The command and the web app it serves need the `server` extra; the core library does not
(`pip install agent-approvals` is the library alone). Without the extra the command says
how to get it, in one line and with exit code 2, instead of failing with a traceback.
"""

from __future__ import annotations

import importlib.util
import sys
from typing import NoReturn

__all__ = ("DISTRIBUTION", "INSTALL_HINT", "main", "missing_server_requirements")

DISTRIBUTION = "agent-approvals"
INSTALL_HINT = f"pip install '{DISTRIBUTION}[server]'"
_SERVER_MARKERS = ("typer", "fastapi", "uvicorn")
"""Modules only the server extra brings, looked for (not imported) before any command runs."""


def missing_server_requirements() -> list[str]:
    """The distributions of the `server` extra, as the installed metadata lists them, that are not installed.

    Empty when nothing is missing, and when this copy of approvals was not installed (a source
    checkout on PYTHONPATH), where there is no metadata to go by.
    """
    import importlib.metadata  # here, not at the top: it alone is a good part of a fast command's start-up
    import re

    server_extra = re.compile(r"""\bextra\s*==\s*["']server["']""")
    distribution_name = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
    try:
        requirements = importlib.metadata.requires(DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:
        return []
    missing = []
    for requirement in requirements:
        name = distribution_name.match(requirement)
        if name is None or not server_extra.search(requirement):
            continue
        try:
            importlib.metadata.distribution(name.group())
        except importlib.metadata.PackageNotFoundError:
            missing.append(name.group())
    return missing


def _refuse(missing: str) -> NoReturn:
    sys.stderr.write(f"error: the approvals command needs the server extra: {INSTALL_HINT} (missing: {missing})\n")
    sys.exit(2)


def main() -> None:
    """Run the `approvals` command, or say in one line how to install what it needs."""
    if sys.argv[1:2] == ["hook"] and sys.argv[2:3] != ["install"]:  # a coding CLI's hook: standard library only, fast
        from .hook_client import main as hook_main

        sys.exit(hook_main(sys.argv[2:]))
    # The installed metadata is read only when the extra looks absent or an import fails: reading it would cost a
    # fast command a good part of its start-up, and the CLI imports what a command needs when it runs (issue 36).
    # typer alone proves nothing (the core's CEL package brings it), so the extra's web server is looked for too.
    if any(importlib.util.find_spec(name) is None for name in _SERVER_MARKERS):
        _refuse(", ".join(missing_server_requirements()) or ", ".join(_SERVER_MARKERS))
    try:
        from .cli import main as cli_main
    except ModuleNotFoundError as exc:  # typer itself is missing
        _refuse(", ".join(missing_server_requirements()) or exc.name or str(exc))
    try:
        cli_main()
    except ModuleNotFoundError:  # what the command needed: a part of the extra, or else not ours to explain
        missing = missing_server_requirements()
        if missing:
            _refuse(", ".join(missing))
        raise


if __name__ == "__main__":
    main()
