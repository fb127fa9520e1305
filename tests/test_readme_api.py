"""The README's "The API in brief" names what the app serves: every route group, every token scope, the body of
approve-and-remember. Read from the app itself, so a new route or scope fails here until the README names it."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from approvals.store import TOKEN_SCOPES

README = Path(__file__).resolve().parents[1] / "README.md"
PAGES = frozenset({"", "login", "logout", "calls", "runs", "audit", "rules", "users", "account", "events", "static"})
"""First path segments of what a browser navigates or posts forms to (the inbox and its pages, and their live
updates): the README tells people about the app, not each page's address."""
CHANNELS = frozenset({"slack", "email"})
"""Where Slack's clicks and mailed links land: the README's reviewer-channel sections name them."""


def api_section() -> str:
    return README.read_text().split("## The API in brief", 1)[1].split("\n## ", 1)[0]


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from approvals_web.app import create_app
    from approvals_web.settings import Settings

    database = tmp_path_factory.mktemp("api-section") / "unused.db"
    return create_app(Settings(database_url=f"sqlite:///{database}", secret_key="readme"))


def paths(routes: Any) -> Iterator[str]:
    for route in routes:
        inner = getattr(route, "original_router", None)
        if inner is not None:  # an included router: its own routes
            yield from paths(inner.routes)
        else:
            yield route.path


def test_every_token_scope_is_named() -> None:
    section = api_section()
    assert [scope for scope in TOKEN_SCOPES if f"`{scope}`" not in section] == []


def test_every_route_group_and_every_part_of_its_paths_is_named(app: Any) -> None:
    section = api_section()
    missing = set()
    for path in paths(app.routes):
        parts = [part for part in path.strip("/").split("/") if not part.startswith("{")]
        if parts[:1] == ["api"]:
            group = "/api/" + parts[1]
            if group not in section:
                missing.add(group)
            missing |= {f"{group}: /{part}" for part in parts[2:] if f"/{part}" not in section}
        elif (parts or [""])[0] not in PAGES | CHANNELS and path not in section:
            missing.add(path)
    assert sorted(missing) == []


def test_the_openapi_document_is_where_the_readme_says(app: Any) -> None:
    assert app.openapi_url == "/api/openapi.json"
    assert f"`{app.openapi_url}`" in api_section() and "`/api/docs`" in api_section()


def test_the_approve_and_remember_body_is_one_the_api_takes() -> None:
    from approvals_web.api.schemas import ApproveAndRemember

    block = re.search(
        r"<!-- approve-and-remember:start -->\s*```json\n(.*?)```\s*<!-- approve-and-remember:end -->",
        api_section(),
        re.DOTALL,
    )
    assert block is not None, "the README lost its approve-and-remember markers"
    body = ApproveAndRemember.model_validate(json.loads(block.group(1)))
    assert body.duration == 8 * 3600 and body.pinned == ["customer_id"]
    for field in ApproveAndRemember.model_fields:
        assert f"`{field}`" in api_section(), field
