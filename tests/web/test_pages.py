"""The reviewer's pages through the ASGI app, on SQLite and PostgreSQL: every page, form, role and error path.

Also the pure helpers behind them (`approvals_web.pages.forms`, `approvals_web.pages.views`): schema -> form fields and
back, summaries.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import MutableMapping
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, Literal

import anyio
import httpx
import pytest
from pydantic import BaseModel, Field

from approvals import Agent, LeaseLost, RunContext, Tool
from approvals.calls.verdicts import Approve, Deny
from approvals.engines.native.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart, UserPromptPart
from approvals.engines.native.models import TestModel
from approvals.store import Actor
from approvals.store.models import ToolCallRow
from approvals.store.queries import COUNT_CAP
from approvals_web.pages import audit as audit_page
from approvals_web.pages import forms, views
from approvals_web.pages import inbox as pages

from ..store.conftest import execute
from .conftest import WebApp

pytestmark = pytest.mark.anyio

SERVICE = Actor("svc", "reviewer")
HX = {"HX-Request": "true"}
XSS = "<script>alert(1)</script>"


class Address(BaseModel):
    """A postal address."""

    name: str = Field(description="Recipient's full name.")
    postcode: Annotated[str, Field(pattern=r"^\d{5}$")]
    city: str


def ship(
    ctx: RunContext[Any],
    order_id: str,
    address: Address,
    items: list[str],
    quantity: Annotated[int, Field(ge=1, le=10)] = 1,
    express: bool = False,
    carrier: Literal["dhl", "ups"] = "dhl",
    note: str | None = None,
) -> str:
    """Ship a replacement parcel.

    Args:
        order_id: The order being replaced.
        address: Where the parcel goes.
        items: What goes in the parcel.
        quantity: How many parcels.
        express: Pay for next-day delivery.
        carrier: Who delivers it.
        note: A note for the driver.
    """
    return f"shipped {quantity} to {address.city}"


SHIP_ARGS = {
    "order_id": "A-7",
    "address": {"name": "Ann Lee", "postcode": "10115", "city": "Berlin"},
    "items": ["mug"],
    "note": XSS,
}
ship_agent: Agent[Any] = Agent(
    TestModel([("ship", SHIP_ARGS)]), name="shipping", tools=[Tool(ship, requires_approval=True)]
)


def note(ctx: RunContext[Any], text: str) -> str:
    """Write a note <b>to the customer</b>."""
    return "noted"


xss_agent: Agent[Any] = Agent(
    TestModel(
        [
            ModelResponse(
                parts=[
                    TextPart(content=f"Thinking about {XSS}"),
                    ToolCallPart(tool_name="note", args={"text": f"{XSS} & <b>bold</b>"}, tool_call_id="n1"),
                ]
            )
        ]
    ),
    name="xss",
    tools=[Tool(note, requires_approval=True)],
)


async def paused(
    web: WebApp,
    tmp_path: Path,
    agent: str = "shop",
    prompt: str = "refund A-1, delete customer 7",
    actor: Actor = SERVICE,
) -> tuple[str, dict[str, ToolCallRow]]:
    """Start a run and let it pause; its calls by tool name."""
    registry = web.app.state.context.registry
    for extra in (ship_agent, xss_agent):
        if extra.name not in registry:
            registry.register(extra)
    run_id = await web.store.runs.start_run(agent, prompt, actor=actor, deps={"log": str(tmp_path / "log")})
    await web.app.state.context.service.resume_now(run_id)
    return run_id, {c.tool_name: c for c in await web.store.calls.run_calls(run_id)}


def card_of(page: str, call_id: str) -> str:
    """The HTML of one call's card."""
    start = page.index(f'id="call-{call_id}"')
    end = page.find("</article>", start)
    return page[start:end]


def is_fragment(response: httpx.Response) -> bool:
    return "<html" not in response.text and "<body" not in response.text


# --- logging in and roles ----------------------------------------------------------------


@pytest.mark.parametrize(
    "path", ["/", "/calls/abc", "/runs", "/runs/abc", "/audit", "/audit/verify", "/events/inbox", "/events/runs/abc"]
)
async def test_anonymous_visitors_are_sent_to_the_login_page(web: WebApp, path: str) -> None:
    async with web.client() as client:
        response = await client.get(path + "?status=pending")
        assert response.status_code == 303
        assert response.headers["location"] == f"/login?next={path}?status=pending"
        htmx = await client.get(path, headers=HX)
        assert htmx.status_code == 204 and htmx.headers["HX-Redirect"] == f"/login?next={path}"


async def test_viewers_read_everything_but_get_no_buttons_and_their_posts_are_refused(
    web: WebApp, tmp_path: Path
) -> None:
    run_id, calls = await paused(web, tmp_path)
    refund = calls["refund"]
    client, csrf = await web.login("victor")
    inbox = await client.get("/")
    assert inbox.status_code == 200 and "refund" in inbox.text
    assert 'data-action="approve"' not in inbox.text
    detail = await client.get(f"/calls/{refund.id}")
    assert detail.status_code == 200
    assert "/approve" not in detail.text and "Edit &amp; approve" not in detail.text
    assert "deciding needs the reviewer role" in detail.text
    run_page = await client.get(f"/runs/{run_id}")
    assert run_page.status_code == 200 and "Cancel this run" not in run_page.text
    for path, data in [
        (f"/calls/{refund.id}/approve", {"args_digest": refund.args_digest}),
        (f"/calls/{refund.id}/deny", {"reason": "no"}),
        (f"/calls/{refund.id}/edit", {"args_digest": refund.args_digest, "args.amount": "1"}),
        (f"/calls/{refund.id}/answer", {"content": "done"}),
        (f"/runs/{run_id}/cancel", {}),
    ]:
        response = await client.post(path, data={**data, "csrf_token": csrf})
        assert response.status_code == 403, path
        assert "reviewer role" in response.text or "admin role" in response.text
    assert (await web.store.calls.get_call(refund.id)).status == "pending"
    assert await web.store.calls.decisions_for(refund.id) == []


