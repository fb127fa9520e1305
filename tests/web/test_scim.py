"""SCIM 2.0 provisioning through real HTTP, on SQLite and PostgreSQL (issue 40).

Users and groups are created, found by filters, replaced, patched and deleted as a provider
does it; bad requests get the SCIM Error schema with the right status and change nothing;
and a deactivation takes away, in one go, the web session, the tokens, the e-mail links and
the standing approvals of a call still waiting for its quorum.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from approvals.calls.states import CallStatus
from approvals.store import SYSTEM
from approvals.store.models import AuditEventRow, UserRow

from .conftest import WebApp
from .test_call_lifecycle import ScriptedGate, refund, scripted_gate_engine  # noqa: F401 - the engine fixture

pytestmark = pytest.mark.anyio

SCIM_JSON = "application/scim+json"
USER_SCHEMA = "urn:ietf:params:scim:schemas:core:2.0:User"
GROUP_SCHEMA = "urn:ietf:params:scim:schemas:core:2.0:Group"
PATCH_SCHEMA = "urn:ietf:params:scim:api:messages:2.0:PatchOp"
ERROR_SCHEMA = "urn:ietf:params:scim:api:messages:2.0:Error"
APPROVE = {"verdict": "approve"}


async def scim_client(web: WebApp, scopes: list[str] | None = None) -> httpx.AsyncClient:
    token = await web.store.people.create_token("idp", role="admin", actor=SYSTEM, scopes=scopes or ["scim"])
    return web.client(headers={"Authorization": f"Bearer {token}", "Content-Type": SCIM_JSON})


def new_user(user_name: str, **extra: Any) -> dict[str, Any]:
    return {"schemas": [USER_SCHEMA], "userName": user_name, **extra}


def patch(*operations: dict[str, Any]) -> dict[str, Any]:
    return {"schemas": [PATCH_SCHEMA], "Operations": list(operations)}


def switch(active: bool) -> dict[str, Any]:
    return patch({"op": "replace", "path": "active", "value": active})


def scim_error(response: httpx.Response, status: int, scim_type: str | None = None) -> dict[str, Any]:
    """The body of a SCIM Error with `status` (and `scimType`), checked."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(SCIM_JSON)
    body: dict[str, Any] = response.json()
    assert body["schemas"] == [ERROR_SCHEMA] and body["status"] == str(status)
    assert body.get("scimType") == scim_type
    return body


async def actions(web: WebApp, action: str) -> list[AuditEventRow]:
    async with web.store.db.read() as session:
        return list((await session.scalars(select(AuditEventRow).where(AuditEventRow.action == action))).all())


async def user_count(web: WebApp) -> int:
    async with web.store.db.read() as session:
        return int(await session.scalar(select(func.count()).select_from(UserRow)) or 0)


async def scim_id(client: httpx.AsyncClient, username: str) -> str:
    found = (await client.get("/scim/v2/Users", params={"filter": f'userName eq "{username}"'})).json()
    assert found["totalResults"] == 1, found
    return str(found["Resources"][0]["id"])


