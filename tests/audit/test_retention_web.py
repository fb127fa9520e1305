"""After an archive, the audit page, its chain badge and the API list what remains (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from approvals.audit.retention import archive_events
from approvals.audit.signing import SigningKey
from approvals.calls import clock

from ..store import conftest as store_fixtures
from ..web import conftest as web_fixtures
from ..web.conftest import WebApp
from .checkpoint_helpers import add_events, checkpointer

pytestmark = pytest.mark.anyio
db_url, web_tokens, web = web_fixtures.db_url, web_fixtures.web_tokens, web_fixtures.web  # the app over each database
postgres_url, sqlite_template = store_fixtures.postgres_url, store_fixtures.sqlite_template


async def test_the_page_the_chain_badge_and_the_api_list_what_remains(web: WebApp, tmp_path: Path) -> None:
    key = SigningKey.generate()
    maker = checkpointer(web.store, key, tmp_path / "cp")
    await add_events(web.store, 40)
    assert await maker.make(force=True)
    date = clock.now()
    await add_events(web.store, 10)
    archived = await archive_events(
        web.store.db, before=date, bundle=tmp_path / "a.jsonl", actor="ada", public=key.public
    )
    first = archived.cut.event_id + 1
    client, _ = await web.login("victor")
    page = await client.get("/audit")
    assert page.status_code == 200
    assert (
        f"ada archived {archived.events} events ({archived.cut.first_event_id}..{first - 1}, up to signed" in page.text
    )
    verify = await client.get("/audit/verify")
    assert verify.status_code == 200 and "chain verified · 11 events" in verify.text
    await client.aclose()
    async with web.api("viewer") as api:
        listed = (await api.get("/api/audit", params={"limit": 200})).json()
        ids = [event["id"] for event in listed["items"]]
        assert min(ids) == first and listed["items"][0]["action"] == "audit.archived"
        assert len(ids) == 11
        exported = [json.loads(line) for line in (await api.get("/api/audit/export")).text.splitlines()]
        assert exported[0]["id"] == first and exported[-1]["action"] == "audit.archived"