async def test_posts_without_the_csrf_token_are_refused(web: WebApp, tmp_path: Path) -> None:
    run_id, calls = await paused(web, tmp_path)
    refund = calls["refund"]
    client, csrf = await web.login("alice")
    admin, _ = await web.login("ada")
    for who, path in [(client, f"/calls/{refund.id}/approve"), (admin, f"/runs/{run_id}/cancel")]:
        missing = await who.post(path, data={"args_digest": refund.args_digest})
        assert missing.status_code == 403 and "CSRF" in missing.text
        wrong = await who.post(path, data={"args_digest": refund.args_digest, "csrf_token": "forged"})
        assert wrong.status_code == 403
    assert (await web.store.calls.get_call(refund.id)).status == "pending"
    assert (await web.store.runs.get_run(run_id)).status == "awaiting_approval"
    # the header htmx sends works as well as the form field
    ok = await client.post(
        f"/calls/{refund.id}/approve", data={"args_digest": refund.args_digest}, headers={"x-csrftoken": csrf}
    )
    assert ok.status_code == 303


# --- the inbox -----------------------------------------------------------------------------


async def test_inbox_lists_pending_calls_oldest_first_with_summary_age_and_counts(web: WebApp, tmp_path: Path) -> None:
    await paused(web, tmp_path, agent="mailer")
    _, calls = await paused(web, tmp_path)
    client, _ = await web.login("alice")
    response = await client.get("/")
    assert response.status_code == 200
    page = response.text
    rows = re.findall(r'<tr id="row-([0-9a-f]+)"', page)
    assert len(rows) == 3
    tools = re.findall(r'data-action="open"><code>(\w+)</code>', page)
    assert tools[0] == "send_email" and set(tools[1:]) == {"refund", "delete_customer"}, "oldest first"
    assert "to=ann@example.com, body=Hello" in page
    assert "order_id=A-1, amount=450" in page
    assert re.search(r'pending <span class="count">3</span>', page)
    # the mailer's call expires in 60 s, well inside the "expiring soon" window; the shop's never expires
    assert re.search(r'<tr id="row-[0-9a-f]+"[^>]*class="expiring"', page)
    assert page.count('class="expiring"') == 1
    assert re.search(r'<span class="badge warn" title="Expires soon: decide first">\d+s</span>', page)
    await web.store.calls.decide(calls["refund"].id, Approve(), actor=Actor("bob", "reviewer"))
    after = (await client.get("/")).text
    assert len(re.findall(r'<tr id="row-', after)) == 2
    assert re.search(r'approved <span class="count">1</span>', after)


async def test_inbox_filters_by_agent_tool_status_and_argument_text(web: WebApp, tmp_path: Path) -> None:
    await paused(web, tmp_path, agent="mailer")
    _, calls = await paused(web, tmp_path)
    await web.store.calls.decide(calls["refund"].id, Approve(), actor=Actor("bob", "reviewer"))
    client, _ = await web.login("alice")

    async def tools_listed(query: str) -> list[str]:
        page = (await client.get("/?" + query)).text
        return re.findall(r'data-action="open"><code>(\w+)</code>', page)

    assert await tools_listed("") == ["send_email", "delete_customer"]
    assert await tools_listed("agent=mailer") == ["send_email"]
    assert await tools_listed("tool=delete_customer") == ["delete_customer"]
    assert await tools_listed("status=approved") == ["refund"]
    assert sorted(await tools_listed("status=all")) == ["delete_customer", "refund", "send_email"]
    assert await tools_listed("q=example.com") == ["send_email"]
    assert await tools_listed("q=100%25") == []  # % is matched literally
    assert await tools_listed("q=nothing-like-this") == []


async def test_inbox_pages_with_a_cursor(web: WebApp, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pages, "PAGE_SIZE", 2)
    await paused(web, tmp_path, agent="mailer")
    await paused(web, tmp_path)
    client, _ = await web.login("alice")
    first = (await client.get("/?agent=")).text
    assert len(re.findall(r'<tr id="row-', first)) == 2
    next_url = html.unescape(re.search(r'<a href="(/\?[^"]*after=[^"]+)"', first).group(1))  # type: ignore[union-attr]
    second = (await client.get(next_url)).text
    rows = re.findall(r'<tr id="row-([0-9a-f]+)"', second)
    assert len(rows) == 1 and rows[0] not in first
    assert "Next page" not in second and "First page" in second
    bad = await client.get("/?after=not-a-cursor")
    assert bad.status_code == 400 and "Invalid page cursor" in bad.text


async def test_htmx_inbox_requests_get_the_fragment(web: WebApp, tmp_path: Path) -> None:
    await paused(web, tmp_path)
    client, _ = await web.login("alice")
    full = await client.get("/?tool=refund")
    assert "<html" in full.text and "HX-Request" in full.headers["vary"]
    fragment = await client.get("/?tool=refund", headers=HX)
    assert fragment.status_code == 200 and is_fragment(fragment)
    assert fragment.text.strip().startswith('<section id="inbox" hx-get="/?status=pending&amp;tool=refund"')
    assert 'hx-trigger="sse:pending' in fragment.text
    assert "HX-Request" in fragment.headers["vary"]
    # htmx restoring history after a cache miss needs the whole page
    restore = await client.get("/", headers={**HX, "HX-History-Restore-Request": "true"})
    assert "<html" in restore.text


