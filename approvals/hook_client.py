"""`approvals hook <cli>`: a coding CLI's command hook that asks our server and fails closed.

The CLI runs it before a tool call with the hook's JSON on standard input. It sends that
to `POST {APPROVALS_URL}/api/hooks/{cli}` with the token in `APPROVALS_TOKEN`, checks that the
answer is one the CLI understands, and prints it. Anything else (the server down or
restarting past the deadline, a timeout, an error status, an answer the CLI would not
understand) blocks the tool: exit code 2 with the reason on standard error, which Claude
Code, Codex and Gemini CLI read as "do not run it" and Cursor does with `failClosed`. A
retry after a restart asks about the same call (the hook's tool call id is its key).

Standard library only, and nothing of the rest of the package: a hook runs before every
tool call, so it must start fast.
"""

from __future__ import annotations

import functools
import http.client
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ("BLOCK", "HookFailed", "accepts", "ask_server", "main", "usage")

BLOCK = 2
"""The exit code that blocks the tool in every CLI we hook."""
DEFAULT_URL = "http://127.0.0.1:8000"
DEFAULT_WAIT = 55.0
MAX_INPUT_BYTES = 1024 * 1024
_RETRY_EVERY = 1.0
RESTART_GRACE = 10.0
"""Seconds the hook keeps asking a server it cannot reach: from its start when it never reached the server
(down from the start), beyond the wait once it did (a restart while it waits)."""


class HookFailed(Exception):
    """Why the hook could not get a decision; the tool is blocked with this message."""


def _permission(value: Any, allowed: Sequence[str]) -> bool:
    return isinstance(value, str) and value in allowed


def _text_or_absent(output: Mapping[str, Any], name: str) -> bool:
    return name not in output or isinstance(output[name], str)


def _claude_code(output: Mapping[str, Any]) -> bool:
    specific = output.get("hookSpecificOutput")
    if set(output) != {"hookSpecificOutput"} or not isinstance(specific, dict):
        return False
    known = {"hookEventName", "permissionDecision", "permissionDecisionReason", "updatedInput"}
    return (
        set(specific) <= known
        and specific.get("hookEventName") == "PreToolUse"
        and _permission(specific.get("permissionDecision"), ("allow", "deny", "ask", "defer"))
        and _text_or_absent(specific, "permissionDecisionReason")
        and isinstance(specific.get("updatedInput", {}), dict)
    )


def _codex(output: Mapping[str, Any]) -> bool:
    if output == {}:
        return True
    specific = output.get("hookSpecificOutput")
    return (
        set(output) == {"hookSpecificOutput"}
        and isinstance(specific, dict)
        and set(specific) == {"hookEventName", "permissionDecision", "permissionDecisionReason"}
        and specific["hookEventName"] == "PreToolUse"
        and specific["permissionDecision"] == "deny"
        and isinstance(specific["permissionDecisionReason"], str)
    )


def _gemini(output: Mapping[str, Any]) -> bool:
    return output == {} or (
        set(output) == {"decision", "reason"} and output["decision"] == "deny" and isinstance(output["reason"], str)
    )


def _cursor(output: Mapping[str, Any]) -> bool:
    return (
        set(output) <= {"permission", "user_message", "agent_message", "updated_input"}
        and _permission(output.get("permission"), ("allow", "deny", "ask"))
        and _text_or_absent(output, "user_message")
        and _text_or_absent(output, "agent_message")
        and isinstance(output.get("updated_input", {}), dict)
    )


_ACCEPTS: dict[str, Callable[[Mapping[str, Any]], bool]] = {
    "claude-code": _claude_code,
    "codex": _codex,
    "gemini": _gemini,
    "cursor": _cursor,
}
CLIS = tuple(_ACCEPTS)


AFTER_TOOL_EVENTS = frozenset({"PostToolUse", "AfterTool", "postToolUse", "afterShellExecution", "afterMCPExecution"})
"""Hook events that report a tool that already ran: their answer is empty."""


def accepts(cli: str, output: Any, event: str | None = None) -> bool:
    """Whether `output` is an answer `cli` reads as we mean it (a CLI that cannot read an answer runs the tool)."""
    if event in AFTER_TOOL_EVENTS:
        return isinstance(output, dict) and not output
    return isinstance(output, dict) and _ACCEPTS[cli](output)


class _Reach:
    """Whether a connection to the server was ever made, and how long the next one may take to connect."""

    def __init__(self) -> None:
        self.reached = False
        self.connect_timeout: float | None = None


