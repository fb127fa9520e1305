"""Clickjacking, tried as an attacker would: a page on another port of the same host frames a call page.

Browsers treat another port of the same host as the same site, so the reviewer's session
cookie (SameSite=Lax) goes along with the framed request. Before the app forbade framing,
an invisible frame over a harmless-looking button approved a refund with one click.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from playwright.sync_api import Page

from ..eventually import eventually
from ..live_server import LiveServer
from .agents import PROMPT


@pytest.fixture
def attacker_site() -> Iterator[tuple[str, dict[str, str]]]:
    """A server on another port that serves whatever page the test puts in `pages`."""
    pages: dict[str, str] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = pages.get(self.path, "not found").encode()
            self.send_response(200 if self.path in pages else 404)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            """Quiet."""

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", pages
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_page_elsewhere_cannot_frame_a_call_and_click_approve(
    server: LiveServer, page: Page, attacker_site: tuple[str, dict[str, str]]
) -> None:
    site, pages = attacker_site
    run_id = server.start_run("support", PROMPT)
    server.call(_until_paused(server, run_id))
    refund = next(c for c in server.call(server.store.calls.run_calls(run_id)) if c.tool_name == "refund")
    server.login(page, "alice")  # the reviewer is logged in, in this browser

    pages["/prize"] = f"""<!doctype html><title>Win a prize</title>
        <button style="position:absolute;top:20px;left:20px">Claim your prize</button>
        <iframe id="victim" src="{server.url}/calls/{refund.id}" width="1200" height="800"
                style="position:absolute;top:0;left:0;opacity:0.01"></iframe>"""
    page.goto(site + "/prize")
    page.wait_for_timeout(1500)  # time for the frame to load, if the app let it

    framed = page.frame_locator("#victim").locator("button.approve").first
    if framed.count():  # the app was framed: do what the tricked reviewer's click would do
        framed.click(force=True, timeout=5000)
        page.wait_for_timeout(1500)
    frame = next(f for f in page.frames if f.parent_frame is not None)
    assert not frame.url.startswith(server.url) or framed.count() == 0, "the call page rendered inside the frame"
    status = server.call(server.store.calls.get_call(refund.id)).status
    assert status == "pending", f"a click in a frame on another site decided the call: {status}"


async def _until_paused(server: LiveServer, run_id: str) -> None:
    async def paused() -> bool:
        return (await server.store.runs.get_run(run_id)).status == "awaiting_approval"

    await eventually(paused, f"run {run_id} to pause", seconds=30, interval=0.05)
