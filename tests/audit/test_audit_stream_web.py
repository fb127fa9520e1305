"""The app streams the audit log to the sinks its settings name, and shows each on `/readyz` and `/metrics`.

SQLite and PostgreSQL; rsyslog over TCP, stopped part way so the sink is seen failing, then catching up.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import anyio
import pytest
from fastapi.testclient import TestClient

from approvals.calls.actors import SYSTEM_ACTOR_ID
from approvals.store import Database, Store
from approvals_web.app import create_app
from approvals_web.settings import Settings

from ..eventually import eventually_sync
from .rsyslog import RSYSLOGD, Rsyslog

pytestmark = pytest.mark.skipif(shutil.which(RSYSLOGD) is None, reason="needs rsyslogd: apt-get install rsyslog")


def metric(text: str, name: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(f'{name}{{sink="syslog"}} '):
            return float(line.split(" ")[-1])
    return None


def sink_state(client: TestClient) -> str | None:
    shown: str | None = client.get("/readyz").json().get("audit_sinks", {}).get("syslog", {}).get("state")
    return shown


async def one_event(db_url: str) -> None:
    """An audit event written by another process's store, announcing nothing: the sink finds it by polling."""
    db = Database(db_url)
    try:
        async with Store(db).runs.transaction() as tx:
            tx.audit(SYSTEM_ACTOR_ID, "test.ping", "test", "web")
    finally:
        await db.dispose()


def test_the_app_streams_to_syslog_and_shows_the_sink_on_readyz_and_metrics(db_url: str, tmp_path: Path) -> None:
    server = Rsyslog(tmp_path / "rsyslog")
    server.start()
    settings = Settings(
        database_url=db_url,
        worker=False,
        metrics_public=True,
        audit_syslog_host="127.0.0.1",
        audit_syslog_port=server.port,
        audit_syslog_tls=False,
    )
    try:
        with TestClient(create_app(settings)) as client:
            ready = eventually_sync(lambda: sink_state(client) == "delivering" or None)
            assert ready and client.get("/readyz").json()["audit_sinks"]["syslog"]["failures"] == 0
            server.stop()
            anyio.run(one_event, db_url)
            eventually_sync(
                lambda: client.get("/readyz").json()["audit_sinks"]["syslog"]["failures"] >= 1 or None, seconds=60
            )
            body = client.get("/metrics").text
            assert (metric(body, "approvals_audit_sink_lag_events") or 0) >= 1
            assert (metric(body, "approvals_audit_sink_failures") or 0) >= 1
            assert metric(body, "approvals_audit_sink_lag_seconds") is not None
            assert client.get("/readyz").status_code == 200  # a SIEM that is down does not make the app unready
            server.start()
            eventually_sync(
                lambda: metric(client.get("/metrics").text, "approvals_audit_sink_lag_events") == 0 or None, seconds=90
            )
            assert any(m["msgid"] == "test.ping" for m in server.received())
    finally:
        server.stop()
