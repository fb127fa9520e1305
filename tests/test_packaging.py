"""The distribution: `agent-approvals` is the core library; `agent-approvals[server]` adds the web app and CLI.

Builds the wheel with the project's build backend (hatchling) and looks inside: two top-level
packages, `approvals` and `approvals_web`, with the templates, static files and migrations;
the web stack only under the `server` extra. Then installs that wheel without extras into a
fresh virtual environment, where the library works and the `approvals` command says how to
get the rest.
"""

from __future__ import annotations

import email.parser
import os
import re
import socket
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path, PurePosixPath

import pytest
from packaging.requirements import Requirement

from .test_public_api import WEB_STACK

ROOT = Path(__file__).resolve().parents[1]
WEB_PACKAGE = ROOT / "web" / "approvals_web"

# What the `server` extra brings, by distribution name, as pyproject.toml says (WEB_STACK names their modules).
SERVER_DISTRIBUTIONS = frozenset(
    Requirement(line).name
    for line in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["server"]
)

# Imports every module of the core library (all but the CLI and the agent frameworks' engines, which
# bring their own stacks; the model SDK adapters when their SDK is installed) and prints the
# web-stack and pydantic-ai modules that came along, one per line. Packages are walked by their
# files, so a skipped package is never imported to find its modules.
IMPORT_THE_CORE = f"""
import importlib, importlib.util, pkgutil, sys
import approvals, approvals.store, approvals.worker.resumer, approvals.service
SKIPPED = (
    "approvals.cli",
    "approvals.engines.pydantic_ai",
    # the other frameworks' engines: each its extra's stack (LangChain, the OpenAI Agents SDK, LlamaIndex)
    "approvals.engines.langgraph",
    "approvals.engines.openai_agents",
    "approvals.engines.llamaindex",
    # the MCP gateway's server side: FastMCP (the mcp extra) is a web stack of its own, loaded by `approvals mcp` only
    "approvals.engines.mcp.gate_client",
    "approvals.engines.mcp.middleware",
    "approvals.engines.mcp.outcomes",
    "approvals.engines.mcp.proxy",
)
SDKS = {{
    "approvals.engines.native.models.openai": "openai",
    "approvals.engines.native.models.anthropic": "anthropic",
    "approvals.channels.slack": "slack_sdk",  # loaded only when Slack is turned on (the server extra)
    "approvals.channels.slack_api": "slack_sdk",
    "approvals.channels.slack_blocks": "slack_sdk",
}}

def modules(path, prefix):
    for info in pkgutil.iter_modules(path, prefix):
        if info.name in SKIPPED:
            continue
        yield info.name
        if info.ispkg:
            yield from modules([f"{{path[0]}}/{{info.name.rsplit('.', 1)[1]}}"], info.name + ".")

# what an installed SDK brings by itself is its own (openai 2 imports httpx, and httpx click); the wheel's
# test, in a venv without the SDKs, holds the core to bringing nothing
for sdk in sorted(set(SDKS.values())):
    if importlib.util.find_spec(sdk) is not None:
        importlib.import_module(sdk)
theirs = set(sys.modules)
for name in modules(approvals.__path__, "approvals."):
    sdk = SDKS.get(name)
    if sdk and importlib.util.find_spec(sdk) is None:
        continue
    importlib.import_module(name)
web = {sorted(WEB_STACK | {"pydantic_ai"})!r}
print("\\n".join(sorted(name for name in set(sys.modules) - theirs if name.split(".")[0] in web)))
"""