async def test_users_are_created_found_replaced_patched_and_deleted(web: WebApp) -> None:
    async with await scim_client(web) as idp:
        body = new_user(
            "carol", externalId="okta-17", emails=[{"value": "Carol@Example.com", "primary": True}],
            name={"givenName": "Carol", "familyName": "Danvers"}, displayName="Carol D",
        )  # fmt: skip
        created = await idp.post("/scim/v2/Users", json=body)
        assert created.status_code == 201, created.text
        user = created.json()
        assert user["userName"] == "carol" and user["active"] is True and user["externalId"] == "okta-17"
        assert user["emails"] == [{"value": "Carol@example.com", "primary": True}]  # as sent (domains fold)
        assert (await web.store.people.get_user("carol")).email == "carol@example.com"  # as mail and Slack match it
        assert user["name"] == {"givenName": "Carol", "familyName": "Danvers"} and user["displayName"] == "Carol D"
        assert created.headers["location"].endswith(f"/scim/v2/Users/{user['id']}")
        assert (await web.store.people.get_user("carol")).password_hash is None

        again = await idp.post("/scim/v2/Users", json=new_user("carol"))
        scim_error(again, 409, "uniqueness")

        got = (await idp.get(f"/scim/v2/Users/{user['id']}")).json()
        assert got["userName"] == "carol" and got["meta"]["resourceType"] == "User"
        by_name = (await idp.get("/scim/v2/Users", params={"filter": 'username EQ "CAROL"'})).json()
        assert by_name["totalResults"] == 1 and by_name["Resources"][0]["id"] == user["id"]
        by_external = (await idp.get("/scim/v2/Users", params={"filter": 'externalId eq "okta-17"'})).json()
        assert [r["userName"] for r in by_external["Resources"]] == ["carol"]
        none = (await idp.get("/scim/v2/Users", params={"filter": 'externalId eq "okta-18"'})).json()
        assert none["totalResults"] == 0 and none.get("Resources", []) == []
        everyone = (await idp.get("/scim/v2/Users", params={"count": 2, "startIndex": 2})).json()
        assert everyone["totalResults"] == 8 and everyone["itemsPerPage"] == 2 and everyone["startIndex"] == 2

        replaced = await idp.put(
            f"/scim/v2/Users/{user['id']}",
            json=new_user("carol", externalId="okta-17", emails=[{"value": "cd@example.com"}]),
        )
        assert replaced.status_code == 200, replaced.text
        assert replaced.json()["emails"] == [{"value": "cd@example.com"}]
        assert (await web.store.people.get_user("carol")).email == "cd@example.com"
        assert "name" not in replaced.json()  # a replacement says everything: what it leaves out is gone

        off = await idp.patch(f"/scim/v2/Users/{user['id']}", json=switch(False))
        assert off.status_code == 200 and off.json()["active"] is False
        assert (await web.store.people.get_user("carol")).disabled
        on = await idp.patch(f"/scim/v2/Users/{user['id']}", json=patch({"op": "replace", "value": {"active": True}}))
        assert on.json()["active"] is True and not (await web.store.people.get_user("carol")).disabled

        assert (await idp.delete(f"/scim/v2/Users/{user['id']}")).status_code == 204
        scim_error(await idp.get(f"/scim/v2/Users/{user['id']}"), 404)
    provisioned = await actions(web, "user.provisioned")
    assert [(e.subject_id, e.details["source"]) for e in provisioned] == [("carol", "scim")]
    for action in ("user.deactivated", "user.reactivated", "user.deleted", "user.reprovisioned"):
        assert [e.subject_id for e in await actions(web, action)] == ["carol"], action


async def test_groups_carry_their_members_into_the_users_routing_groups(web: WebApp) -> None:
    async with await scim_client(web) as idp:
        alice, bob = await scim_id(idp, "alice"), await scim_id(idp, "bob")
        created = await idp.post(
            "/scim/v2/Groups", json={"schemas": [GROUP_SCHEMA], "displayName": "finance", "members": [{"value": alice}]}
        )
        assert created.status_code == 201, created.text
        group = created.json()
        assert [m["value"] for m in group["members"]] == [alice]
        assert (await web.store.people.get_user("alice")).groups == ["finance"]

        added = await idp.patch(
            f"/scim/v2/Groups/{group['id']}", json=patch({"op": "add", "path": "members", "value": [{"value": bob}]})
        )
        assert added.status_code == 200, added.text
        assert sorted(m["value"] for m in added.json()["members"]) == sorted([alice, bob])
        assert (await web.store.people.get_user("bob")).groups == ["finance"]
        user = (await idp.get(f"/scim/v2/Users/{bob}")).json()
        assert [g["display"] for g in user["groups"]] == ["finance"]

        removed = await idp.patch(
            f"/scim/v2/Groups/{group['id']}", json=patch({"op": "remove", "path": f'members[value eq "{alice}"]'})
        )
        assert [m["value"] for m in removed.json()["members"]] == [bob]
        assert (await web.store.people.get_user("alice")).groups is None
        found = (await idp.get("/scim/v2/Groups", params={"filter": 'displayName eq "finance"'})).json()
        assert [g["id"] for g in found["Resources"]] == [group["id"]]

        assert (await idp.delete(f"/scim/v2/Groups/{group['id']}")).status_code == 204
        assert (await web.store.people.get_user("bob")).groups is None
    changes = await actions(web, "user.groups_changed")
    assert [(e.subject_id, e.details["source"]) for e in changes] == [
        ("alice", "scim"), ("bob", "scim"), ("alice", "scim"), ("bob", "scim")
    ]  # fmt: skip


