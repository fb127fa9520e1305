"""Who may scrape `/metrics` while the database is down, and that a scraper never gets HTML (issue 41, fault 1).

In process, on SQLite and PostgreSQL, with the database "down" (its sessions raise) and the
token cache's clock moved by the test; tests/web/test_metrics_prometheus.py does the same
with a real Prometheus and a PostgreSQL cluster that is really stopped.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.exc import ProgrammingError

from approvals.store import SYSTEM, Database, Store
from approvals.store.token_cache import TOKEN_CACHE_SECONDS
from approvals_web.metrics_access import OUTAGE_GRACE_SECONDS

from .conftest import WebApp

pytestmark = pytest.mark.anyio


@contextmanager
def database_down(web: WebApp, monkeypatch: pytest.MonkeyPatch, error: Exception | None = None) -> Iterator[None]:
    """Every new session fails as with the server gone (or with `error`); the pool's connections are closed."""

    def down() -> object:
        raise error or OSError("connection refused")

    with monkeypatch.context() as patch:
        patch.setattr(web.store.db, "read", down)
        patch.setattr(web.store.db, "sessions", down)
        yield


@pytest.fixture
def clock(web: WebApp) -> list[float]:
    """The token cache's clock (and so the metrics tokens' record's), moved by the test."""
    now = [0.0]
    web.store.people.verified_tokens.clock = lambda: now[0]
    return now


async def scrape(web: WebApp, token: str | None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with web.client(headers=headers) as client:
        return await client.get("/metrics")


def database_up(response: httpx.Response) -> float:
    assert response.status_code == 200, response.text
    [family] = [f for f in text_string_to_metric_families(response.text) if f.name == "approvals_database_up"]
    return family.samples[0].value


async def metrics_token(web: WebApp, name: str = "prometheus") -> str:
    return await web.store.people.create_token(name, role="viewer", actor=SYSTEM, scopes=["metrics:read"])


async def test_a_known_metrics_token_scrapes_through_an_outage_longer_than_the_token_cache(
    web: WebApp, clock: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    token = await metrics_token(web)
    assert database_up(await scrape(web, token)) == 1
    with database_down(web, monkeypatch):
        clock[0] += TOKEN_CACHE_SECONDS + 1
        assert database_up(await scrape(web, token)) == 0
        clock[0] += OUTAGE_GRACE_SECONDS - TOKEN_CACHE_SECONDS - 2
        assert database_up(await scrape(web, token)) == 0, "still within the bound"
        clock[0] += 2
        refused = await scrape(web, token)
        assert refused.status_code == 503, "verified too long ago: nobody can say whether it is still valid"
        assert refused.headers["content-type"] == "text/plain; charset=utf-8"
    assert database_up(await scrape(web, token)) == 1, "verified again once the database is back"


async def test_an_unknown_token_is_refused_during_an_outage(
    web: WebApp, clock: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    known = await metrics_token(web)
    made_elsewhere = await metrics_token(web, "made-elsewhere")  # valid, but never verified by this process
    assert database_up(await scrape(web, known)) == 1
    with database_down(web, monkeypatch):
        clock[0] += TOKEN_CACHE_SECONDS + 1
        for token in ("made-up", made_elsewhere):
            refused = await scrape(web, token)
            assert refused.status_code == 503, refused.text
            assert refused.headers["content-type"] == "text/plain; charset=utf-8"
            assert "database_up" not in refused.text
        assert database_up(await scrape(web, known)) == 0


async def test_a_token_revoked_through_this_process_is_refused_in_a_later_outage(
    web: WebApp, clock: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    token, other = await metrics_token(web), await metrics_token(web, "other-scraper")
    assert database_up(await scrape(web, token)) == 1
    [row] = [t for t in await web.store.people.list_tokens() if t.name == "other-scraper"]
    await web.store.people.revoke_token(row.id, actor=SYSTEM)  # any local change to accounts voids the record
    with database_down(web, monkeypatch):
        assert (await scrape(web, token)).status_code == 503
    assert (await scrape(web, other)).status_code == 401


async def test_a_token_revoked_by_another_process_stops_scraping_once_the_database_says_so(
    web: WebApp, db_url: str, clock: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    token = await metrics_token(web)
    assert database_up(await scrape(web, token)) == 1
    elsewhere = Store(Database(db_url))  # `approvals tokens revoke` in another process: this app's store hears nothing
    try:
        [row] = [t for t in await elsewhere.people.list_tokens() if t.name == "prometheus"]
        await elsewhere.people.revoke_token(row.id, actor=SYSTEM)
    finally:
        await elsewhere.db.dispose()
    clock[0] += TOKEN_CACHE_SECONDS + 1
    revoked = await scrape(web, token)
    assert revoked.status_code == 401
    assert revoked.headers["content-type"] == "text/plain; charset=utf-8"
    with database_down(web, monkeypatch):
        assert (await scrape(web, token)).status_code == 503, "the database said no: forgotten"


async def test_every_refusal_is_plain_text(web: WebApp, clock: list[float], monkeypatch: pytest.MonkeyPatch) -> None:
    """A scraper keeps the body of a failed scrape as the target's error: never an HTML page."""
    runs_reader = await web.store.people.create_token("reader", role="viewer", actor=SYSTEM, scopes=["runs:read"])
    scraper = await metrics_token(web)
    answers = {
        "no token": await scrape(web, None),
        "unknown token": await scrape(web, "made-up"),
        "no metrics:read scope": await scrape(web, runs_reader),
    }
    broken = ProgrammingError("SELECT ...", {}, Exception("relation api_tokens does not exist"))
    with database_down(web, monkeypatch, broken):  # not an outage: the database refused the lookup
        answers["the database refused"] = await scrape(web, scraper)
    statuses = {what: answer.status_code for what, answer in answers.items()}
    assert statuses == {
        "no token": 401,
        "unknown token": 401,
        "no metrics:read scope": 403,
        "the database refused": 500,
    }
    for what, answer in answers.items():
        assert answer.headers["content-type"] == "text/plain; charset=utf-8", what
        assert "<" not in answer.text, what
    assert answers["no token"].headers["www-authenticate"] == "Bearer"
    assert answers["unknown token"].headers["www-authenticate"] == "Bearer"
