"""Sign-in through a real OpenID provider (node-oidc-provider) over real HTTP, on SQLite and PostgreSQL."""

from __future__ import annotations

import re

import httpx
from sqlalchemy import select

from approvals.calls.actors import SYSTEM, ProviderIdentity
from approvals.store.models import AuditEventRow

from ..oidc.harness import App, Provider, provider_and_app

FORM = re.compile(r'<form[^>]*action="([^"]+)"', re.S)
HIDDEN = re.compile(r'<input type="hidden" name="([^"]+)" value="([^"]*)"')


def _submit(client: httpx.Client, page: httpx.Response, **fields: str) -> httpx.Response:
    """Post the page's first form as a browser would: its hidden inputs plus `fields`."""
    action = FORM.search(page.text)
    assert action, page.text[:2000]
    data = dict(HIDDEN.findall(page.text)) | fields
    return client.post(httpx.URL(str(page.url)).join(action.group(1).replace("&amp;", "&")), data=data)


def sign_in(client: httpx.Client, app_url: str, user: str) -> httpx.Response:
    """Start at the app, fill the provider's login form and consent, come back to the app."""
    page = client.get(f"{app_url}/sso/test/login")
    assert 'name="login"' in page.text, page.text[:2000]
    page = _submit(client, page, login=user, password="anything")
    if 'value="consent"' in page.text:
        page = _submit(client, page)
    return page


def _events(app: App, action: str) -> list[AuditEventRow]:
    async def read() -> list[AuditEventRow]:
        async with app.store.db.read() as session:
            rows = await session.scalars(select(AuditEventRow).where(AuditEventRow.action == action))
            return list(rows.all())

    return app.call(read())


def test_first_sign_in_creates_the_user_and_a_second_refreshes(db_url: str, oidc: Provider) -> None:
    with provider_and_app(db_url, oidc) as (provider, app):
        with httpx.Client(follow_redirects=True) as client:
            page = sign_in(client, app.url, "alice")
            assert page.status_code == 200, page.text[:2000]
            assert str(page.url).startswith(app.url)
            assert "alice" in page.text
        assert "Sign in with Test IdP" in httpx.get(f"{app.url}/login").text
        row = app.call(app.store.people.get_user("alice"))
        assert row.role == "reviewer" and row.groups == ["oncall"] and row.password_hash is None
        logged_in = _events(app, "user.logged_in")
        assert logged_in[-1].details["issuer"] == provider.issuer and logged_in[-1].details["subject"] == "alice"
        assert _events(app, "user.created")[-1].details["source"] == provider.issuer

        provider.set_groups("alice", ["staff"])
        with httpx.Client(follow_redirects=True) as client:
            assert sign_in(client, app.url, "alice").status_code == 200
        row = app.call(app.store.people.get_user("alice"))
        assert row.role == "reviewer" and not row.groups
        changed = _events(app, "user.groups_changed")
        assert changed[-1].details["previous"] == ["oncall"] and changed[-1].details["source"] == provider.issuer
        assert len(app.call(app.store.people.user_identities("alice"))) == 1
        assert len(_events(app, "user.logged_in")) == 2


def test_a_replayed_state_is_refused(db_url: str, oidc: Provider) -> None:
    with provider_and_app(db_url, oidc) as (_, app), httpx.Client(follow_redirects=True) as client:
        page = sign_in(client, app.url, "bob")
        assert page.status_code == 200, page.text[:2000]
        callback = next(str(r.url) for r in page.history if "/sso/test/callback" in str(r.url))
        again = client.get(callback)
        assert again.status_code == 400 and "Please start again" in again.text
        assert httpx.get(callback).status_code == 400  # without the cookie either
        assert len(_events(app, "login.failed")) == 2
        assert len(_events(app, "user.logged_in")) == 1


def test_groups_without_a_role_are_refused_clearly(db_url: str, oidc: Provider) -> None:
    with provider_and_app(db_url, oidc) as (_, app), httpx.Client(follow_redirects=True) as client:
        page = sign_in(client, app.url, "eve")
        assert page.status_code == 403
        assert "none of your groups gives a role" in page.text
        refused = _events(app, "login.refused")
        assert refused[-1].details["reason"] == "no_role" and refused[-1].details["subject"] == "eve"
        assert app.call(app.store.people.user_identities("eve")) == []
        assert client.get(f"{app.url}/", follow_redirects=False).status_code in (302, 303, 401)


