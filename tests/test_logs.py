"""Log lines: JSON with the run, call and trace ids an operator follows a run by; and never a secret.

The ids test runs a real agent to a pause, a decision and a resume with a worker in-process, on
SQLite and PostgreSQL. The secrets test runs the web app with every channel on (a webhook
receiver, the fake Slack, a real SMTP server asking for a login) and every logger at DEBUG, and
drives each flow that handles a secret.
"""

from __future__ import annotations

import io
import json
import logging
import re
import secrets
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword
from opentelemetry.sdk.trace import TracerProvider

from approvals.calls.verdicts import Approve
from approvals.channels.slack_blocks import ACTION_APPROVE
from approvals.service import ApprovalService
from approvals.store import SYSTEM, Actor, Store
from approvals.worker.resumer import AgentRegistry, Resumer
from approvals_web.app import create_app
from approvals_web.logging_setup import JSON_FIELDS, configure_logging
from approvals_web.settings import Settings

from .eventually import eventually
from .fixtures.fake_slack import FakeSlack, running_fake_slack
from .fixtures.smtp_server import SmtpServer, _Handler
from .store.agents import email_agent
from .store.conftest import db_url, postgres_url, sqlite_template, store  # noqa: F401 - the store tests' fixtures
from .web.conftest import PASSWORDS, ROLES, WebApp

pytestmark = pytest.mark.anyio

SERVICE = Actor("svc", "reviewer")
HEX = {"trace_id": re.compile(r"[0-9a-f]{32}"), "span_id": re.compile(r"[0-9a-f]{16}")}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@contextmanager
def captured(log_format: str, *, level: int = logging.INFO) -> Iterator[io.StringIO]:
    """Every line the process logs while inside, in `log_format`, through the app's own setup."""
    stream = io.StringIO()
    levels = {name: logging.getLogger(name).level for name in [None, *logging.root.manager.loggerDict]}
    handler = configure_logging("json" if log_format == "json" else "text", stream=stream, level=level)
    if level == logging.DEBUG:
        for name in levels:
            logging.getLogger(name).setLevel(logging.DEBUG)
    try:
        yield stream
    finally:
        logging.getLogger().removeHandler(handler)
        for name, old in levels.items():
            logging.getLogger(name).setLevel(old)


def json_lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


async def test_json_lines_carry_the_run_call_and_trace_ids(store: Store, tmp_path: Path) -> None:  # noqa: F811
    registry = AgentRegistry([email_agent])
    service = ApprovalService(store, registry)
    tracer = TracerProvider().get_tracer("test")  # an SDK provider's spans, never installed globally
    with captured("json") as stream:
        logging.getLogger("approvals.test").info("before any run")
        run_id = await store.runs.start_run("mailer", "go", actor=SERVICE, deps={"log": str(tmp_path / "log")})
        with tracer.start_as_current_span("operator"):
            assert await Resumer(store, registry).resume(run_id) == run_id
            [call] = await store.calls.run_calls(run_id)
            await service.decide(call.id, Approve(), actor=Actor("rita", "reviewer"))
            await Resumer(store, registry).resume(run_id)
    assert (await store.runs.get_run(run_id)).status == "completed"

    lines = json_lines(stream)
    assert all(set(JSON_FIELDS) <= line.keys() for line in lines)
    first, *ours = lines
    assert first["message"] == "before any run"
    assert (first["run_id"], first["call_id"], first["trace_id"], first["span_id"]) == (None, None, None, None)
    assert (first["level"], first["logger"]) == ("INFO", "approvals.test")

    by_run = [line for line in ours if run_id in line["message"]]
    assert any("paused" in line["message"] for line in by_run) and any(
        "completed" in line["message"] for line in by_run
    )
    assert all(line["run_id"] == run_id for line in by_run if line["logger"].startswith("approvals.worker"))
    [decided] = [line for line in ours if line["message"].startswith(f"call {call.id}")]
    assert decided["call_id"] == call.id and decided["logger"] == "approvals.service"
    for line in ours:  # all inside the operator's span (or a span of ours under it)
        for field, pattern in HEX.items():
            assert pattern.fullmatch(line[field] or ""), line


# --- secrets ---------------------------------------------------------------------------------


