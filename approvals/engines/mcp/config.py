"""The gateway's upstream servers: an `{"mcpServers": {...}}` file, read and checked before anything starts.

The format is the one Claude Code, Cursor and Claude Desktop use: each server is a stdio
command (`command`, `args`, `env`, `cwd`) or a streamable-HTTP address (`url`, `headers`).
Everything is checked here, with the server and the field named, so a typo is one clear
line at start-up rather than a server that silently goes missing (FastMCP skips a server it
cannot connect to and carries on with the rest). Standard library only: the CLI reads the
file before it imports FastMCP.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

__all__ = ("ConfigError", "HttpServer", "StdioServer", "UpstreamServer", "load_config", "parse_config")

SERVER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
"""Server names become tool-name prefixes when there are several, so they keep to what tool names allow."""
_STDIO_FIELDS = {"command", "args", "env", "cwd", "type", "transport"}
_HTTP_FIELDS = {"url", "headers", "type", "transport"}
_IGNORED = {"disabled", "timeout", "description", "alwaysAllow", "autoApprove"}
"""Fields other clients write into the same file; they mean nothing to the gateway, so they are accepted."""


class ConfigError(ValueError):
    """The config file cannot be used; the message names the file, the server and the field."""


@dataclass(frozen=True)
class StdioServer:
    """An upstream the gateway starts as a process and talks to over its standard input and output."""

    name: str
    command: str
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None


@dataclass(frozen=True)
class HttpServer:
    """An upstream already running, reached over streamable HTTP."""

    name: str
    url: str
    headers: dict[str, str] = field(default_factory=dict)


UpstreamServer = StdioServer | HttpServer


def load_config(path: Path) -> list[UpstreamServer]:
    """The servers in the file at `path`, in the file's order; `ConfigError` saying what is wrong."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read the MCP config {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"the MCP config {path} is not UTF-8 text") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"the MCP config {path} is not JSON: {exc}") from None
    try:
        return parse_config(data)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def parse_config(data: Any) -> list[UpstreamServer]:
    """The servers in a parsed config (`{"mcpServers": {name: {...}}}`); `ConfigError` for the first fault."""
    if not isinstance(data, dict) or "mcpServers" not in data:
        raise ConfigError('expected a JSON object with "mcpServers": {"name": {"command": ...} or {"url": ...}}')
    servers = data["mcpServers"]
    if not isinstance(servers, dict):
        raise ConfigError('"mcpServers" must be an object of servers by name')
    if not servers:
        raise ConfigError('"mcpServers" names no server: the gateway would have no tools')
    return [_server(name, entry) for name, entry in servers.items()]


def _server(name: str, entry: Any) -> UpstreamServer:
    if not SERVER_NAME.match(name):
        raise ConfigError(
            f"server name {name!r}: use letters, digits, '_', '.' and '-' (up to 64), starting with a letter or digit"
        )
    if not isinstance(entry, dict):
        raise ConfigError(f'server {name!r}: expected an object with "command" or "url"')
    if "command" in entry and "url" in entry:
        raise ConfigError(f'server {name!r}: has both "command" and "url"; a server is one or the other')
    if "command" in entry:
        _known(name, entry, _STDIO_FIELDS)
        _transport(name, entry, ("stdio",))
        return StdioServer(
            name=name,
            command=_text(name, entry, "command"),
            args=tuple(_texts(name, entry.get("args", []))),
            env=_mapping(name, entry, "env"),
            cwd=_text(name, entry, "cwd") if "cwd" in entry else None,
        )
    if "url" in entry:
        _known(name, entry, _HTTP_FIELDS)
        _transport(name, entry, ("http", "streamable-http", "streamableHttp"))
        url = _text(name, entry, "url")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigError(f'server {name!r}: field "url" must be an http(s) address, not {url!r}')
        return HttpServer(name=name, url=url, headers=_mapping(name, entry, "headers"))
    raise ConfigError(f'server {name!r}: needs "command" (a program to start) or "url" (a streamable-HTTP server)')


def _known(name: str, entry: dict[str, Any], fields: set[str]) -> None:
    unknown = sorted(set(entry) - fields - _IGNORED)
    if unknown:
        raise ConfigError(f"server {name!r}: unknown field {unknown[0]!r}; known: {', '.join(sorted(fields))}")


def _transport(name: str, entry: dict[str, Any], allowed: tuple[str, ...]) -> None:
    for key in ("type", "transport"):
        if key in entry and entry[key] not in allowed:
            raise ConfigError(
                f"server {name!r}: field {key!r} is {entry[key]!r}; the gateway supports {', '.join(allowed)} here"
                " (SSE servers are not supported: use their streamable-HTTP address)"
            )


def _text(name: str, entry: dict[str, Any], key: str) -> str:
    value = entry[key]
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"server {name!r}: field {key!r} must be a non-empty string")
    return value


def _texts(name: str, value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ConfigError(f"server {name!r}: field 'args' must be a list of strings")
    return list(value)


def _mapping(name: str, entry: dict[str, Any], key: str) -> dict[str, str]:
    value = entry.get(key, {})
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ConfigError(f"server {name!r}: field {key!r} must be an object of strings")
    return dict(value)