async def test_inbox_rows_approve_and_deny_in_place(web: WebApp, tmp_path: Path) -> None:
    _, calls = await paused(web, tmp_path)
    client, csrf = await web.login("alice")
    refund, delete = calls["refund"], calls["delete_customer"]
    approved = await client.post(
        f"/calls/{refund.id}/approve",
        data={"args_digest": refund.args_digest, "view": "row", "csrf_token": csrf},
        headers=HX,
    )
    assert approved.status_code == 200 and is_fragment(approved)
    assert approved.text.strip().startswith(f'<tr id="row-{refund.id}"')
    assert "approved</span>" in approved.text and "by alice" in approved.text
    denied = await client.post(
        f"/calls/{delete.id}/deny", data={"reason": "needs a ticket", "view": "row", "csrf_token": csrf}, headers=HX
    )
    assert denied.status_code == 200 and "denied</span>" in denied.text
    assert (await web.store.calls.get_call(delete.id)).denial_reason == "needs a ticket"
    plain = await client.post(
        f"/calls/{refund.id}/approve", data={"args_digest": refund.args_digest, "view": "row", "csrf_token": csrf}
    )
    assert plain.status_code == 409  # already decided; without htmx the call page explains
    assert "You already decided this call" in plain.text


# --- the call page -------------------------------------------------------------------------


async def test_call_page_shows_fields_from_the_schema_the_raw_json_and_the_conversation(
    web: WebApp, tmp_path: Path
) -> None:
    _, calls = await paused(web, tmp_path, agent="shipping", prompt="Ann's mug arrived broken")
    call = calls["ship"]
    client, _ = await web.login("alice")
    response = await client.get(f"/calls/{call.id}")
    assert response.status_code == 200
    page = response.text
    assert "Ship a replacement parcel." in page  # the tool's description
    for label, description in [
        ("order_id", "The order being replaced."),
        ("items", "What goes in the parcel."),
        ("quantity", "How many parcels."),
        ("name", "Recipient&#39;s full name."),  # from $defs, through $ref
    ]:
        assert re.search(rf'<span class="arg-name">{label}</span>.*?{re.escape(description)}', page, re.S), label
    assert "object (Address)" in page and "list of string" in page and "string or null" in page
    assert "≥ 1 · ≤ 10 · default 1" in page  # quantity's constraints
    assert "matches ^\\d{5}$" in page  # the postcode pattern
    assert "one of &#34;dhl&#34;, &#34;ups&#34;" in page
    assert "<summary>Raw JSON</summary>" in page and "&#34;postcode&#34;: &#34;10115&#34;" in page
    # the edit form: nested fields by dotted name, JSON for lists, a select for the enum, a checkbox for the flag
    assert 'name="args.address.postcode" value="10115"' in page
    assert re.search(r'<textarea id="[^"]+-items" name="args.items"[^>]*>\[\s*&#34;mug&#34;\s*\]</textarea>', page)
    assert '<option value="&#34;ups&#34;">ups</option>' in page
    assert '<input type="hidden" name="args.express" value="false">' in page
    # the conversation so far
    assert "Ann&#39;s mug arrived broken" in page
    assert "Model calls <code>ship</code>" in page and "← this call" in page


async def test_a_steps_calls_are_shown_together_and_decided_one_by_one(web: WebApp, tmp_path: Path) -> None:
    _, calls = await paused(web, tmp_path)
    client, csrf = await web.login("alice")
    page = (await client.get(f"/calls/{calls['refund'].id}")).text
    assert "The model made 2 calls in this step" in page
    assert page.index(f'id="call-{calls["refund"].id}"') < page.index(f'id="call-{calls["delete_customer"].id}"')
    assert "<code>lookup_order</code> returned" in page
    response = await client.post(
        f"/calls/{calls['delete_customer'].id}/deny", data={"reason": "no", "csrf_token": csrf}, headers=HX
    )
    assert response.status_code == 200
    assert (await web.store.calls.get_call(calls["refund"].id)).status == "pending"


async def test_approve_without_htmx_redirects_to_the_call(web: WebApp, tmp_path: Path) -> None:
    _, calls = await paused(web, tmp_path)
    refund = calls["refund"]
    client, csrf = await web.login("alice")
    response = await client.post(
        f"/calls/{refund.id}/approve", data={"args_digest": refund.args_digest, "csrf_token": csrf}
    )
    assert response.status_code == 303 and response.headers["location"] == f"/calls/{refund.id}"
    assert (await web.store.calls.get_call(refund.id)).status == "approved"
    page = (await client.get(response.headers["location"])).text
    assert "<strong>Approved</strong> by <strong>alice</strong>" in card_of(page, refund.id)
    missing_digest = await client.post(f"/calls/{calls['delete_customer'].id}/approve", data={"csrf_token": csrf})
    assert missing_digest.status_code == 422
    assert await web.store.calls.decisions_for(calls["delete_customer"].id) == []


async def test_approve_with_htmx_returns_the_decided_card(web: WebApp, tmp_path: Path) -> None:
    _, calls = await paused(web, tmp_path)
    refund = calls["refund"]
    client, csrf = await web.login("alice")
    response = await client.post(
        f"/calls/{refund.id}/approve", data={"args_digest": refund.args_digest, "csrf_token": csrf}, headers=HX
    )
    assert response.status_code == 200 and is_fragment(response)
    assert "HX-Request" in response.headers["vary"]
    assert response.text.strip().startswith(f'<article class="card call-card" id="call-{refund.id}"')
    assert 'hx-target="this" hx-swap="outerHTML"' in response.text
    assert "<strong>Approved</strong> by <strong>alice</strong>" in response.text
    assert "/approve" not in response.text  # no more buttons


