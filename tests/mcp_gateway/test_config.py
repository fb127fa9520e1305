"""The gateway's config file: what it accepts, and a clear error naming the server and field for what it does not."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from approvals.engines.mcp.config import ConfigError, HttpServer, StdioServer, load_config, parse_config


def test_stdio_and_http_servers_are_read_in_the_files_order(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    config = {
        "mcpServers": {
            "git": {"command": "mcp-server-git", "args": ["--repository", "."], "env": {"A": "1"}, "cwd": "/tmp"},
            "remote": {"url": "https://tools.example.com/mcp", "headers": {"X-Key": "k"}, "type": "http"},
        }
    }
    path.write_text(json.dumps(config))
    assert load_config(path) == [
        StdioServer("git", "mcp-server-git", ("--repository", "."), {"A": "1"}, "/tmp"),
        HttpServer("remote", "https://tools.example.com/mcp", {"X-Key": "k"}),
    ]


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ([], "mcpServers"),
        ({"mcpServers": {}}, "names no server"),
        ({"mcpServers": []}, "must be an object"),
        ({"mcpServers": {"git": "mcp-server-git"}}, "server 'git': expected an object"),
        ({"mcpServers": {"git": {}}}, "server 'git': needs \"command\""),
        ({"mcpServers": {"git": {"command": ""}}}, "server 'git': field 'command' must be a non-empty string"),
        ({"mcpServers": {"git": {"command": "x", "args": "--repo"}}}, "server 'git': field 'args' must be a list"),
        ({"mcpServers": {"git": {"command": "x", "env": {"A": 1}}}}, "server 'git': field 'env' must be an object"),
        ({"mcpServers": {"git": {"command": "x", "argv": []}}}, "server 'git': unknown field 'argv'"),
        ({"mcpServers": {"w": {"url": "ftp://x"}}}, "server 'w': field \"url\" must be an http(s) address"),
        ({"mcpServers": {"w": {"url": "http://x", "transport": "sse"}}}, "SSE servers are not supported"),
        ({"mcpServers": {"w": {"url": "http://x", "command": "y"}}}, "both"),
        ({"mcpServers": {"bad name": {"command": "x"}}}, "server name 'bad name'"),
    ],
)
def test_a_bad_config_is_a_clear_error(config: Any, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config(config)
    assert message in str(raised.value)


def test_a_file_that_is_missing_or_not_json_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cannot read the MCP config .*missing\.json"):
        load_config(tmp_path / "missing.json")
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    with pytest.raises(ConfigError, match=r"broken\.json is not JSON"):
        load_config(broken)
    wrong = tmp_path / "wrong.json"
    wrong.write_text('{"mcpServers": {"git": {"command": 3}}}')
    with pytest.raises(ConfigError, match=r"wrong\.json: server 'git': field 'command'"):
        load_config(wrong)


def test_the_command_says_what_is_wrong_in_one_line_and_starts_nothing(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    path.write_text('{"mcpServers": {"git": {"url": "nowhere"}}}')
    ran = subprocess.run(
        [sys.executable, "-m", "approvals", "mcp", "--config", str(path), "--token", "t"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 1 and ran.stdout == ""
    assert "server 'git': field \"url\" must be an http(s) address" in ran.stderr
    assert "Traceback" not in ran.stderr