def test_a_disabled_user_is_refused(db_url: str, oidc: Provider) -> None:
    with provider_and_app(db_url, oidc) as (_, app):
        with httpx.Client(follow_redirects=True) as client:
            assert sign_in(client, app.url, "bob").status_code == 200
        app.call(app.store.people.update_user("bob", actor=SYSTEM, disabled=True))
        with httpx.Client(follow_redirects=True) as client:
            page = sign_in(client, app.url, "bob")
            assert page.status_code == 403 and "disabled" in page.text
        assert _events(app, "login.refused")[-1].details["reason"] == "disabled"
        assert len(_events(app, "user.logged_in")) == 1


def test_a_rotated_provider_key_is_fetched(db_url: str, oidc: Provider) -> None:
    with provider_and_app(db_url, oidc) as (provider, app):
        with httpx.Client(follow_redirects=True) as client:
            assert sign_in(client, app.url, "bob").status_code == 200
        provider.start("key-2")
        with httpx.Client(follow_redirects=True) as client:
            page = sign_in(client, app.url, "bob")
            assert page.status_code == 200, page.text[:2000]
        assert len(_events(app, "user.logged_in")) == 2


def test_a_code_issued_to_another_client_is_refused(db_url: str, oidc: Provider) -> None:
    with provider_and_app(db_url, oidc) as (_, app), httpx.Client(follow_redirects=True) as client:
        start = client.get(f"{app.url}/sso/test/login", follow_redirects=False)
        authorize = httpx.URL(start.headers["location"])
        assert authorize.params["client_id"] == "approvals"
        page = client.get(authorize.copy_set_param("client_id", "other-app"))
        page = _submit(client, page, login="bob", password="anything")
        if 'value="consent"' in page.text:
            page = _submit(client, page)
        assert page.status_code == 400 and "Please start again" in page.text
        failed = _events(app, "login.failed")[-1].details
        assert "invalid_grant" in failed["reason"] and failed["issuer"].startswith("http://127.0.0.1:")
        assert _events(app, "user.logged_in") == []


def test_the_provider_identity_speaks_for_the_user_on_every_channel(db_url: str, oidc: Provider) -> None:
    """The verified e-mail becomes the user's (Slack maps members by it, e-mail links go to it); Slack, e-mail links
    and the user's API tokens act with the identity the user last signed in as, which decisions record."""
    with provider_and_app(db_url, oidc) as (provider, app):
        with httpx.Client(follow_redirects=True) as client:
            assert sign_in(client, app.url, "alice").status_code == 200
        alice = app.call(app.store.people.get_user("alice"))
        assert alice.email == "alice@example.com"
        by_email = app.call(app.store.people.user_by_email("alice@example.com"))
        assert by_email is not None and by_email.username == "alice"
        assert _events(app, "user.contact_changed")[-1].details["source"] == provider.issuer

        expected = ProviderIdentity(issuer=provider.issuer, subject="alice")
        outside = app.call(app.store.people.reviewer_actor(alice))
        assert outside is not None and outside.identity == expected
        token = app.call(app.store.people.create_token("alice-cli", role="reviewer", actor=SYSTEM, user="alice"))
        by_token = app.call(app.store.people.token_actor(token))
        assert by_token is not None and by_token.identity == expected


def test_a_provider_email_another_user_has_is_not_taken(db_url: str, oidc: Provider) -> None:
    with provider_and_app(db_url, oidc) as (_, app):
        app.call(app.store.people.create_user("carol", "a long enough password", role="viewer", actor=SYSTEM))
        app.call(app.store.people.set_user_contact("carol", actor=SYSTEM, email="bob@example.com"))
        with httpx.Client(follow_redirects=True) as client:
            assert sign_in(client, app.url, "bob").status_code == 200
        assert app.call(app.store.people.get_user("bob")).email is None
        assert app.call(app.store.people.get_user("carol")).email == "bob@example.com"
        kept = _events(app, "user.contact_kept")[-1].details
        assert kept["email"] == "bob@example.com" and "carol" in kept["reason"]
