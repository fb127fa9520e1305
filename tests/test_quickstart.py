"""The README's quick start, done as a newcomer would: clone, `make run`, review in the app.

Clones the repository into a temporary folder, starts `make run` there (it installs
everything, migrates a SQLite file, seeds the demo and serves the app), logs in, finds
the demo's pending calls in the inbox, approves one through the API and sees its run
complete.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from .processes import free_port

ROOT = Path(__file__).resolve().parents[1]
PASSWORD = "quickstart-password-1"
STARTUP_SECONDS = 600  # a fresh clone installs its virtual environment first


@pytest.fixture
def served_clone(tmp_path: Path) -> Iterator[str]:
    clone = tmp_path / "approvals"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True, timeout=120)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("APPROVALS_", "VIRTUAL_ENV", "UV_PROJECT"))}
    env["APPROVALS_ADMIN_PASSWORD"] = PASSWORD
    log = (tmp_path / "make-run.log").open("w")
    process = subprocess.Popen(
        ["make", "run", f"PORT={port}"],
        cwd=clone,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        while True:
            if process.poll() is not None:
                pytest.fail(
                    f"make run exited with {process.returncode}:\n{(tmp_path / 'make-run.log').read_text()[-3000:]}"
                )
            try:
                if httpx.get(f"{base_url}/login", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"make run did not serve within {STARTUP_SECONDS}s")
            time.sleep(1)
        yield base_url
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
        log.close()


def test_quick_start_from_a_fresh_clone(served_clone: str) -> None:
    with httpx.Client(base_url=served_clone, timeout=30) as client:
        login_page = client.get("/login")
        token = re.search(r'name="csrf_token" value="([^"]+)"', login_page.text)
        assert token is not None
        response = client.post("/login", data={"username": "alice", "password": PASSWORD, "csrf_token": token.group(1)})
        assert response.status_code == 303

        # the demo's runs are queued at start-up and paused by the in-process worker moments later
        deadline = time.monotonic() + 60
        while not ("send_email" in (inbox := client.get("/")).text and "delete_customer" in inbox.text):
            assert inbox.status_code == 200
            assert time.monotonic() < deadline, "the demo's calls never reached the inbox"
            time.sleep(0.5)
        csrf = re.search(r'"x-csrftoken": "([^"]+)"', inbox.text)
        assert csrf is not None

        pending = client.get("/api/calls", params={"status": "pending", "tool": "send_email"}).json()["items"]
        assert pending, "the demo seeded no email waiting for approval"
        # an email whose run waits for nothing else, so approving it lets the run finish
        call = next(
            c
            for c in pending
            if [o["status"] for o in client.get(f"/api/runs/{c['run_id']}/calls").json()["items"]] == ["pending"]
        )
        decision = client.post(
            f"/api/calls/{call['id']}/decision", json={"verdict": "approve"}, headers={"x-csrftoken": csrf.group(1)}
        )
        assert decision.status_code == 200, decision.text

        deadline = time.monotonic() + 60
        while (run := client.get(f"/api/runs/{call['run_id']}").json())["status"] != "completed":
            assert run["status"] in ("ready", "resuming", "awaiting_approval"), run
            assert time.monotonic() < deadline, run
            time.sleep(0.5)
        assert "send_email: Email to" in run["output"]