class _Connection(http.client.HTTPConnection):
    """A connection that connects within `reach.connect_timeout` (what is left of the grace while the server was
    never reached), then reads with the request's own timeout (a long poll), and records that it connected."""

    def __init__(self, *args: Any, reach: _Reach, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reach = reach

    def connect(self) -> None:
        read_timeout = self.timeout
        if self.reach.connect_timeout is not None:
            self.timeout = self.reach.connect_timeout
        try:
            super().connect()
        finally:
            self.timeout = read_timeout
        self.reach.reached = True
        if self.sock is not None:
            self.sock.settimeout(read_timeout)


class _TLSConnection(http.client.HTTPSConnection, _Connection):
    """The same over TLS: `HTTPSConnection.connect` wraps the socket `_Connection.connect` opened."""


class _Handler(urllib.request.HTTPHandler, urllib.request.HTTPSHandler):
    """urllib's HTTP and HTTPS handling (proxy settings included), through `_Connection`s."""

    def __init__(self, reach: _Reach) -> None:
        urllib.request.HTTPHandler.__init__(self)
        urllib.request.HTTPSHandler.__init__(self)
        self.reach = reach

    def do_open(self, http_class: Any, req: Any, **kwargs: Any) -> Any:
        kind = _TLSConnection if issubclass(http_class, http.client.HTTPSConnection) else _Connection
        return super().do_open(functools.partial(kind, reach=self.reach), req, **kwargs)


def ask_server(
    cli: str,
    hook_input: bytes,
    *,
    url: str,
    token: str,
    wait: float,
    fallback: str | None = None,
    grace: float = RESTART_GRACE,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
    """Our server's answer to this hook input, checked; `HookFailed` when there is none to trust.

    Connection failures and 5xx answers are tried again. While no connection to the server
    was ever made (it is down, or the URL is wrong), for `grace` seconds from the start; once
    one was, for `wait` + `grace` seconds in all, so a server that restarts while the hook
    waits is asked again, about the same call.
    """
    query = {"wait": f"{wait:g}"} | ({"fallback": fallback} if fallback else {})
    endpoint = f"{url.rstrip('/')}/api/hooks/{urllib.parse.quote(cli)}?{urllib.parse.urlencode(query)}"
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise HookFailed(f"APPROVALS_URL must be an http(s) URL, not {url!r}")
    reach = _Reach()
    opener = urllib.request.build_opener(_Handler(reach))
    started = clock()
    last_problem = "no answer"
    while True:
        now = clock()
        deadline = started + grace + (wait if reach.reached else 0.0)
        remaining = deadline - now
        if remaining <= 0:
            if not reach.reached:
                raise HookFailed(f"approvals could not be reached within {grace:g} s ({last_problem})")
            raise HookFailed(f"approvals gave no decision in time ({last_problem})")
        # a connection once made may wait up to the whole wait + grace; making one, only what is left of the grace
        reach.connect_timeout = remaining
        request = urllib.request.Request(  # noqa: S310 (the scheme is checked above)
            endpoint,
            data=hook_input,
            method="POST",
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        try:
            with opener.open(request, timeout=started + wait + grace - now) as response:
                body = response.read(MAX_INPUT_BYTES + 1)
        except urllib.error.HTTPError as exc:
            if exc.code < 500:
                raise HookFailed(f"approvals refused the hook request (HTTP {exc.code})") from None
            last_problem = f"HTTP {exc.code}"
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
            last_problem = f"cannot reach {url}: {getattr(exc, 'reason', None) or exc}"
        else:
            try:
                output = json.loads(body)
            except ValueError:
                raise HookFailed("approvals answered something that is not JSON") from None
            if not accepts(cli, output, _event(hook_input)):
                raise HookFailed(f"approvals answered in a shape {cli} would not read as meant")
            return dict(output)
        deadline = started + grace + (wait if reach.reached else 0.0)
        sleep(min(_RETRY_EVERY, max(deadline - clock(), 0)))


def main(argv: Sequence[str], *, stdin: Any = None, stdout: Any = None, stderr: Any = None) -> int:
    """`approvals hook <cli> [--wait S] [--grace S] [--fallback F] [--url U]`: the exit code (0, or `BLOCK`).

    `--wait`: how long the server waits for a person before its fallback; `--grace`: how much
    longer to keep asking a server that cannot be reached (a restart, say) before blocking.
    `-h`/`--help` prints `usage()` and returns 0, reading and asking nothing.
    """
    stdin = stdin or sys.stdin.buffer
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    try:
        cli, options = _parse(argv)
        token = os.environ.get("APPROVALS_TOKEN", "").strip()
        if not token:
            raise HookFailed("APPROVALS_TOKEN is not set: the hook cannot ask approvals")
        hook_input = stdin.read(MAX_INPUT_BYTES + 1)
        if len(hook_input) > MAX_INPUT_BYTES:
            raise HookFailed(f"the hook input is larger than {MAX_INPUT_BYTES} bytes")
        output = ask_server(
            cli,
            hook_input,
            url=options.get("url") or os.environ.get("APPROVALS_URL") or DEFAULT_URL,
            token=token,
            wait=float(options.get("wait", DEFAULT_WAIT)),
            fallback=options.get("fallback"),
            grace=float(options.get("grace", RESTART_GRACE)),
        )
    except _HelpWanted as wanted:  # before anything is read or asked
        stdout.write(usage(wanted.cli))
        stdout.flush()
        return 0
    except (HookFailed, ValueError) as exc:
        stderr.write(f"Blocked by approvals: {exc}\n")
        stderr.flush()
        return BLOCK
    stdout.write(json.dumps(output) + "\n")
    stdout.flush()
    return 0


HELP_FLAGS = ("-h", "--help")
_FALLBACKS = {
    "claude-code": "deny (the default), ask or defer",
    "codex": "deny",
    "gemini": "deny",
    "cursor": "ask (the default) or deny",
}
"""What each CLI's hook may fall back to, as `approvals.engines.gate.hooks.FORMATS` says (a test checks)."""


class _HelpWanted(Exception):
    """`-h`/`--help` among the arguments: the usage is printed instead of asking anything."""

    def __init__(self, cli: str | None) -> None:
        super().__init__(cli)
        self.cli = cli


def _usage_line(cli: str | None) -> str:
    return (
        f"usage: approvals hook {cli or '{' + ','.join(CLIS) + '}'} [--wait S] [--grace S] [--fallback F] [--url URL]"
    )


def usage(cli: str | None = None) -> str:
    """The help of `approvals hook [<cli>] --help`: the options and the environment variables the hook reads."""
    fallbacks = "".join(f"\n                   {name}: {_FALLBACKS[name]}" for name in ([cli] if cli else CLIS))
    return f"""{_usage_line(cli)}

The pre-tool hook of {cli or "a coding CLI"}: it reads the hook's JSON on standard input, asks the
approvals server and prints the answer the CLI reads. Without an answer to trust (the server
down past the grace, no decision in time, an error) it blocks the tool: exit code 2, the
reason on standard error.

options:
  --wait S       seconds the server waits for a person before the fallback (default {DEFAULT_WAIT:g})
  --grace S      seconds to keep asking a server that cannot be reached: from the start while
                 it never was, beyond the wait once it was (a restart) (default {RESTART_GRACE:g})
  --fallback F   the answer when nobody decided in time:{fallbacks}
  --url URL      the approvals server (default: APPROVALS_URL, else {DEFAULT_URL})
  -h, --help     show this help and exit

environment:
  APPROVALS_URL    the approvals server, when there is no --url
  APPROVALS_TOKEN  an API token with the calls:ask scope (required)

`approvals hook install {cli or "<cli>"}` adds this hook to the CLI's settings (see its --help).
"""


def _parse(argv: Sequence[str]) -> tuple[str, dict[str, str]]:
    if argv and argv[0] in HELP_FLAGS:
        raise _HelpWanted(None)
    if not argv or argv[0] not in _ACCEPTS:
        raise HookFailed(_usage_line(None))
    options: dict[str, str] = {}
    rest = list(argv[1:])
    while rest:
        flag = rest.pop(0)
        if flag in HELP_FLAGS:
            raise _HelpWanted(argv[0])
        name, _, value = flag.partition("=")
        if name not in ("--wait", "--fallback", "--url", "--grace"):
            raise HookFailed(f"unknown option {flag!r}")
        if not value:
            if not rest:
                raise HookFailed(f"{name} needs a value")
            value = rest.pop(0)
        options[name[2:]] = value
    for seconds in ("wait", "grace"):
        if seconds in options and not float(options[seconds]) >= 0:
            raise HookFailed(f"--{seconds} takes seconds, 0 or more")
    return argv[0], options


def _event(hook_input: bytes) -> str | None:
    """The hook event the input is for, if it says."""
    try:
        parsed = json.loads(hook_input)
    except ValueError:
        return None
    event = parsed.get("hook_event_name") if isinstance(parsed, dict) else None
    return event if isinstance(event, str) else None
