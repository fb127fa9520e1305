"""Reviewers' outside identities: e-mail and Slack member ids, who may set them, and who a call is routed to."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from approvals.exceptions import Conflict, Forbidden, NotFound, UserError
from approvals.store import SYSTEM, Actor, Store
from approvals.store.models import AuditEventRow
from approvals.store.reviewer_identity import actor_for

pytestmark = pytest.mark.anyio


async def test_an_admin_sets_and_clears_contacts_and_each_change_is_audited(store: Store) -> None:
    await store.people.create_user("alice", "pw", role="reviewer", actor=SYSTEM)
    user = await store.people.set_user_contact(
        "alice", actor=SYSTEM, email="  Alice@Example.COM ", slack_user_id="U024BE7LH"
    )
    assert (user.email, user.slack_user_id) == ("alice@example.com", "U024BE7LH")
    assert (await store.people.user_by_email("ALICE@example.com")).username == "alice"  # type: ignore[union-attr]
    assert (await store.people.user_by_slack_id("U024BE7LH")).username == "alice"  # type: ignore[union-attr]
    await store.people.set_user_contact("alice", actor=SYSTEM, slack_user_id=None)
    assert await store.people.user_by_slack_id("U024BE7LH") is None
    assert (await store.people.get_user("alice")).email == "alice@example.com"  # untouched: not given
    async with store.db.read() as session:
        changes = (
            await session.scalars(select(AuditEventRow.details).where(AuditEventRow.action == "user.contact_changed"))
        ).all()
    assert changes == [{"email": "alice@example.com", "slack_user_id": "U024BE7LH"}, {"slack_user_id": None}]


async def test_an_unchanged_contact_writes_nothing(store: Store) -> None:
    await store.people.create_user("alice", "pw", role="reviewer", actor=SYSTEM)
    await store.people.set_user_contact("alice", actor=SYSTEM, email="a@example.com")
    await store.people.set_user_contact("alice", actor=SYSTEM, email="A@example.com")
    async with store.db.read() as session:
        count = len(
            (await session.scalars(select(AuditEventRow.id).where(AuditEventRow.action.like("user.contact%")))).all()
        )
    assert count == 1


async def test_a_user_sets_their_own_contact_but_not_anyone_elses(store: Store) -> None:
    await store.people.create_user("alice", "pw", role="reviewer", actor=SYSTEM)
    await store.people.create_user("bob", "pw", role="reviewer", actor=SYSTEM)
    alice = Actor(id="alice", role="reviewer")
    await store.people.set_user_contact("alice", actor=alice, slack_user_id="U0ALICE")
    with pytest.raises(Forbidden):
        await store.people.set_user_contact("bob", actor=alice, slack_user_id="U0BOB")
    assert (await store.people.get_user("bob")).slack_user_id is None


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("email", "not-an-address"),
        ("email", "a@b"),
        ("email", "two@@example.com"),
        ("email", "a b@example.com"),
        ("email", "x@example.com\r\nBcc: evil@example.com"),
        ("slack_user_id", "alice"),
        ("slack_user_id", "C024BE7LH"),
        ("slack_user_id", "U024\nBE7LH"),
    ],
)
async def test_malformed_contacts_are_refused_and_nothing_changes(store: Store, field: str, value: str) -> None:
    await store.people.create_user("alice", "pw", role="reviewer", actor=SYSTEM)
    with pytest.raises(UserError):
        await store.people.set_user_contact("alice", actor=SYSTEM, **{field: value})
    user = await store.people.get_user("alice")
    assert (user.email, user.slack_user_id) == (None, None)


async def test_an_address_or_slack_id_belongs_to_one_user(store: Store) -> None:
    await store.people.create_user("alice", "pw", role="reviewer", actor=SYSTEM)
    await store.people.create_user("bob", "pw", role="reviewer", actor=SYSTEM)
    await store.people.set_user_contact("alice", actor=SYSTEM, email="a@example.com", slack_user_id="U0ALICE")
    with pytest.raises(Conflict, match="Another user already has"):
        await store.people.set_user_contact("bob", actor=SYSTEM, email="A@example.com")
    with pytest.raises(Conflict):
        await store.people.set_user_contact("bob", actor=SYSTEM, slack_user_id="U0ALICE")
    with pytest.raises(NotFound):
        await store.people.set_user_contact("nobody", actor=SYSTEM, email="n@example.com")


async def test_reviewers_in_groups_are_the_enabled_reviewers_and_admins_of_those_groups(store: Store) -> None:
    await store.people.create_user("fin", "pw", role="reviewer", actor=SYSTEM, groups=["finance"])
    await store.people.create_user("ops", "pw", role="reviewer", actor=SYSTEM, groups=["ops"])
    await store.people.create_user("boss", "pw", role="admin", actor=SYSTEM, groups=["finance", "ops"])
    await store.people.create_user("watcher", "pw", role="viewer", actor=SYSTEM, groups=["finance"])
    await store.people.create_user("gone", "pw", role="reviewer", actor=SYSTEM, groups=["finance"])
    await store.people.update_user("gone", disabled=True, actor=SYSTEM)
    assert [u.username for u in await store.people.reviewers_in(["finance"])] == ["boss", "fin"]
    assert [u.username for u in await store.people.reviewers_in(["finance", "ops"])] == ["boss", "fin", "ops"]
    assert [u.username for u in await store.people.reviewers_in(None)] == ["boss", "fin", "ops"]  # routed to anyone
    assert await store.people.reviewers_in(["legal"]) == []


async def test_a_disabled_user_decides_as_nobody(store: Store) -> None:
    user = await store.people.create_user("alice", "pw", role="reviewer", actor=SYSTEM, groups=["finance"])
    assert actor_for(user) == Actor(id="alice", role="reviewer", groups=frozenset({"finance"}))
    await store.people.update_user("alice", disabled=True, actor=SYSTEM)
    assert actor_for(await store.people.get_user("alice")) is None
