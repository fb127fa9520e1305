"""Where to send someone after signing in: only a path on this site, never another site."""

from __future__ import annotations

from urllib.parse import urlparse


def safe_next(target: str | None) -> str:
    """`target` if it is a local path, else `/`, so a sign-in link cannot redirect elsewhere.

    Browsers read `/\\host` like `//host`, so backslashes and control characters are refused too.
    """
    if not target or not target.startswith("/") or target.startswith("//"):
        return "/"
    if "\\" in target or any(ord(character) < 32 for character in target):
        return "/"
    parsed = urlparse(target)
    if parsed.scheme or parsed.netloc:
        return "/"
    return target
