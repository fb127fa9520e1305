"""Memory of `approvals serve` under a burst of simultaneous logins (issue 17).

Each password check is argon2id with 64 MiB of memory. Checks run in a few worker threads
at a time, so a burst of logins queues rather than holding 64 MiB each at once. This
starts `approvals serve` on SQLite, makes 16 accounts, logs all of them in at the same
moment over real HTTP, and prints the server's peak resident memory (VmHWM) before and
after the burst, and how long the burst took.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
import httpx

ROOT = Path(__file__).resolve().parent.parent
APPROVALS = str(Path(sys.executable).with_name("approvals"))
LOGINS = 16
PASSWORD = "correct horse battery staple"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def peak_rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"VmHWM:\s+(\d+) kB", status)
    assert match is not None
    return int(match.group(1)) / 1024


async def log_in(base: str, username: str) -> int:
    async with httpx.AsyncClient(base_url=base, timeout=60) as client:
        page = await client.get("/login")
        token = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
        assert token is not None, "the login page carries a CSRF token"
        answer = await client.post(
            "/login", data={"username": username, "password": PASSWORD, "csrf_token": token.group(1)}
        )
        return answer.status_code


async def burst(base: str) -> list[int]:
    codes: list[int] = []

    async def one(index: int) -> None:
        codes.append(await log_in(base, f"user{index}"))

    async with anyio.create_task_group() as group:
        for index in range(LOGINS):
            group.start_soon(one, index)
    return codes


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/logins.db"
        env = {**os.environ, "APPROVALS_DATABASE_URL": url, "APPROVALS_SECRET_KEY": "bench-" + "x" * 40}
        subprocess.run([APPROVALS, "db", "upgrade"], env=env, check=True, capture_output=True)
        for index in range(LOGINS):
            subprocess.run(
                [APPROVALS, "users", "add", f"user{index}", "--role", "viewer", "--password", PASSWORD],
                env=env,
                check=True,
                capture_output=True,
            )
        port = free_port()
        server = subprocess.Popen(
            [APPROVALS, "serve", "--host", "127.0.0.1", "--port", str(port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            for _ in range(100):
                try:
                    if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.1)
            before = peak_rss_mib(server.pid)
            start = time.perf_counter()
            codes = anyio.run(burst, base)
            seconds = time.perf_counter() - start
            after = peak_rss_mib(server.pid)
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=30)
        logged_in = sum(1 for code in codes if code in (200, 303))
        print(
            f"{LOGINS} simultaneous logins: {logged_in} logged in in {seconds:.2f} s; "
            f"serve peak RSS {before:.0f} MiB before, {after:.0f} MiB after (+{after - before:.0f} MiB)"
        )


if __name__ == "__main__":
    main()
