"""ID tokens that are validly delivered but wrong, and the provider's logout (issue 40).

The provider (node-oidc-provider, tests/oidc/provider.mjs) hands out a wrong ID token from its
token endpoint on request (`Provider.hand_out`): the sign-in must be refused with nothing written
but its `login.failed` event, and a right token must work again afterwards.
"""

from __future__ import annotations

import re

import httpx
import pytest
from sqlalchemy import func, select

from approvals.store.models import UserRow

from ..oidc.harness import App, Provider, provider_and_app
from .test_sso import _events, _submit, sign_in

CSRF_FIELD = re.compile(r'name="csrf_token" value="([^"]+)"')
COOKIE = "approvals_session"

WRONG_TOKENS = {
    # test id: (what the provider hands out, what the `login.failed` reason names)
    "wrong_audience": ({"aud": "other-app"}, "'aud'"),
    # another audience, though naming us as the authorized party: still not ours (OIDC Core 3.1.3.7, step 3)
    "wrong_audience_our_azp": ({"aud": "other-app", "azp": "approvals"}, "'aud'"),
    "expired": ({"exp_offset": -3600}, "expired"),
    "wrong_issuer": ({"iss": "http://evil.example"}, "'iss'"),
    "wrong_nonce": ({"nonce": "x"}, "'nonce'"),
    "tampered": ("tamper", "signature"),
    "unknown_kid": ("foreign_key", "never-published"),
}


def _user_count(app: App) -> int:
    async def count() -> int:
        async with app.store.db.read() as session:
            return int(await session.scalar(select(func.count()).select_from(UserRow)) or 0)

    return app.call(count())


def _logged_in(client: httpx.Client, app_url: str) -> bool:
    """Whether the client's cookie opens the inbox (a session) or is sent to the login page."""
    page = client.get(f"{app_url}/", follow_redirects=False)
    if page.status_code in (302, 303, 307):
        assert "/login" in page.headers["location"]
        return False
    assert page.status_code == 200, page.text[:2000]
    return True


@pytest.mark.parametrize(("mode", "reason"), WRONG_TOKENS.values(), ids=WRONG_TOKENS.keys())
def test_a_wrong_id_token_is_refused(db_url: str, oidc: Provider, mode: str | dict[str, object], reason: str) -> None:
    with provider_and_app(db_url, oidc) as (provider, app):
        users = _user_count(app)
        provider.hand_out(mode)
        with httpx.Client(follow_redirects=True) as client:
            page = sign_in(client, app.url, "bob")
            assert "/sso/test/callback" in str(page.url), f"signed in with a wrong ID token: {page.url}"
            with httpx.Client(cookies=client.cookies) as browser:  # a new connection: a 500 closes the old one
                assert not _logged_in(browser, app.url)
        assert _events(app, "user.logged_in") == [] and _events(app, "user.created") == []
        assert _user_count(app) == users
        assert app.call(app.store.people.user_identities("bob")) == []
        assert page.status_code == 400, f"{page.status_code}: {page.text[:300]}"
        assert "could not be verified" in page.text and "Please start again" in page.text
        failed = _events(app, "login.failed")
        assert len(failed) == 1
        assert reason in failed[0].details["reason"].lower(), failed[0].details
        assert failed[0].details["issuer"] == provider.issuer

        provider.hand_out(None)
        with httpx.Client(follow_redirects=True) as client:
            page = sign_in(client, app.url, "bob")
            assert page.status_code == 200 and str(page.url).startswith(app.url), page.text[:2000]
            assert _logged_in(client, app.url)
        assert len(_events(app, "user.logged_in")) == 1
        assert len(_events(app, "login.failed")) == 1


def _provider_session_answers(client: httpx.Client, app_url: str) -> httpx.Response:
    """Start a sign-in and follow it only as far as the provider's first answer."""
    start = client.get(f"{app_url}/sso/test/login", follow_redirects=False)
    assert start.status_code in (302, 303), start.text[:2000]
    return client.get(start.headers["location"], follow_redirects=False)


def test_logout_ends_the_session_here_and_at_the_provider(db_url: str, oidc: Provider) -> None:
    with provider_and_app(db_url, oidc) as (provider, app), httpx.Client(follow_redirects=True) as client:
        assert sign_in(client, app.url, "alice").status_code == 200
        cookie = client.cookies[COOKIE]  # what someone who copied it holds
        with httpx.Client(cookies={COOKIE: cookie}) as copied:
            assert _logged_in(copied, app.url)
        # while the provider's session lasts, a new sign-in goes straight back to the app, no form
        answer = _provider_session_answers(client, app.url)
        assert answer.status_code in (302, 303), answer.text[:2000]
        assert answer.headers["location"].startswith(f"{app.url}/sso/test/callback?code="), answer.headers

        form = CSRF_FIELD.search(client.get(f"{app.url}/").text)  # the logout button's form
        assert form is not None
        leaving = client.post(f"{app.url}/logout", data={"csrf_token": form.group(1)}, follow_redirects=False)
        assert leaving.status_code == 303
        end_session = httpx.URL(leaving.headers["location"])
        assert str(end_session).startswith(f"{provider.issuer}/session/end")
        assert end_session.params["post_logout_redirect_uri"] == f"{app.url}/login"
        assert end_session.params["id_token_hint"] and end_session.params["client_id"] == "approvals"

        confirm = client.get(end_session)
        assert confirm.status_code == 200 and "Yes, sign me out" in confirm.text, confirm.text[:2000]
        back = _submit(client, confirm, logout="yes")
        assert back.status_code == 200 and str(back.url).startswith(f"{app.url}/login"), back.text[:2000]

        assert not _logged_in(client, app.url)
        with httpx.Client(cookies={COOKIE: cookie}) as copied:
            assert not _logged_in(copied, app.url)  # the session is revoked, not only forgotten by this client

        page = client.get(f"{app.url}/sso/test/login")
        assert page.status_code == 200 and 'name="login"' in page.text, page.text[:2000]
