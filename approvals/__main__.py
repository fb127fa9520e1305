"""The `approvals` command's entry point (also `python -m approvals`).

The command and the web app it serves need the `server` extra; the core library does not
(`pip install agent-approvals` is the library alone). Without the extra the command says
how to get it, in one line and with exit code 2, instead of failing with a traceback.
"""

from __future__ import annotations

import importlib.metadata
import re
import sys
from typing import NoReturn

__all__ = ("DISTRIBUTION", "INSTALL_HINT", "main", "missing_server_requirements")

DISTRIBUTION = "agent-approvals"
INSTALL_HINT = f"pip install '{DISTRIBUTION}[server]'"

_SERVER_EXTRA = re.compile(r"""\bextra\s*==\s*["']server["']""")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def missing_server_requirements() -> list[str]:
    """The distributions of the `server` extra, as the installed metadata lists them, that are not installed.

    Empty when nothing is missing, and when this copy of approvals was not installed (a source
    checkout on PYTHONPATH), where there is no metadata to go by.
    """
    try:
        requirements = importlib.metadata.requires(DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:
        return []
    missing = []
    for requirement in requirements:
        name = _NAME.match(requirement)
        if name is None or not _SERVER_EXTRA.search(requirement):
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
    missing = missing_server_requirements()
    if missing:
        _refuse(", ".join(missing))
    try:
        from .cli import main as cli_main
    except ModuleNotFoundError as exc:  # without metadata to check: typer itself is missing
        _refuse(exc.name or str(exc))
    cli_main()


if __name__ == "__main__":
    main()