async def test_approving_a_call_someone_else_decided_shows_who_and_applies_nothing(web: WebApp, tmp_path: Path) -> None:
    _, calls = await paused(web, tmp_path)
    refund = calls["refund"]
    alice, alice_csrf = await web.login("alice")
    bob, bob_csrf = await web.login("bob")
    page = (await alice.get(f"/calls/{refund.id}")).text
    digest = re.search(r'name="args_digest" value="([0-9a-f]+)"', card_of(page, refund.id)).group(1)  # type: ignore[union-attr]
    first = await bob.post(f"/calls/{refund.id}/deny", data={"reason": "too much", "csrf_token": bob_csrf}, headers=HX)
    assert first.status_code == 200
    late = await alice.post(
        f"/calls/{refund.id}/approve", data={"args_digest": digest, "csrf_token": alice_csrf}, headers=HX
    )
    assert late.status_code == 409 and is_fragment(late)
    assert "bob decided this call first (denied); your decision was not applied." in late.text
    assert "<strong>Denied</strong> by <strong>bob</strong>" in late.text
    assert [d.actor for d in await web.store.calls.decisions_for(refund.id)] == ["bob"]
    assert (await web.store.calls.get_call(refund.id)).status == "denied"


async def test_approving_arguments_that_changed_meanwhile_is_refused(web: WebApp, tmp_path: Path) -> None:
    _, calls = await paused(web, tmp_path)
    delete = calls["delete_customer"]  # needs two approvals, so it stays open after an edit
    alice, alice_csrf = await web.login("alice")
    bob, bob_csrf = await web.login("bob")
    edited = await bob.post(
        f"/calls/{delete.id}/edit",
        data={"args_digest": delete.args_digest, "args.customer_id": "8", "csrf_token": bob_csrf},
        headers=HX,
    )
    assert edited.status_code == 200 and "1 of 2 approvals" in edited.text
    stale = await alice.post(
        f"/calls/{delete.id}/approve", data={"args_digest": delete.args_digest, "csrf_token": alice_csrf}, headers=HX
    )
    assert stale.status_code == 409
    assert "changed since you loaded them" in stale.text
    assert '<div class="value">8</div>' in stale.text  # the card now shows the new arguments
    assert [d.actor for d in await web.store.calls.decisions_for(delete.id)] == ["bob"]
    fresh = re.search(r'name="args_digest" value="([0-9a-f]+)"', stale.text).group(1)  # type: ignore[union-attr]
    ok = await alice.post(
        f"/calls/{delete.id}/approve", data={"args_digest": fresh, "csrf_token": alice_csrf}, headers=HX
    )
    assert ok.status_code == 200 and "<strong>Approved</strong> by <strong>alice</strong>" in ok.text
    assert (await web.store.calls.get_call(delete.id)).override_args == {"customer_id": 8}


async def test_an_invalid_edit_shows_field_errors_in_place_and_saves_nothing(web: WebApp, tmp_path: Path) -> None:
    _, calls = await paused(web, tmp_path)
    refund = calls["refund"]
    client, csrf = await web.login("alice")
    form = {"args_digest": refund.args_digest, "args.order_id": "A-1", "args.amount": "abc", "csrf_token": csrf}
    response = await client.post(f"/calls/{refund.id}/edit", data=form, headers=HX)
    assert response.status_code == 422 and is_fragment(response)
    error = re.search(
        r'name="args.amount" value="abc"[^>]*aria-invalid="true".*?<p class="field-error"[^>]*>([^<]+)</p>',
        response.text,
        re.S,
    )
    assert error is not None and "valid decimal" in error.group(1)
    assert '<details class="action" open>\n          <summary>Edit &amp; approve' in response.text
    call = await web.store.calls.get_call(refund.id)
    assert call.status == "pending" and call.override_args is None
    assert await web.store.calls.decisions_for(refund.id) == []
    # without JavaScript the whole page comes back with the same errors
    plain = await client.post(f"/calls/{refund.id}/edit", data=form)
    assert plain.status_code == 422 and "<html" in plain.text and "valid decimal" in plain.text


async def test_a_valid_edit_is_typed_by_the_schema_and_approved(web: WebApp, tmp_path: Path) -> None:
    run_id, calls = await paused(web, tmp_path, agent="shipping")
    call = calls["ship"]
    client, csrf = await web.login("alice")
    form: dict[str, Any] = {
        "csrf_token": csrf,
        "args_digest": call.args_digest,
        "args.order_id": "A-7",
        "args.address.name": "Ann Lee",
        "args.address.postcode": "10117",
        "args.address.city": "Berlin",
        "args.items": '["mug", "saucer"]',
        "args.quantity": "2",
        "args.express": ["false", "true"],  # a ticked checkbox after its hidden "false"
        "args.carrier": '"ups"',
        "args.note": "",
    }
    response = await client.post(f"/calls/{call.id}/edit", data=form, headers=HX)
    assert response.status_code == 200, response.text
    assert "<strong>Edited and approved</strong> by <strong>alice</strong>" in response.text
    edited = await web.store.calls.get_call(call.id)
    assert edited.override_args == {
        "order_id": "A-7",
        "address": {"name": "Ann Lee", "postcode": "10117", "city": "Berlin"},
        "items": ["mug", "saucer"],
        "quantity": 2,
        "express": True,
        "carrier": "ups",
        "note": None,
    }
    await web.app.state.context.service.resume_now(run_id)
    assert (await web.store.runs.get_run(run_id)).output.startswith('Done. ship returned "shipped 2 to Berlin"')