async def test_bad_requests_get_scim_errors_and_change_nothing(web: WebApp) -> None:
    before = await user_count(web)
    async with web.client() as anonymous:
        scim_error(await anonymous.get("/scim/v2/Users"), 401)
    async with web.api("admin") as admin_without_scope:  # an admin's token made for everything but SCIM
        scim_error(await admin_without_scope.get("/scim/v2/Users"), 403)
    async with await scim_client(web, scopes=["calls:read"]) as wrong_scope:
        scim_error(await wrong_scope.post("/scim/v2/Users", json=new_user("mallory")), 403)
    admin, csrf = await web.login("ada")
    refused = await admin.post("/scim/v2/Users", json=new_user("mallory"), headers={"x-csrftoken": csrf})
    await admin.aclose()
    scim_error(refused, 401)  # an admin's browser session is not a provider

    async with await scim_client(web) as idp:
        alice = await scim_id(idp, "alice")
        for bad in ("userName eq", 'title eq "x"', 'userName zz "x"', "(", 'emails[type eq "work"'):
            scim_error(await idp.get("/scim/v2/Users", params={"filter": bad}), 400, "invalidFilter")
        scim_error(await idp.get("/scim/v2/Groups", params={"filter": 'displayName co "x"'}), 400, "invalidFilter")

        scim_error(await idp.post("/scim/v2/Users", content=b"{not json"), 400, "invalidSyntax")
        scim_error(await idp.post("/scim/v2/Users", json={"schemas": [USER_SCHEMA]}), 400, "invalidValue")
        no_at = new_user("x", emails=[{"value": "no-at"}])
        scim_error(await idp.post("/scim/v2/Users", json=no_at), 400, "invalidValue")
        scim_error(await idp.post("/scim/v2/Users", json=new_user("system")), 400, "invalidValue")
        path = f"/scim/v2/Users/{alice}"
        frobnicate = patch({"op": "frobnicate", "path": "active", "value": False})
        scim_error(await idp.patch(path, json=frobnicate), 400, "invalidValue")
        scim_error(await idp.patch(path, json={"schemas": [PATCH_SCHEMA]}), 400, "invalidValue")
        scim_error(await idp.patch(path, json=[1, 2]), 400, "invalidSyntax")
        renamed = await idp.patch(path, json=patch({"op": "replace", "path": "userName", "value": "alicia"}))
        scim_error(renamed, 400, "invalidValue")

        scim_error(await idp.get("/scim/v2/Users/999999"), 404)
        scim_error(await idp.get("/scim/v2/Users/not-a-number"), 404)
        scim_error(await idp.patch("/scim/v2/Users/999999", json=switch(False)), 404)
        scim_error(await idp.delete("/scim/v2/Users/999999"), 404)
        scim_error(
            await idp.post(
                "/scim/v2/Groups",
                json={"schemas": [GROUP_SCHEMA], "displayName": "g", "members": [{"value": "999999"}]},
            ),
            400,
            "invalidValue",
        )
        scim_error(
            await idp.post("/scim/v2/Groups", json={"schemas": [GROUP_SCHEMA], "displayName": "not a group!"}),
            400,
            "invalidValue",
        )
    assert await user_count(web) == before
    alice_row = await web.store.people.get_user("alice")
    assert not alice_row.disabled and alice_row.username == "alice"
    assert await actions(web, "user.provisioned") == [] and await actions(web, "group.provisioned") == []
    refusals = await actions(web, "scim.refused")
    assert {e.details["status"] for e in refusals} == {400, 403}
    assert any(e.details["scim_type"] == "invalidFilter" and e.subject_id == "GET /scim/v2/Users" for e in refusals)


async def test_discovery_describes_users_groups_and_the_bearer_token(web: WebApp) -> None:
    async with await scim_client(web) as idp:
        config = (await idp.get("/scim/v2/ServiceProviderConfig")).json()
        assert config["patch"]["supported"] is True and config["filter"]["supported"] is True
        assert config["bulk"]["supported"] is False
        assert config["authenticationSchemes"][0]["type"] == "oauthbearertoken"
        types = (await idp.get("/scim/v2/ResourceTypes")).json()
        assert {t["endpoint"] for t in types["Resources"]} == {"/Users", "/Groups"}
        schemas = (await idp.get("/scim/v2/Schemas")).json()
        assert {s["id"] for s in schemas["Resources"]} == {USER_SCHEMA, GROUP_SCHEMA}
        assert (await idp.get(f"/scim/v2/Schemas/{USER_SCHEMA}")).json()["name"] == "User"
        scim_error(await idp.get("/scim/v2/ResourceTypes/Printer"), 404)


