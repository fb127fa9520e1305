"""The API docs render in a real browser from vendored Swagger UI, under the page's CSP."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from ..live_server import LiveServer


def test_the_api_docs_render_with_nothing_from_other_sites(server: LiveServer, page: Page) -> None:
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    refused: list[str] = []
    page.on(
        "console", lambda message: refused.append(message.text) if "Content Security Policy" in message.text else None
    )
    page.goto(server.url + "/api/docs")
    expect(page.locator(".swagger-ui .title")).to_contain_text("approvals")
    expect(page.locator(".opblock-summary-path").first).to_be_visible()
    assert all(url.startswith(server.url) for url in requested), requested
    assert refused == []