async def test_nested_and_json_errors_land_on_their_fields(web: WebApp, tmp_path: Path) -> None:
    _, calls = await paused(web, tmp_path, agent="shipping")
    call = calls["ship"]
    client, csrf = await web.login("alice")
    form = {
        "csrf_token": csrf,
        "args_digest": call.args_digest,
        "args.order_id": "A-7",
        "args.address.name": "Ann",
        "args.address.postcode": "abc",
        "args.address.city": "Berlin",
        "args.items": "[mug",
        "args.quantity": "11",
        "args.carrier": '"dhl"',
    }
    response = await client.post(f"/calls/{call.id}/edit", data=form, headers=HX)
    assert response.status_code == 422
    errors = dict(
        re.findall(r'<p class="field-error" id="edit-[0-9a-f]+-([\w.]+)-error" role="alert">([^<]+)</p>', response.text)
    )
    assert set(errors) == {"address.postcode", "items", "quantity"}
    assert "pattern" in html.unescape(errors["address.postcode"])
    assert errors["items"].startswith("Not valid JSON")
    assert "less than or equal to 10" in errors["quantity"]
    assert 'name="args.items" rows="6" aria-invalid="true"' in response.text and "[mug</textarea>" in response.text
    assert await web.store.calls.decisions_for(call.id) == []


async def test_deny_needs_a_reason_and_the_model_reads_it(web: WebApp, tmp_path: Path) -> None:
    run_id, calls = await paused(web, tmp_path, agent="mailer")
    call = calls["send_email"]
    client, csrf = await web.login("alice")
    empty = await client.post(f"/calls/{call.id}/deny", data={"reason": "  ", "csrf_token": csrf}, headers=HX)
    assert empty.status_code == 422 and "Write why you deny this call." in empty.text
    assert await web.store.calls.decisions_for(call.id) == []
    denied = await client.post(
        f"/calls/{call.id}/deny", data={"reason": "Ann asked not to be emailed", "csrf_token": csrf}
    )
    assert denied.status_code == 303
    await web.app.state.context.service.resume_now(run_id)
    page = (await client.get(f"/runs/{run_id}")).text
    assert '<span class="badge ok">completed</span>' in page
    assert (
        '<code>send_email</code> was denied; the model was told</div><div class="text">Ann asked not to be emailed'
        in page
    )
    assert "send_email was denied (Ann asked not to be emailed), so I did not do it." in page  # the model's reply
    assert "<strong>alice</strong> denied: “Ann asked not to be emailed”" in page


async def test_answer_gives_the_model_a_result_without_running_the_tool(web: WebApp, tmp_path: Path) -> None:
    run_id, calls = await paused(web, tmp_path, agent="mailer")
    call = calls["send_email"]
    client, csrf = await web.login("alice")
    bad = await client.post(
        f"/calls/{call.id}/answer", data={"content": "{oops", "format": "json", "csrf_token": csrf}, headers=HX
    )
    assert bad.status_code == 422 and "Not valid JSON" in bad.text and "{oops</textarea>" in bad.text
    good = await client.post(
        f"/calls/{call.id}/answer",
        data={"content": '{"sent": false}', "format": "json", "csrf_token": csrf},
        headers=HX,
    )
    assert good.status_code == 200 and "<strong>Answered</strong> by <strong>alice</strong>" in good.text
    assert (await web.store.calls.get_call(call.id)).answer == {"sent": False}
    await web.app.state.context.service.resume_now(run_id)
    assert not (tmp_path / "log").exists()  # the tool never ran
    page = (await client.get(f"/runs/{run_id}")).text
    assert "A reviewer answered for <code>send_email</code>" in page


async def test_quorum_and_own_runs_are_explained_on_the_card(web: WebApp, tmp_path: Path) -> None:
    _, calls = await paused(web, tmp_path)
    delete = calls["delete_customer"]
    alice, alice_csrf = await web.login("alice")
    first = await alice.post(
        f"/calls/{delete.id}/approve", data={"args_digest": delete.args_digest, "csrf_token": alice_csrf}, headers=HX
    )
    assert first.status_code == 200
    assert "1 of 2 approvals" in first.text and "You approved these arguments; 1 more approval(s) needed." in first.text
    assert "/approve" not in first.text
    bob, bob_csrf = await web.login("bob")
    second = await bob.post(
        f"/calls/{delete.id}/approve", data={"args_digest": delete.args_digest, "csrf_token": bob_csrf}, headers=HX
    )
    assert "<strong>Approved</strong> by <strong>bob</strong>" in second.text
    assert second.text.count('class="decision"') == 2
    # a run alice started herself (so she asked its calls): she may deny its calls but not approve them
    _, own = await paused(web, tmp_path, agent="mailer", actor=Actor("alice", "reviewer"))
    page = (await alice.get(f"/calls/{own['send_email'].id}")).text
    assert "You asked for this call, so another reviewer must approve it." in page
    assert f"/calls/{own['send_email'].id}/approve" not in page and "Deny…" in page
    forced = await alice.post(
        f"/calls/{own['send_email'].id}/approve",
        data={"args_digest": own["send_email"].args_digest, "csrf_token": alice_csrf},
        headers=HX,
    )
    assert forced.status_code == 403 and "another reviewer must approve it" in forced.text and is_fragment(forced)