class _Receiver(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.received += 1  # type: ignore[attr-defined]
        self.send_response(200)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def webhook_receiver() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    server.received = 0  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


class LoginSmtp(SmtpServer):
    """The tests' SMTP server, asking for a login (over plain SMTP: the app is set to `smtp_security=none`)."""

    def __init__(self, username: str, password: str) -> None:
        super().__init__()
        self.logins: list[tuple[bytes, bytes]] = []
        self.credentials = (username.encode(), password.encode())

    def start(self) -> None:
        controller = Controller(
            _Handler(self),
            hostname=self.host,
            port=self.port,
            ready_timeout=10,
            authenticator=self._authenticate,
            auth_require_tls=False,
        )
        controller.start()
        self._controller = controller

    def _authenticate(self, server: Any, session: Any, envelope: Any, mechanism: str, data: Any) -> AuthResult:
        ok = isinstance(data, LoginPassword) and (data.login, data.password) == self.credentials
        if isinstance(data, LoginPassword):
            self.logins.append((data.login, data.password))
        return AuthResult(success=ok)


async def running_app(settings: Settings) -> AsyncIterator[WebApp]:
    app = create_app(settings, registry=AgentRegistry([email_agent]))
    async with app.router.lifespan_context(app):
        store: Store = app.state.context.store
        for name, role in ROLES.items():
            await store.people.create_user(name, PASSWORDS[name], role=role, actor=SYSTEM)
        await store.people.set_user_contact("alice", actor=SYSTEM, slack_user_id="U0ALICE", email="alice@example.com")
        yield WebApp(app=app, store=store)


def own_requests(record_text: str) -> bool:
    """A line the test's own HTTP client logged (its URL, with a mail's link in it, is the test's doing)."""
    return "http://testserver/" in record_text


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("log_format", ["text", "json"])
async def test_no_secret_is_ever_logged(db_url: str, log_format: str, tmp_path: Path) -> None:  # noqa: F811
    smtp_password = "smtp-pw-" + secrets.token_hex(8)
    webhook_secret = "whsec-" + secrets.token_hex(8)
    secret_key = "session-key-" + secrets.token_hex(8)
    slack = FakeSlack(channels={"C0REVIEW": True})
    slack.add_user("U0ALICE", "alice")
    smtp = LoginSmtp("mailer", smtp_password)
    with (
        running_fake_slack(slack) as fake,
        webhook_receiver() as receiver,
        captured(log_format, level=logging.DEBUG) as stream,
    ):
        smtp.start()
        try:
            secret_list = await _drive_every_secret(
                fake, receiver, smtp, db_url, tmp_path, smtp_password, webhook_secret, secret_key
            )
        finally:
            smtp.stop()

    lines = [line for line in stream.getvalue().splitlines() if not own_requests(line)]
    assert len(lines) > 20  # the flows did log, at DEBUG too
    if log_format == "json":
        assert all(isinstance(json.loads(line), dict) for line in lines)
    text = "\n".join(lines)
    leaked = [name for name, value in secret_list.items() if value in text]
    assert not leaked, f"logged: {leaked}"


async def _drive_every_secret(
    fake: FakeSlack,
    receiver: ThreadingHTTPServer,
    smtp: LoginSmtp,
    database_url: str,
    tmp_path: Path,
    smtp_password: str,
    webhook_secret: str,
    secret_key: str,
) -> dict[str, str]:
    """Login, an API token, a gate token, a webhook, Slack both ways, a mail and its link; the secrets used."""
    settings = Settings(
        database_url=database_url,
        worker=True,
        secret_key=secret_key,
        public_url="http://testserver",
        webhook_urls=[f"http://127.0.0.1:{receiver.server_address[1]}/hook"],
        webhook_secret=webhook_secret,
        slack_bot_token=fake.token,
        slack_signing_secret=fake.signing_secret,
        slack_channel="C0REVIEW",
        slack_api_url=fake.url,
        smtp_host=smtp.host,
        smtp_port=smtp.port,
        smtp_security="none",
        smtp_username="mailer",
        smtp_password=smtp_password,
        mail_from="approvals@example.com",
    )
    used = {
        "password": PASSWORDS["alice"],
        "session key": secret_key,
        "webhook secret": webhook_secret,
        "slack bot token": fake.token,
        "slack signing secret": fake.signing_secret,
        "smtp password": smtp_password,
    }
    async for web in running_app(settings):
        client, _ = await web.login("alice")  # a password, then the session cookie it gets
        assert (await client.get("/")).status_code == 200
        await client.aclose()
        api_token = await web.store.people.create_token("api", role="reviewer", actor=SYSTEM, user="bob")
        gate_token = await web.store.people.create_token("gate", role="reviewer", actor=SYSTEM, scopes=["calls:ask"])
        used |= {"api token": api_token, "gate token": gate_token}
        async with web.client(headers={"Authorization": f"Bearer {api_token}"}) as api:
            assert (await api.get("/api/calls")).status_code == 200
        async with web.client(headers={"Authorization": f"Bearer {gate_token}"}) as gate:
            body = {"source": "billing", "session_id": "s", "tool_name": "refund", "args": {"amount": 5}}
            asked = await gate.post("/api/gate/calls", json={**body, "idempotency_key": "k-1"})
            assert asked.status_code == 201, asked.text
        gate_call = asked.json()["call_id"]

        service = web.app.state.context.service
        run_id = await web.store.runs.start_run("mailer", "go", actor=SERVICE, deps={"log": str(tmp_path / "log")})
        assert (await service.resume_now(run_id)).status == "awaiting_approval"

        def mails() -> list[Any]:
            return [m for m in smtp.messages(to="alice@example.com") if "send_email" in m.text]

        await eventually(lambda: bool(mails()))
        assert smtp.logins and all(password == smtp_password.encode() for _, password in smtp.logins)
        links = {label: mails()[0].link(label) for label in ("Approve", "Deny")}
        used |= {f"e-mail {label} link token": url.rsplit("/", 1)[1] for label, url in links.items()}
        async with web.client() as browser:
            approved = await browser.post(links["Approve"].removeprefix("http://testserver"))
            assert approved.status_code == 200, approved.text
        assert (await service.resume_now(run_id)).status == "completed"

        def about_gate_call(call_id: str = gate_call) -> list[Any]:
            return [m for m in fake.posted() if call_id in m.all_text() and m.buttons()]

        await eventually(lambda: bool(about_gate_call()))
        async with web.client() as slack_side:
            clicked = await fake.click(slack_side, about_gate_call()[0], ACTION_APPROVE, "U0ALICE")
            assert clicked.status_code == 200, clicked.text
        await eventually(lambda: receiver.received >= 3)  # type: ignore[attr-defined]
    return used