async def test_deactivation_ends_the_session_tokens_links_and_standing_approvals(web: WebApp) -> None:
    """The provisioning sequence: a user created and put in a group, then an existing reviewer deactivated."""
    gate = ScriptedGate(web, {"refund": refund})
    call = await gate.ask(gate.request("refund", {"order_id": "A-9", "amount": 5}, approvals_required=2))
    async with web.api("reviewer") as reviewer_token:  # api-reviewer's own approval stays
        assert (await reviewer_token.post(f"/api/calls/{call.id}/decision", json=APPROVE)).status_code == 200
    session, csrf = await web.login("alice")
    alice_token = await web.store.people.create_token("alice-cli", role="reviewer", actor=SYSTEM, user="alice")
    approved = await session.post(f"/api/calls/{call.id}/decision", json=APPROVE, headers={"x-csrftoken": csrf})
    assert approved.status_code == 200, approved.text
    decided = await web.store.calls.get_call(call.id)
    assert decided.status == CallStatus.APPROVED  # two approvals: alice's completed the quorum
    # a second call still waiting, with alice's approval standing
    waiting = await gate.ask(gate.request("refund", {"order_id": "A-10", "amount": 5}, approvals_required=2))
    ok = await session.post(f"/api/calls/{waiting.id}/decision", json=APPROVE, headers={"x-csrftoken": csrf})
    assert ok.status_code == 200 and (await web.store.calls.get_call(waiting.id)).status == CallStatus.PENDING
    expires = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    links = await web.store.outbound.create_email_links(waiting.id, "alice", waiting.current_digest, expires_at=expires)

    async with await scim_client(web) as idp:
        created = await idp.post("/scim/v2/Users", json=new_user("dana", emails=[{"value": "dana@example.com"}]))
        group = await idp.post(
            "/scim/v2/Groups",
            json={"schemas": [GROUP_SCHEMA], "displayName": "payments", "members": [{"value": created.json()["id"]}]},
        )
        assert group.status_code == 201 and (await web.store.people.get_user("dana")).groups == ["payments"]
        alice = await scim_id(idp, "alice")
        off = await idp.patch(f"/scim/v2/Users/{alice}", json=switch(False))
        assert off.status_code == 200, off.text

    # the inbox: the session is gone, a password login is refused
    home = await session.get("/", follow_redirects=False)
    assert home.status_code in (302, 303) and "/login" in home.headers["location"]
    page = await session.get("/login")
    token = page.text.split('name="csrf_token" value="')[1].split('"')[0]
    again = await session.post("/login", data={"username": "alice", "password": "alice-pw-1234", "csrf_token": token})
    assert again.status_code != 303
    await session.aclose()
    # her token
    async with web.client(headers={"Authorization": f"Bearer {alice_token}"}) as cli:
        assert (await cli.get("/api/calls")).status_code == 401
    # her e-mail link
    async with web.client() as mail_reader:
        refused = await mail_reader.get(f"/email/{links.approve}")  # not "expired": she could not decide elsewhere
        assert refused.status_code == 403 and "is disabled or gone" in refused.text, refused.text
        assert (await mail_reader.post(f"/email/{links.approve}")).status_code == 403
    # the quorum: her approval of the waiting call no longer counts, the settled call is as it was
    standing = [d for d in await web.store.calls.decisions_for(waiting.id) if d.consumed_at is None]
    assert standing == []
    assert (await web.store.calls.get_call(waiting.id)).status == CallStatus.PENDING
    assert (await web.store.calls.get_call(call.id)).status == CallStatus.APPROVED
    [event] = await actions(web, "user.deactivated")
    assert event.subject_id == "alice" and event.details["source"] == "scim"
    assert event.details["approvals_withdrawn"] == [waiting.id] and event.details["tokens_revoked"] == 1
    assert event.details["sessions_ended"] == 1 and event.details["email_links_expired"] == 2
    assert [e.subject_id for e in await actions(web, "call.approved") if e.details.get("approvals") == 1]  # kept

    # a second reviewer's approval does not make a quorum with the withdrawn one
    async with web.api("admin") as admin:
        assert (await admin.post(f"/api/calls/{waiting.id}/decision", json=APPROVE)).status_code == 200
    assert (await web.store.calls.get_call(waiting.id)).status == CallStatus.PENDING

    # reactivated: she may sign in again, her withdrawn approval stays withdrawn
    async with await scim_client(web) as idp:
        on = await idp.patch(f"/scim/v2/Users/{alice}", json=switch(True))
        assert on.json()["active"] is True
    back, _ = await web.login("alice")
    await back.aclose()
    assert (await web.store.calls.get_call(waiting.id)).status == CallStatus.PENDING
    assert await web.store.people.user_by_email("dana@example.com") is not None
