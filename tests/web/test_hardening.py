"""Every response's security headers, request bodies over the limit, and URLs with characters no page has."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import AsyncIterator

import pytest

from approvals.store import SYSTEM

from .conftest import WebApp

pytestmark = pytest.mark.anyio

PAGES = ["/", "/runs", "/audit", "/login", "/api/calls", "/api/runs", "/healthz"]


async def test_every_page_and_api_answer_forbids_framing_and_caching(web: WebApp) -> None:
    client, _ = await web.login("alice")
    try:
        for path in PAGES:
            response = await client.get(path)
            assert response.status_code == 200, (path, response.text)
            headers = response.headers
            assert "frame-ancestors 'none'" in headers["content-security-policy"], path
            assert "script-src 'self'" in headers["content-security-policy"], path
            assert headers["x-frame-options"] == "DENY", path
            assert headers["x-content-type-options"] == "nosniff", path
            assert headers["referrer-policy"] == "same-origin", path
            assert headers["cache-control"] == "no-store", path
        static = await client.get("/static/style.css")
        assert static.status_code == 200
        assert static.headers.get("cache-control") != "no-store", "static files may be cached"
        assert static.headers["x-content-type-options"] == "nosniff"
    finally:
        await client.aclose()


async def test_a_body_over_the_limit_is_refused_before_it_is_read_or_authenticated(web: WebApp) -> None:
    big = b"x" * (2 * 1024 * 1024)
    async with web.client() as anonymous:
        declared = await anonymous.post("/api/runs", content=big, headers={"content-type": "application/json"})
        assert declared.status_code == 413, declared.text  # not 401: nothing was read, nobody was asked
        assert declared.headers["content-type"] == "application/problem+json"

        async def chunks() -> AsyncIterator[bytes]:
            for _ in range(64):
                yield b"y" * 65536

        form = {"content-type": "application/x-www-form-urlencoded"}
        streamed = await anonymous.post("/login", content=chunks(), headers=form)
        assert streamed.status_code == 413, streamed.text
    async with web.api("reviewer") as api:
        deps = {"blob": "z" * (3 * 1024 * 1024)}
        refused = await api.post("/api/runs", json={"agent": "shop", "prompt": "hi", "deps": deps})
        assert refused.status_code == 413
        assert (await api.get("/api/runs")).json()["items"] == [], "nothing was stored"
        fine = await api.post("/api/runs", json={"agent": "shop", "prompt": "hi", "deps": {"a": 1}})
        assert fine.status_code == 201, fine.text


@pytest.mark.parametrize(
    "path",
    [
        "/?q=%00",
        "/?agent=%00",
        "/?tool=a%00b",
        "/runs/%00",
        "/runs?agent=%00",
        "/calls/%00",
        "/audit?actor=%00",
        "/audit?action=%00",
        "/audit?q=%00",
        "/login?next=%00",
    ],
)
async def test_a_nul_in_any_url_is_a_clear_400(web: WebApp, path: str) -> None:
    client, _ = await web.login("alice")
    try:
        response = await client.get(path)
    finally:
        await client.aclose()
    assert response.status_code == 400, (path, response.status_code, response.text[:300])
    assert "NUL" in response.text


async def test_a_nul_in_an_address_no_route_has_is_a_404(web: WebApp) -> None:
    async with web.client() as client:
        assert (await client.get("/%00")).status_code == 404


async def test_a_cursor_hiding_a_lone_surrogate_is_a_400_on_pages_and_api(web: WebApp) -> None:
    await web.store.runs.start_run("shop", "hi", actor=SYSTEM)
    forged = base64.urlsafe_b64encode(json.dumps(["2026-01-01T00:00:00+00:00", "\ud800x"]).encode()).decode()
    client, _ = await web.login("alice")
    try:
        for path in ("/", "/runs", "/api/calls", "/api/runs"):
            response = await client.get(path, params={"after": forged})
            assert response.status_code == 400, (path, response.status_code, response.text[:300])
    finally:
        await client.aclose()


async def test_the_api_docs_load_nothing_from_other_sites(web: WebApp) -> None:
    async with web.client() as client:
        page = await client.get("/api/docs")
        assert page.status_code == 200
        assert "https://" not in page.text and "http://" not in page.text
        assets = re.findall(r'(?:src|href)="(/static/[^"]+)"', page.text)
        assert len(assets) == 3
        for asset in assets:
            assert (await client.get(asset)).status_code == 200, asset
        assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