async def test_the_approver_denies_a_quorum_call_and_settles_an_unknown_outcome_on_the_card(
    web: WebApp, tmp_path: Path
) -> None:
    run_id, calls = await paused(web, tmp_path)
    refund, delete = calls["refund"], calls["delete_customer"]
    alice, csrf = await web.login("alice")
    await alice.post(f"/calls/{delete.id}/approve", data={"args_digest": delete.args_digest, "csrf_token": csrf})
    denied = await alice.post(f"/calls/{delete.id}/deny", data={"reason": "Wrong one.", "csrf_token": csrf}, headers=HX)
    assert denied.status_code == 200, denied.text
    assert "<strong>Denied</strong> by <strong>alice</strong>" in denied.text
    await alice.post(f"/calls/{refund.id}/approve", data={"args_digest": refund.args_digest, "csrf_token": csrf})
    # the worker that claims the run dies before the refund's outcome is stored
    assert await web.store.runs.claim("dead-worker", run_id=run_id, lease_seconds=0) is not None
    assert await web.store.runs.claim("rescuer", run_id=run_id) is None
    card = card_of((await alice.get(f"/calls/{refund.id}")).text, refund.id)
    assert "it may or may not have happened" in card and f"/calls/{refund.id}/approve" in card

    again = await alice.post(
        f"/calls/{refund.id}/approve", data={"args_digest": refund.args_digest, "csrf_token": csrf}, headers=HX
    )

    assert again.status_code == 200, again.text
    assert "<strong>Approved</strong> by <strong>alice</strong>" in again.text
    assert (await web.store.runs.get_run(run_id)).status == "ready"


async def test_unknown_calls_and_runs_are_404_pages(web: WebApp) -> None:
    client, _ = await web.login("alice")
    for path in ("/calls/nope", "/runs/nope"):
        response = await client.get(path)
        assert response.status_code == 404 and "<html" in response.text and "No " in response.text


# --- runs ----------------------------------------------------------------------------------


async def test_runs_list_and_a_completed_runs_timeline(web: WebApp, tmp_path: Path) -> None:
    run_id, calls = await paused(web, tmp_path)
    client, csrf = await web.login("alice")
    listing = await client.get("/runs")
    assert listing.status_code == 200 and f"/runs/{run_id}" in listing.text and "awaiting approval" in listing.text
    assert f"/runs/{run_id}" not in (await client.get("/runs?status=completed")).text
    running = (await client.get(f"/runs/{run_id}")).text
    assert "Waiting for a person" in running and f"/calls/{calls['refund'].id}" in running
    assert 'sse-connect="/events/runs/' in running
    await client.post(
        f"/calls/{calls['refund'].id}/approve", data={"args_digest": calls["refund"].args_digest, "csrf_token": csrf}
    )
    await client.post(f"/calls/{calls['delete_customer'].id}/deny", data={"reason": "keep them", "csrf_token": csrf})
    await web.app.state.context.service.resume_now(run_id)
    page = (await client.get(f"/runs/{run_id}")).text
    assert '<span class="badge ok">completed</span>' in page
    assert "<h2>Output</h2>" in page and "refund returned &#34;refunded 450&#34;" in page
    for text in ["<div class=\"who\">User</div><div class=\"text\">refund A-1, delete customer 7",
                 "Model calls <code>lookup_order</code>", "<code>refund</code> returned",
                 "<code>delete_customer</code> was denied", "<strong>alice</strong> approved"]:  # fmt: skip
        assert text in page, text
    fragment = await client.get(f"/runs/{run_id}", headers=HX)
    assert fragment.text.strip().startswith('<section id="run"') and is_fragment(fragment)


async def test_admins_cancel_runs_and_others_cannot(web: WebApp, tmp_path: Path) -> None:
    run_id, calls = await paused(web, tmp_path)
    alice, alice_csrf = await web.login("alice")
    assert (await alice.post(f"/runs/{run_id}/cancel", data={"csrf_token": alice_csrf})).status_code == 403
    admin, csrf = await web.login("ada")
    page = (await admin.get(f"/runs/{run_id}")).text
    assert "Cancel this run" in page
    response = await admin.post(f"/runs/{run_id}/cancel", data={"reason": "duplicate", "csrf_token": csrf})
    assert response.status_code == 303 and response.headers["location"] == f"/runs/{run_id}"
    assert (await web.store.runs.get_run(run_id)).status == "cancelled"
    assert (await web.store.calls.get_call(calls["refund"].id)).status == "cancelled"
    again = await admin.post(f"/runs/{run_id}/cancel", data={"csrf_token": csrf}, headers=HX)
    assert again.status_code == 409 and "already ended (cancelled)" in again.text and is_fragment(again)
    shown = (await admin.get(f"/runs/{run_id}")).text
    assert "Reason for cancelling" in shown and "duplicate" in shown and "Cancel this run" not in shown


async def test_admins_cancel_a_run_a_worker_holds(web: WebApp, tmp_path: Path) -> None:
    run_id, calls = await paused(web, tmp_path)
    await web.store.calls.decide(calls["refund"].id, Approve(), actor=Actor("bob", "reviewer"))
    await web.store.calls.decide(calls["delete_customer"].id, Deny(reason="no"), actor=Actor("bob", "reviewer"))
    assert await web.store.runs.claim("w1", run_id=run_id) is not None  # the refund is executing
    admin, csrf = await web.login("ada")
    assert "Cancel this run" in (await admin.get(f"/runs/{run_id}")).text

    response = await admin.post(f"/runs/{run_id}/cancel", data={"reason": "duplicate", "csrf_token": csrf})

    assert response.status_code == 303, response.text
    assert (await web.store.runs.get_run(run_id)).status == "cancelled"
    assert (await web.store.calls.get_call(calls["refund"].id)).status == "outcome_unknown"
    with pytest.raises(LeaseLost):  # the worker's next write
        await web.store.runs.append_step(run_id, "w1", [ModelRequest(parts=[UserPromptPart(content="late")])])
    assert (await web.store.runs.get_run(run_id)).status == "cancelled"