def _relative_files(folder: Path) -> set[str]:
    return {
        path.relative_to(folder).as_posix()
        for path in folder.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built from this checkout by the build backend pyproject.toml names."""
    out = tmp_path_factory.mktemp("dist")
    backend = "import sys; from hatchling.build import build_wheel; print(build_wheel(sys.argv[1]))"
    build = subprocess.run(
        [sys.executable, "-c", backend, str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stderr
    return out / build.stdout.strip().splitlines()[-1]


def test_the_core_library_imports_without_the_web_stack() -> None:
    result = subprocess.run(
        [sys.executable, "-c", IMPORT_THE_CORE], capture_output=True, text=True, timeout=120, cwd=ROOT / "tests"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [], "importing the core brought in the web stack"


def test_deciding_a_call_by_a_condition_brings_in_no_web_stack() -> None:
    """CEL's package imports its command-line tool (typer, rich); the rules load only its engine."""
    web = sorted(WEB_STACK)
    script = (
        "import sys\n"
        "from approvals.policy import compile_condition\n"
        "assert compile_condition('args.amount < 50').holds({'args': {'amount': 20}})\n"
        f"print(' '.join(sorted(n for n in sys.modules if n.split('.')[0] in {web!r})))"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == []


def test_the_wheel_holds_two_packages_and_the_web_stack_is_an_extra(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        [metadata_path] = [n for n in names if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)]
        metadata = email.parser.Parser().parsestr(archive.read(metadata_path).decode())
        [entry_points] = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        scripts = archive.read(entry_points).decode()

    tops = {PurePosixPath(n).parts[0] for n in names if not PurePosixPath(n).parts[0].endswith(".dist-info")}
    assert tops == {"approvals", "approvals_web"}
    files = set(names)
    assert {f"approvals_web/{f}" for f in _relative_files(WEB_PACKAGE)} <= files, "templates, static files, modules"
    assert {"approvals_web/templates/base.html", "approvals_web/static/style.css"} <= files
    assert {f"approvals/_migrations/{f}" for f in _relative_files(ROOT / "migrations")} <= files
    assert "approvals/_migrations/env.py" in files
    assert {f"approvals/{f}" for f in _relative_files(ROOT / "approvals")} <= files
    assert re.search(r"^approvals = approvals\.__main__:main$", scripts, re.M), scripts

    assert metadata["Name"] == "agent-approvals"
    requirements = [Requirement(line) for line in metadata.get_all("Requires-Dist") or []]
    core = {r.name for r in requirements if r.marker is None}
    server = {r.name for r in requirements if r.marker and r.marker.evaluate({"extra": "server"})}
    assert core, "the core library has dependencies"
    assert not core & SERVER_DISTRIBUTIONS, f"the core requires {core & SERVER_DISTRIBUTIONS}"
    assert server == SERVER_DISTRIBUTIONS
    assert {"fastapi", "uvicorn", "jinja2", "typer"} <= server
    for requirement in requirements:
        if requirement.name in SERVER_DISTRIBUTIONS:
            assert requirement.marker is not None, requirement
            assert not requirement.marker.evaluate({"extra": ""}), requirement
    assert {"server", "openai", "anthropic", "pydantic-ai"} <= set(metadata.get_all("Provides-Extra") or [])


# What pip prints when it cannot reach the package index (as opposed to a broken wheel).
NETWORK_ERRORS = re.compile(
    r"NewConnectionError|Failed to establish a new connection|Temporary failure in name resolution|"
    r"Name or service not known|Network is unreachable|ConnectTimeoutError|ReadTimeoutError|ProxyError|"
    r"Connection refused|Max retries exceeded"
)


def _pypi_reachable() -> bool:
    try:
        socket.create_connection(("pypi.org", 443), timeout=5).close()
    except OSError:
        return False
    return True


@pytest.fixture(scope="module")
def core_only_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment with the wheel installed without extras (its core deps come from PyPI)."""
    venv = tmp_path_factory.mktemp("venv") / "core-only"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    pip: list[str | Path] = [venv / "bin" / "python", "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    install = subprocess.run(
        [*pip, "--retries", "2", str(wheel)],  # pip names a connection error only when it retries
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    if install.returncode != 0:
        output = install.stdout + install.stderr
        network = NETWORK_ERRORS.search(output)
        if network or not _pypi_reachable():
            why = network.group() if network else "pypi.org:443 does not answer"
            pytest.skip(f"PyPI is unreachable, so the wheel's dependencies cannot be installed ({why})")
        pytest.fail(f"pip install of the wheel failed:\n{output[-3000:]}")
    return venv


def _run_in(venv: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    # run outside the checkout, so `approvals` comes from the installed wheel and not from here
    return subprocess.run(list(args), capture_output=True, text=True, timeout=120, env=env, cwd=venv)


def test_the_core_library_works_from_the_wheel_without_extras(core_only_venv: Path, tmp_path: Path) -> None:
    python = core_only_venv / "bin" / "python"
    where = _run_in(
        core_only_venv,
        python,
        "-c",
        "import importlib.util, approvals; from approvals import Agent;"
        " print(approvals.__file__); print(importlib.util.find_spec('fastapi') is None)",
    )
    assert where.returncode == 0, where.stderr
    module_file, no_fastapi = where.stdout.splitlines()
    assert Path(module_file).is_relative_to(core_only_venv), "approvals must come from the installed wheel"
    assert no_fastapi == "True", "the core install must not bring the web stack"

    imported = _run_in(core_only_venv, python, "-c", IMPORT_THE_CORE)
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.split() == []

    # the wheel's own migrations create the tables
    url = f"sqlite:///{tmp_path / 'core.db'}"
    migrate = _run_in(
        core_only_venv,
        python,
        "-c",
        "import sys; from approvals.store.migrate import upgrade, current_revision, head_revision;"
        " upgrade(sys.argv[1]); assert current_revision(sys.argv[1]) == head_revision() is not None",
        url,
    )
    assert migrate.returncode == 0, migrate.stderr


@pytest.mark.parametrize("args", [(), ("serve", "--demo"), ("--help",)])
def test_the_command_without_the_server_extra_says_how_to_install_it(
    core_only_venv: Path, args: tuple[str, ...]
) -> None:
    for command in ([core_only_venv / "bin" / "approvals"], [core_only_venv / "bin" / "python", "-m", "approvals"]):
        result = _run_in(core_only_venv, *command, *args)
        assert result.returncode == 2, result.stderr
        assert result.stdout == ""
        [line] = result.stderr.splitlines()
        assert "pip install 'agent-approvals[server]'" in line
        assert "Traceback" not in result.stderr
