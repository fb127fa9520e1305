"""The README's "Claude Code, in five minutes" and the MCP gateway's solo setup, done as a newcomer does them.

A fresh folder, a fresh HOME (so a fresh per-user database), nothing of ours in the environment
but `approvals` on PATH. The commands are read from the README's own blocks (between
`claude-code-quickstart` and `mcp-gateway-token` markers) and run in a shell as written; only
the port differs (`--port` added to `approvals serve`, the README's `127.0.0.1:8000` changed to
it). `claude` is the real Claude Code CLI, on a scripted model that asks to run a command (or
the gateway's tool): the call waits, the reviewer the README created logs in to the inbox with
the password `users add` printed once, approves, and the command runs.

Needs the CLIs from tests/clis/install.sh (`APPROVALS_CLIS_DIR`); every test skips without them.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from ..mcp_gateway.harness import filesystem_server, filesystem_upstream
from ..processes import free_port
from .claude_code import ClaudeRun, claude_binary, run_claude
from .scripted_anthropic import ScriptedAnthropic, bash, text, tool_use

README = Path(__file__).resolve().parents[2] / "README.md"
VENV_BIN = Path(sys.executable).parent
README_ADDRESS = "127.0.0.1:8000"


def readme_block(marker: str, section: str | None = None) -> list[str]:
    """The commands of the README's shell block between `<!-- marker:start -->` and its end, comments dropped."""
    text_ = README.read_text()
    if section is not None:
        text_ = text_.split(section, 1)[1]
    found = re.search(rf"<!-- {marker}:start -->\s*```sh\n(.*?)```\s*<!-- {marker}:end -->", text_, re.DOTALL)
    assert found is not None, f"the README lost its {marker} markers"
    lines = [re.sub(r"\s+#.*$", "", line).strip() for line in found.group(1).splitlines()]
    return [line for line in lines if line]


def readme_json_blocks(section: str) -> list[Any]:
    part = README.read_text().split(section, 1)[1].split("\n## ", 1)[0]
    return [json.loads(block) for block in re.findall(r"```json\n(.*?)```", part, re.DOTALL)]


@dataclass
class Newcomer:
    """A user on a fresh machine: an empty HOME, a shell whose exported variables carry from line to line."""

    root: Path
    port: int = field(default_factory=free_port)
    server: subprocess.Popen[bytes] | None = None

    def __post_init__(self) -> None:
        self.home = self.root / "home"
        self.home.mkdir(parents=True)
        self.cwd = self.root / "terminal"
        self.cwd.mkdir()
        self.env = {
            "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "HOME": str(self.home),
            "LANG": os.environ.get("LANG", "C.UTF-8"),
            "TMPDIR": os.environ.get("TMPDIR", "/tmp"),
        }
        self.log = self.root / "serve.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def as_here(self, line: str) -> str:
        return line.replace(README_ADDRESS, f"127.0.0.1:{self.port}")

    def run(self, line: str) -> str:
        """One README line: `approvals serve` starts in the background, `cd` moves, anything else runs in bash."""
        if line.startswith("approvals serve"):
            self.serve(line)
            return ""
        if line.startswith("cd "):
            [folder] = shlex.split(line)[1:]
            self.cwd = Path(folder.replace("~", str(self.home), 1))
            self.cwd.mkdir(parents=True, exist_ok=True)  # the newcomer's project is there already
            return ""
        exported = self.root / "env"
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", f'{self.as_here(line)}\nenv -0 > "{exported}"'],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"
        self.env = dict(entry.split("=", 1) for entry in exported.read_text().split("\0") if "=" in entry)
        return done.stdout

    def serve(self, line: str) -> None:
        with self.log.open("wb") as log:
            self.server = subprocess.Popen(
                ["bash", "-c", f"exec {line} --port {self.port}"],
                cwd=self.cwd,
                env={**self.env, "PYTHONUNBUFFERED": "1"},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + 60
        while "approvals: serving" not in self.log.read_text():
            assert self.server.poll() is None, self.log.read_text()
            assert time.monotonic() < deadline, self.log.read_text()
            time.sleep(0.2)
        while True:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, self.log.read_text()
            time.sleep(0.2)

    def stop(self) -> None:
        if self.server is not None and self.server.poll() is None:
            os.killpg(self.server.pid, signal.SIGTERM)
            try:
                self.server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.server.pid, signal.SIGKILL)


@pytest.fixture
def newcomer(tmp_path: Path) -> Iterator[Newcomer]:
    claude_binary()  # skip before starting anything when the CLI is not installed
    person = Newcomer(tmp_path)
    try:
        yield person
    finally:
        person.stop()


def password_printed(output: str) -> tuple[str, str]:
    """The name and password `approvals users add` printed (once)."""
    found = re.fullmatch(r"added (\S+) \(admin\); password: (\S+)\n", output)
    assert found is not None, output
    return found.group(1), found.group(2)


@contextmanager
def logged_in(url: str, username: str, password: str) -> Iterator[httpx.Client]:
    """The inbox as the reviewer sees it, logged in with the form; API calls carry the page's CSRF token."""
    with httpx.Client(base_url=url, timeout=30) as client:
        yield _log_in(client, username, password)


def _log_in(client: httpx.Client, username: str, password: str) -> httpx.Client:
    form = re.search(r'name="csrf_token" value="([^"]+)"', client.get("/login").text)
    assert form is not None
    answer = client.post("/login", data={"username": username, "password": password, "csrf_token": form.group(1)})
    assert answer.status_code == 303, answer.text
    page = re.search(r'"x-csrftoken": "([^"]+)"', client.get("/").text)
    assert page is not None
    client.headers["x-csrftoken"] = page.group(1)
    return client