# --- audit log -----------------------------------------------------------------------------


async def test_audit_log_filters_exports_and_chain_badge(web: WebApp, tmp_path: Path) -> None:
    _, calls = await paused(web, tmp_path)
    client, csrf = await web.login("alice")
    await client.post(f"/calls/{calls['refund'].id}/deny", data={"reason": "no", "csrf_token": csrf})
    page = await client.get("/audit")
    assert page.status_code == 200
    assert "<code>call.denied</code>" in page.text and "<code>run.started</code>" in page.text
    assert 'hx-get="/audit/verify" hx-trigger="load"' in page.text
    filtered = (await client.get("/audit?actor=alice&action=call.denied&tool=refund&agent=shop")).text
    assert filtered.count("<code>call.denied</code>") == 1 and "<code>run.started</code>" not in filtered
    export = re.search(r'href="(/api/audit/export\?[^"]*format=jsonl)"', filtered)
    assert export is not None
    assert "agent=shop" in export.group(1) and "tool=refund" in export.group(1)
    exported = await client.get(html.unescape(export.group(1)))  # the link the page offers applies its filters
    lines = [json.loads(line) for line in exported.text.splitlines()]
    assert [(e["action"], e["actor"], e["tool"]) for e in lines] == [("call.denied", "alice", "refund")]
    assert "<code>run.started</code>" not in (await client.get("/audit?since=2999-01-01T00:00")).text
    assert "<code>run.started</code>" in (await client.get("/audit?until=2999-01-01T00:00")).text
    bad_time = await client.get("/audit?since=yesterday")
    assert bad_time.status_code == 400 and "since must be a date and time" in bad_time.text
    badge = await client.get("/audit/verify", headers=HX)
    assert badge.status_code == 200 and is_fragment(badge) and "chain verified" in badge.text
    await execute(web.store, "UPDATE audit_events SET actor = 'mallory' WHERE action = 'call.denied'")
    broken = await client.get("/audit/verify")
    assert "<html" in broken.text and "chain broken at event" in broken.text


async def test_audit_pages_with_a_cursor(web: WebApp, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(audit_page, "PAGE_SIZE", 3)
    await paused(web, tmp_path)
    client, _ = await web.login("alice")
    first = (await client.get("/audit")).text
    ids = re.findall(r'id="event-(\d+)"', first)
    assert len(ids) == 3 and ids == sorted(ids, key=int, reverse=True)
    older = html.unescape(re.search(r'<a href="(/audit\?after=[^"]+)" rel="next">Older', first).group(1))  # type: ignore[union-attr]
    second = re.findall(r'id="event-(\d+)"', (await client.get(older)).text)
    assert second and int(second[0]) < int(ids[-1])


# --- escaping ------------------------------------------------------------------------------


async def test_everything_shown_is_escaped(web: WebApp, tmp_path: Path) -> None:
    run_id, calls = await paused(web, tmp_path, agent="xss", prompt=f"please {XSS}")
    call = calls["note"]
    client, csrf = await web.login("alice")
    escaped = html.escape(XSS, quote=True)
    pages_to_check = {
        "inbox": (await client.get("/")).text,
        "search": (await client.get("/?q=" + XSS)).text,
        "detail": (await client.get(f"/calls/{call.id}")).text,
        "run": (await client.get(f"/runs/{run_id}")).text,
        "audit": (await client.get("/audit")).text,
    }
    for name, page in pages_to_check.items():
        assert XSS not in page, name
        assert "<b>bold</b>" not in page and "<b>to the customer</b>" not in page, name
        assert escaped in page or "&lt;script&gt;" in page, name
    detail = pages_to_check["detail"]
    assert "Write a note &lt;b&gt;to the customer&lt;/b&gt;." in detail  # the tool's description
    assert "Thinking about &lt;script&gt;alert(1)&lt;/script&gt;" in detail  # the model's text
    assert "please &lt;script&gt;alert(1)&lt;/script&gt;" in detail  # the user's prompt
    denied = await client.post(f"/calls/{call.id}/deny", data={"reason": XSS, "csrf_token": csrf}, headers=HX)
    assert XSS not in denied.text and "&lt;script&gt;alert(1)&lt;/script&gt;" in denied.text


# --- live updates --------------------------------------------------------------------------


async def test_the_inbox_event_stream_announces_new_pending_calls(web: WebApp, tmp_path: Path) -> None:
    client, _ = await web.login("alice")
    cookie = "; ".join(f"{name}={value}" for name, value in client.cookies.items())
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": "/events/inbox",
        "raw_path": b"/events/inbox",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"testserver"), (b"cookie", cookie.encode()), (b"accept", b"text/event-stream")],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }
    chunks, received = anyio.create_memory_object_stream[bytes](100)
    started: dict[str, Any] = {}
    gone = anyio.Event()

    async def receive() -> MutableMapping[str, Any]:
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            started.update(message)
        elif message["type"] == "http.response.body":
            await chunks.send(message.get("body", b""))

    body = b""

    async def read_until(marker: bytes) -> None:
        nonlocal body
        with anyio.fail_after(10):
            while marker not in body:
                body += await received.receive()

    with chunks, received:
        async with anyio.create_task_group() as group:
            group.start_soon(web.app, scope, receive, send)
            await read_until(b"event: pending\r\ndata: *")  # at once: refresh what changed before subscribing
            assert started["status"] == 200
            assert dict(started["headers"])[b"content-type"].startswith(b"text/event-stream")
            run_id, _ = await paused(web, tmp_path, agent="mailer")
            await read_until(f"event: pending\r\ndata: {run_id}".encode())
            gone.set()


