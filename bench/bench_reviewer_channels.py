"""Reviewers anywhere (issue 27): how soon a pending call reaches Slack and a mailbox, and how fast a backlog drains.

1. Latency: one call at a time becomes pending through the gate's store path
   (`store.calls.request_call`); the durable deliverer (`deliver_outbound`, the one `approvals serve`
   and `approvals worker` run) sends it to Slack (the fake Slack of the tests, a real HTTP
   server on loopback) and by e-mail (a real aiosmtpd SMTP server). Timed from the commit
   (`request_call` returning) to the fake Slack receiving `chat.postMessage` and to the SMTP
   server accepting the mail: p50 and p95, per database.
2. Throughput: BACKLOG calls become pending while no deliverer runs (their cursors exist, as
   after a restart or an outage); then one deliverer starts. Notifications per second per
   channel until every call has its Slack message and its mail, on PostgreSQL.

The deliverer, the fake Slack and the SMTP server share this process (threads for the two
servers), as on a 2-core machine they would share the host. SQLite runs with the app's
settings (WAL, synchronous=NORMAL). Prints numbers; asserts only that nothing was lost.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _databases import migrated_database

from approvals.calls import CallRequest, validate_request
from approvals.channels.outbound import deliver_outbound
from approvals.channels.settings import OutboundSettings, SlackSettings, SmtpSettings
from approvals.store import SYSTEM, Actor, Database, Store
from tests.fixtures.fake_slack import FakeSlack, running_fake_slack
from tests.fixtures.smtp_server import smtp_server

SAMPLES = int(os.environ.get("BENCH_SAMPLES", 100))
BACKLOG = int(os.environ.get("BENCH_BACKLOG", 400))
ASKER = Actor(id="bench-service", role="reviewer", person=False)
SCHEMA = {"type": "object", "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}}}


class TimedSlack(FakeSlack):
    """The fake Slack, noting when each chat.postMessage arrived."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.posted_at: list[float] = []

    def handle(self, method: str, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, str], dict[str, Any]]:
        if method == "chat.postMessage":
            self.posted_at.append(time.perf_counter())
        return super().handle(method, headers, body)


class TimedList(list[Any]):
    """The SMTP server's mailbox, noting when each message was accepted."""

    def __init__(self) -> None:
        super().__init__()
        self.at: list[float] = []

    def append(self, item: Any) -> None:
        self.at.append(time.perf_counter())
        super().append(item)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def forget(slack: TimedSlack, mailbox: TimedList) -> None:
    slack.posted_at.clear()
    mailbox.at.clear()
    mailbox.clear()


async def ask(store: Store, n: int) -> None:
    request = CallRequest(
        engine="gate",
        source="bench-app",
        session_id=f"s-{n % 20}",
        tool_name="refund",
        args={"order_id": f"A-{n}", "amount": 120.0},
        json_schema=SCHEMA,
    )
    await store.calls.request_call(validate_request(request), actor=ASKER)


async def until(count: int, seen: list[float], seconds: float = 60.0) -> None:
    with anyio.fail_after(seconds):
        while len(seen) < count:
            await anyio.sleep(0.0005)


async def one_database(kind: str, url: str, slack: TimedSlack, mailbox: TimedList, smtp_port: int) -> None:
    database = Database(url)
    store = Store(database)
    await store.people.create_user("rita", None, role="reviewer", actor=SYSTEM)
    await store.people.set_user_contact("rita", actor=SYSTEM, email="rita@example.com")
    outbound = OutboundSettings(
        public_url="http://approvals.example",
        slack=SlackSettings(
            bot_token=slack.token, signing_secret=slack.signing_secret, channel="C0BENCH", api_url=slack.url
        ),
        smtp=SmtpSettings(host="127.0.0.1", port=smtp_port, sender="approvals@example.com", security="none"),
    )
    options: dict[str, Any] = {"poll_interval": 5.0, "backoff": 0.05, "max_backoff": 0.5}
    try:
        # 1. latency, one call at a time
        forget(slack, mailbox)
        to_slack: list[float] = []
        to_mail: list[float] = []
        stop = anyio.Event()
        async with anyio.create_task_group() as group:
            await group.start(functools.partial(deliver_outbound, store, outbound, stop, **options))
            for n in range(SAMPLES):
                await ask(store, n)
                asked = time.perf_counter()
                await until(n + 1, slack.posted_at)
                await until(n + 1, mailbox.at)
                to_slack.append((slack.posted_at[n] - asked) * 1000)
                to_mail.append((mailbox.at[n] - asked) * 1000)
            stop.set()
        print(
            f"  {kind:<10} pending -> Slack request p50 {pct(to_slack, 0.5):6.1f} ms  p95 {pct(to_slack, 0.95):6.1f} ms"
            f"   pending -> mail accepted p50 {pct(to_mail, 0.5):6.1f} ms  p95 {pct(to_mail, 0.95):6.1f} ms"
        )

        # 2. a backlog: BACKLOG calls pending while no deliverer runs, then one starts
        if kind != "postgresql":
            return
        for n in range(SAMPLES, SAMPLES + BACKLOG):
            await ask(store, n)
        forget(slack, mailbox)
        stop = anyio.Event()
        async with anyio.create_task_group() as group:
            started = time.perf_counter()
            group.start_soon(lambda: deliver_outbound(store, outbound, stop, **options))
            await until(BACKLOG, slack.posted_at, 300)
            await until(BACKLOG, mailbox.at, 300)
            stop.set()
        slack_rate = BACKLOG / (slack.posted_at[-1] - started)
        mail_rate = BACKLOG / (mailbox.at[-1] - started)
        both = 2 * BACKLOG / (max(slack.posted_at[-1], mailbox.at[-1]) - started)
        print(
            f"  {kind:<10} backlog of {BACKLOG} calls: Slack {slack_rate:6.0f} messages/s, e-mail {mail_rate:6.0f}"
            f" mails/s; both channels together {both:6.0f} notifications/s"
        )
        assert len(mailbox) == BACKLOG, "a mail was lost or sent twice"
    finally:
        await database.dispose()


def main() -> None:
    print(f"Reviewer channels: {SAMPLES} calls one at a time, then a backlog of {BACKLOG} (PostgreSQL)")
    with running_fake_slack(TimedSlack()) as fake, smtp_server() as smtp:
        assert isinstance(fake, TimedSlack)
        fake.add_channel("C0BENCH")
        mailbox = TimedList()
        smtp.delivered = mailbox
        for kind in ("sqlite", "postgresql"):
            with migrated_database(kind) as url:
                anyio.run(one_database, kind, url, fake, mailbox, smtp.port)


if __name__ == "__main__":
    main()