def approve_the_waiting_call(reviewer: httpx.Client, running: Future[ClaudeRun]) -> dict[str, Any]:
    deadline = time.monotonic() + 90
    while not (pending := reviewer.get("/api/calls", params={"status": "pending"}).json()["items"]):
        if running.done():
            pytest.fail(f"Claude Code ended without a waiting call:\n{running.result().describe()}")
        assert time.monotonic() < deadline, "no call waited in the inbox"
        time.sleep(0.2)
    [call] = pending
    decided = reviewer.post(f"/api/calls/{call['id']}/decision", json={"verdict": "approve"})
    assert decided.status_code == 200, decided.text
    return dict(call)


def finished(running: Future[ClaudeRun]) -> ClaudeRun:
    run = running.result(timeout=150)
    assert run.returncode == 0, run.describe()
    return run


def test_claude_code_in_five_minutes_as_the_readme_says(
    newcomer: Newcomer, background: Callable[..., Future[ClaudeRun]]
) -> None:
    lines = readme_block("claude-code-quickstart")
    assert lines[0] == "approvals serve" and lines[-1] == "claude", lines
    outputs = {line: newcomer.run(line) for line in lines[:-1]}

    database = newcomer.home / ".local" / "share" / "approvals" / "approvals.db"
    served = newcomer.log.read_text()
    assert f"Database: sqlite:///{database}" in served
    assert "approvals users add <you> --role admin" in served  # a fresh database: how to get in
    [added] = [out for line, out in outputs.items() if line.startswith("approvals users add")]
    username, password = password_printed(added)
    assert newcomer.env["APPROVALS_TOKEN"].startswith("apv_")
    project = newcomer.cwd
    assert (project / ".claude" / "settings.json").is_file()
    assert [path for path in newcomer.root.rglob("*.db") if path != database] == []

    marker = project / "approved-by-the-newcomer"
    with ScriptedAnthropic([bash(f"touch {marker}", "Create a file"), text("All done.")]) as api:
        running = background(
            run_claude,
            claude_binary(),
            project,
            "Create the file.",
            base_url=api.base_url,
            env={"APPROVALS_TOKEN": newcomer.env["APPROVALS_TOKEN"]},
            home=newcomer.home,
            timeout=150,
        )
        with logged_in(newcomer.url, username, password) as reviewer:
            call = approve_the_waiting_call(reviewer, running)
            assert not marker.exists()
            run = finished(running)
            stored = reviewer.get(f"/api/calls/{call['id']}").json()

    assert marker.exists(), run.describe()
    assert run.result["result"] == "All done."
    assert (call["tool"], call["args"]["command"]) == ("Bash", f"touch {marker}")
    assert stored["decided_by"] == username
    assert stored["status"] == "succeeded"  # its PostToolUse hook reported the command ran


def test_the_mcp_gateway_alone_as_the_readme_says(
    newcomer: Newcomer, background: Callable[..., Future[ClaudeRun]]
) -> None:
    filesystem_server()  # skip when the upstream is not installed
    quick_start = readme_block("claude-code-quickstart")
    serve, add_yourself = quick_start[0], next(line for line in quick_start if line.startswith("approvals users add"))
    newcomer.run(serve)  # steps 1 and 2 of "Claude Code, in five minutes"
    username, password = password_printed(newcomer.run(add_yourself))
    [make_token] = readme_block("mcp-gateway-token", "## MCP gateway")
    assert "--user" not in make_token
    token = newcomer.run(make_token).strip()
    assert token.startswith("apv_")

    project = newcomer.home / "my-project"
    upstreams = newcomer.home / "upstreams.json"
    upstreams.write_text(json.dumps(filesystem_upstream(project)))
    _, claude_config = readme_json_blocks("## MCP gateway")
    [(name, gateway)] = claude_config["mcpServers"].items()
    args = gateway["args"]
    args[args.index("--config") + 1] = str(upstreams)
    gateway["env"] = {"APPROVALS_URL": newcomer.url, "APPROVALS_TOKEN": token}
    config = newcomer.root / "gateway.json"
    config.write_text(json.dumps(claude_config))
    allowed = re.search(r"--allowedTools\s+(mcp__\w+)", README.read_text().split("## MCP gateway", 1)[1])
    assert allowed is not None and allowed.group(1) == f"mcp__{name}"

    target = project / "approved.txt"
    write = tool_use(f"mcp__{name}__write_file", {"path": str(target), "content": "written after approval"})
    with ScriptedAnthropic([write, text("Written.")]) as api:
        running = background(
            run_claude,
            claude_binary(),
            project,
            "Write the file.",
            base_url=api.base_url,
            args=[
                *("--output-format", "json", "--mcp-config", str(config), "--strict-mcp-config"),
                "--allowedTools",
                allowed.group(1),
            ],
            env={"PATH": newcomer.env["PATH"]},  # the README's "command": "approvals"
            home=newcomer.home,
            timeout=150,
        )
        with logged_in(newcomer.url, username, password) as reviewer:
            call = approve_the_waiting_call(reviewer, running)  # 403 if the gateway's token were the person's
            run = finished(running)
            deadline = time.monotonic() + 30
            while (stored := reviewer.get(f"/api/calls/{call['id']}").json())["status"] != "succeeded":
                assert time.monotonic() < deadline, stored
                time.sleep(0.2)

    assert target.read_text() == "written after approval", run.describe()
    assert run.result["result"] == "Written."
    assert stored["decided_by"] == username