async def test_the_page_hub_fans_out_one_listener_to_many_streams(web: WebApp, tmp_path: Path) -> None:
    hub = web.app.state.events
    async with hub.subscribe() as first, hub.subscribe() as second:
        run_id, _ = await paused(web, tmp_path, agent="mailer")
        with anyio.fail_after(10):
            for stream in (first, second):
                seen = [await stream.receive()]
                while ("approvals_pending", run_id) not in seen:
                    seen.append(await stream.receive())


# --- approvals_web.pages.forms and .views, the pure helpers -------------------------


def test_form_strings_become_json_values_typed_by_the_schema() -> None:
    schema = Tool(ship).tool_def.parameters_json_schema
    form = {
        "args.order_id": " A-7 ",
        "args.address.name": "Ann",
        "args.address.postcode": "10115",
        "args.address.city": "",
        "args.items": '["a"]',
        "args.quantity": "3",
        "args.express": "true",
        "args.carrier": '"ups"',
        "args.note": "",
    }
    args, problems = forms.args_from_form(schema, form)
    assert problems == []
    assert args == {
        "order_id": " A-7 ",
        "address": {"name": "Ann", "postcode": "10115", "city": ""},
        "items": ["a"],
        "quantity": 3,
        "express": True,
        "carrier": "ups",
        "note": None,
    }
    # an emptied optional number falls back to its default; text that is no number goes to the validator
    args, _ = forms.args_from_form(schema, {**form, "args.quantity": ""})
    assert "quantity" not in args
    args, _ = forms.args_from_form(schema, {**form, "args.quantity": "three"})
    assert args["quantity"] == "three"
    _, problems = forms.args_from_form(schema, {**form, "args.items": "[1,"})
    assert problems and problems[0][0] == "items" and problems[0][1].startswith("Not valid JSON")


def test_an_edit_of_a_kwargs_tool_keeps_its_other_arguments_typed_by_their_schema() -> None:
    """A `**counts: int` tool's extra keys get fields of their own, and come back from the form (they were dropped)."""

    def recount(shelf: str, **counts: int) -> str:
        return shelf

    schema = Tool(recount).tool_def.parameters_json_schema
    fields, _ = forms.arg_fields(schema, {"shelf": "B2", "cups": 4, "saucers": 6})
    assert [(f.label, f.kind, f.input_value) for f in fields] == [
        ("shelf", "string", "B2"),
        ("cups", "integer", "4"),
        ("saucers", "integer", "6"),
    ]
    form = {"args.shelf": "B2", "args.cups": "5", "args.saucers": "6"}
    assert forms.args_from_form(schema, form) == ({"shelf": "B2", "cups": 5, "saucers": 6}, [])


def test_fields_resolve_refs_and_errors_find_their_field() -> None:
    schema = Tool(ship).tool_def.parameters_json_schema
    fields, leftover = forms.arg_fields(
        schema,
        SHIP_ARGS,
        errors=[("address.postcode", "bad"), ("items.0", "not a string"), ("", "whole thing"), ("x", "extra")],
    )
    by_name = {f.label: f for f in fields}
    address = by_name["address"]
    assert address.kind == "object" and address.type_label == "object (Address)"
    assert [c.label for c in address.children] == ["name", "postcode", "city"]
    assert address.children[0].description == "Recipient's full name."
    assert address.children[1].error == "bad" and address.children[1].constraints == ["matches ^\\d{5}$"]
    assert by_name["items"].kind == "json" and by_name["items"].error == "0: not a string"
    assert by_name["carrier"].options == [('"dhl"', "dhl"), ('"ups"', "ups")]
    assert by_name["express"].kind == "boolean" and not by_name["express"].has_value
    assert by_name["note"].nullable and by_name["note"].type_label == "string or null"
    assert leftover == ["whole thing", "x: extra"]


def test_summaries_fit_on_one_line() -> None:
    args = {"amount": str(Decimal("1.5")), "n": 3, "to": "ann@example.com"}
    assert views.summarize(args) == "amount=1.5, n=3, to=ann@example.com"
    schema: dict[str, Any] = {"properties": {"to": {}, "amount": {}}}  # the tool's order wins over the stored order
    assert views.summarize(args, schema=schema) == "to=ann@example.com, amount=1.5, n=3"
    assert views.summarize({"body": "two\nlines, and more"}) == 'body="two\\nlines, and more"'
    long = views.summarize({"text": "x" * 500})
    assert len(long) == 110 and long.endswith("…")
    assert json.loads(views.summarize({"a": {"b": [1]}}).split("=", 1)[1]) == {"b": [1]}


def test_counts_past_the_cap_read_as_more_than() -> None:
    """The store stops counting a status past `COUNT_CAP` (it says cap + 1): the inbox shows "10,000+", and the
    sum of statuses is "at least" as soon as one of them was cut."""
    assert pages._shown(7) == "7" and pages._shown(COUNT_CAP) == str(COUNT_CAP)
    assert pages._shown(COUNT_CAP + 1) == f"{COUNT_CAP:,}+"
    assert pages._shown_sum({"pending": 3, "denied": 2}) == "5"
    assert pages._shown_sum({"pending": COUNT_CAP + 1, "denied": 2}) == f"{COUNT_CAP + 2:,}+"
