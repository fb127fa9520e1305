"""How reviewers are reached: e-mail addresses and Slack member ids, set by admins on the users page and the API."""

from __future__ import annotations

import html
from contextlib import aclosing

import pytest

from .conftest import WebApp
from .test_api import assert_problem

pytestmark = pytest.mark.anyio

HX = {"HX-Request": "true"}


async def test_admins_set_contacts_on_the_page_and_refused_values_come_back_as_typed(web: WebApp) -> None:
    ada, csrf = await web.login("ada")
    async with aclosing(ada):
        saved = await ada.post(
            "/users/alice/contact",
            data={"email": "Alice@Example.com", "slack_user_id": "U0ALICE1", "csrf_token": csrf},
        )
        assert saved.status_code == 303 and saved.headers["location"] == "/users"
        page = await ada.get("/users")
        assert 'value="alice@example.com"' in page.text and 'value="U0ALICE1"' in page.text

        taken = await ada.post(
            "/users/bob/contact", data={"email": "alice@example.com", "csrf_token": csrf}, headers=HX
        )
        assert taken.status_code == 409 and "Another user already has" in html.unescape(taken.text)
        assert taken.text.lstrip().startswith("<tr") and 'value="alice@example.com"' in taken.text  # as typed
        bad = await ada.post(
            "/users/bob/contact", data={"email": "bob@", "slack_user_id": "<b>", "csrf_token": csrf}, headers=HX
        )
        assert bad.status_code == 422 and "is not an e-mail address" in html.unescape(bad.text)
        assert "<b>" not in bad.text and "&lt;b&gt;" in bad.text  # escaped
        cleared = await ada.post("/users/alice/contact", data={"csrf_token": csrf}, headers=HX)
        assert cleared.status_code == 200 and "Saved." in cleared.text
        no_csrf = await ada.post("/users/bob/contact", data={"email": "bob@example.com"})
        assert no_csrf.status_code == 403
    alice = await web.store.people.get_user("alice")
    assert (alice.email, alice.slack_user_id) == (None, None)
    bob = await web.store.people.get_user("bob")
    assert bob.email is None


async def test_a_reviewer_may_not_set_anyones_contact_on_the_page(web: WebApp) -> None:
    alice, csrf = await web.login("alice")
    async with aclosing(alice):
        refused = await alice.post("/users/bob/contact", data={"email": "mine@example.com", "csrf_token": csrf})
        assert refused.status_code == 403
    assert (await web.store.people.get_user("bob")).email is None


async def test_the_api_sets_contacts_field_by_field(web: WebApp) -> None:
    async with web.api("admin") as admin:
        put = await admin.put("/api/users/alice/contact", json={"email": "a@example.com", "slack_user_id": "U0A1"})
        assert put.status_code == 200
        assert (put.json()["email"], put.json()["slack_user_id"]) == ("a@example.com", "U0A1")
        only_slack = await admin.put("/api/users/alice/contact", json={"slack_user_id": None})
        assert (only_slack.json()["email"], only_slack.json()["slack_user_id"]) == ("a@example.com", None)
        listed = {user["username"]: user for user in (await admin.get("/api/users")).json()["items"]}
        assert listed["alice"]["email"] == "a@example.com"
        assert_problem(await admin.put("/api/users/bob/contact", json={"email": "a@example.com"}), 409)
        assert_problem(await admin.put("/api/users/bob/contact", json={"email": "nope"}), 422)
        assert_problem(await admin.put("/api/users/bob/contact", json={"colour": "red"}), 422)
        assert_problem(await admin.put("/api/users/nobody/contact", json={"email": "n@example.com"}), 404)
    async with web.api("reviewer") as reviewer:
        assert_problem(await reviewer.put("/api/users/alice/contact", json={"email": "x@example.com"}), 403)
    assert (await web.store.people.get_user("alice")).email == "a@example.com"
