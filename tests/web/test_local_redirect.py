"""Where a sign-in sends its user afterwards: a path on this site, or the inbox; never another site."""

from __future__ import annotations

import pytest

from approvals_web.local_redirect import safe_next


@pytest.mark.parametrize(
    ("asked", "sent_to"),
    [
        ("/calls/abc?tab=story", "/calls/abc?tab=story"),
        ("/audit", "/audit"),
        (None, "/"),
        ("", "/"),
        ("https://evil.example/", "/"),
        ("//evil.example/", "/"),
        ("/\\evil.example/", "/"),  # browsers read a backslash as a slash: //evil.example
        ("/\\/evil.example/", "/"),
        ("/\t/evil.example/", "/"),  # browsers drop tabs and newlines from URLs
        ("/\n/evil.example/", "/"),
        ("calls/abc", "/"),
    ],
)
def test_only_a_path_on_this_site_is_followed(asked: str | None, sent_to: str) -> None:
    assert safe_next(asked) == sent_to
