"""Every command's `--help` exits 0 and names the environment variables it reads; the command starts light.

The commands are found by walking the typer app's click group, so a new command is checked
without being listed here. The help a user actually runs goes through the `approvals` console
script: `approvals hook ...` is parsed by `approvals.hook_client` (standard library only), not
by typer, so it is run as a subprocess too.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from approvals import cli, hook_client
from approvals.cli import app

ROOT = Path(__file__).resolve().parents[1]
APPROVALS = Path(sys.executable).with_name("approvals")
"""The console script of the environment running the tests."""
ENV_NAME = re.compile(r"\bAPPROVALS_[A-Z_]+\b")
HEAVY = (
    "sqlalchemy",
    "alembic",
    "psycopg",
    "aiosqlite",
    "yaml",
    "approvals.store",
    "approvals.worker",
    "approvals.policy",
    "approvals.channels",
    "approvals.engines",
    "approvals.service",
    "approvals_web",
    "fastapi",
    "starlette",
    "uvicorn",
    "pydantic_settings",
)
"""Modules that `import approvals.cli` (and any `--help`) must not bring: the commands import them when they run."""


def _commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    yield path, command
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        yield from _commands(sub, (*path, name))


COMMANDS = list(_commands(typer.main.get_command(app)))


def _env_names(param: Any) -> list[str]:
    """The environment variables an option reads (`envvar=`) or its help names."""
    envvar = param.envvar or ()
    names = [envvar] if isinstance(envvar, str) else list(envvar)
    return names + ENV_NAME.findall(getattr(param, "help", None) or "")


def _words(text: str) -> str:
    return " ".join(text.split())


def test_the_walk_finds_every_command() -> None:
    paths = {" ".join(path) for path, _ in COMMANDS}
    assert {"", "serve", "worker", "mcp", "tokens create", "rules dry-run", "hook", "hook install"} <= paths
    assert any(_env_names(param) for _, command in COMMANDS for param in command.params)


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=[" ".join(path) or "approvals" for path, _ in COMMANDS])
def test_every_command_help_exits_0_and_names_its_environment_variables(path: tuple[str, ...], command: Any) -> None:
    result = CliRunner().invoke(app, [*path, "--help"], prog_name="approvals")
    assert result.exit_code == 0, result.output
    assert _words(result.output).startswith(_words(f"Usage: approvals {' '.join(path)}"))
    for param in command.params:
        for name in _env_names(param):
            assert name in result.output, f"{' '.join(path)} {param.name}: {name} is not in its help"


HOOK_HELP = ("APPROVALS_URL", "APPROVALS_TOKEN", "--wait", "--grace", "--fallback", "--url", "approvals hook install")


CONSOLE_SCRIPT_HELP = [
    (["--help"], ["Usage: approvals", "tokens", "hook", "mcp"]),
    (["hook", "--help"], [*HOOK_HELP, "claude-code"]),
    *[(["hook", name, "--help"], [*HOOK_HELP, name]) for name in hook_client.CLIS],
    (["hook", "claude-code", "-h"], HOOK_HELP),
    (["hook", "claude-code", "--wait", "5", "--help"], HOOK_HELP),
    (["hook", "install", "--help"], ["Usage: approvals hook install", "--fallback"]),
    (["mcp", "--help"], ["APPROVALS_URL", "APPROVALS_TOKEN", "--url", "--token"]),
    (["tokens", "create", "--help"], ["APPROVALS_DATABASE_URL", "calls:ask"]),
]


@pytest.mark.parametrize(
    ("args", "shown"), [pytest.param(args, shown, id=" ".join(args)) for args, shown in CONSOLE_SCRIPT_HELP]
)
def test_the_console_script_help_exits_0(args: list[str], shown: list[str]) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("APPROVALS_")}
    done = subprocess.run(
        [str(APPROVALS), *args], capture_output=True, text=True, timeout=60, env=env, stdin=subprocess.DEVNULL
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    for text in shown:
        assert text in done.stdout, f"{text!r} is not in `approvals {' '.join(args)}`:\n{done.stdout}"


def test_python_m_approvals_cli_has_every_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "approvals.cli", "mcp", "--help"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "APPROVALS_TOKEN" in done.stdout


class _Unreadable:
    def read(self, size: int = -1) -> bytes:
        raise AssertionError("--help must not read the hook input")


def test_hook_help_reads_and_asks_nothing_and_blocks_nothing() -> None:
    for argv in (["--help"], ["-h"], ["codex", "--help"], ["cursor", "--url", "http://x", "-h"]):
        out, err = io.StringIO(), io.StringIO()
        assert hook_client.main(argv, stdin=_Unreadable(), stdout=out, stderr=err) == 0
        assert "APPROVALS_TOKEN" in out.getvalue()
        assert err.getvalue() == ""
    err = io.StringIO()  # a usage error still blocks the tool
    assert hook_client.main(["nope"], stdin=_Unreadable(), stdout=io.StringIO(), stderr=err) == hook_client.BLOCK
    assert err.getvalue().startswith("Blocked by approvals: usage: approvals hook {claude-code,")


def test_an_option_value_that_looks_like_help_is_a_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("APPROVALS_TOKEN", raising=False)
    out, err = io.StringIO(), io.StringIO()
    assert hook_client.main(["cursor", "--url", "-h"], stdin=_Unreadable(), stdout=out, stderr=err) == 2
    assert out.getvalue() == ""
    assert "APPROVALS_TOKEN is not set" in err.getvalue()


def test_the_hook_help_tells_each_clis_fallbacks_as_the_server_knows_them() -> None:
    from approvals.engines.gate.hooks import FORMATS

    assert set(hook_client.CLIS) == set(FORMATS)
    for name, hook_format in FORMATS.items():
        told = hook_client._FALLBACKS[name]
        assert f"{name}: {told}" in hook_client.usage(name)
        assert re.findall(r"\b(deny|ask|defer)\b", told) == [fallback.value for fallback in hook_format.fallbacks]


def test_the_values_the_cli_copies_match_their_sources() -> None:
    from approvals.policy import Kind
    from approvals.worker import resumer

    assert cli.DEFAULT_LEASE_SECONDS == resumer.DEFAULT_LEASE_SECONDS
    assert cli.DEFAULT_POLL_INTERVAL == resumer.DEFAULT_POLL_INTERVAL
    assert cli.DEFAULT_WORKER_CONCURRENCY == resumer.DEFAULT_WORKER_CONCURRENCY
    assert [kind.value for kind in cli.RuleKind] == [kind.value for kind in Kind]


# In a fresh interpreter: import the CLI, ask every command for its help, and list what got imported.
_IMPORTS_OF_HELP = """
import contextlib, io, json, sys
import approvals.cli
imported = {"import": sorted(sys.modules)}
import typer.main
command = typer.main.get_command(approvals.cli.app)
def walk(command, path=()):
    yield path
    for name, sub in getattr(command, "commands", {}).items():
        yield from walk(sub, (*path, name))
for path in walk(command):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
        approvals.cli.app([*path, "--help"], prog_name="approvals")
imported["help"] = sorted(sys.modules)
print(json.dumps(imported))
"""


def _heavy(modules: list[str]) -> list[str]:
    return [name for name in modules if name in HEAVY or name.startswith(tuple(f"{heavy}." for heavy in HEAVY))]


def test_importing_the_cli_and_every_help_bring_none_of_the_heavy_modules() -> None:
    done = subprocess.run([sys.executable, "-c", _IMPORTS_OF_HELP], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    imported = json.loads(done.stdout)
    assert _heavy(imported["import"]) == []
    assert _heavy(imported["help"]) == []
    assert "rich" not in imported["help"]  # plain help: rendering it with rich costs more than the rest


def test_the_hook_path_imports_the_standard_library_only() -> None:
    script = (
        "import sys; before = set(sys.modules); import approvals.__main__, approvals.hook_client;"
        " print('\\n'.join(sorted(set(sys.modules) - before)))"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    ours = {"approvals", "approvals.__main__", "approvals.hook_client"}
    foreign = [
        name
        for name in done.stdout.split()
        if name not in ours and name.split(".")[0] not in sys.stdlib_module_names and not name.startswith("_")
    ]
    assert foreign == []
