"""Single sign-on and SCIM provisioning (issue 40): how long our side of a sign-in takes, what SCIM
writes cost, and how soon a SCIM deactivation shuts a person out of every channel.

Everything goes over real HTTP on loopback, on SQLite (a migrated file in a temp folder) and on
PostgreSQL (a throwaway database from bench/_databases.py), one database after the other:

1. Sign-in round trip, our two legs only. The app (uvicorn) and the real npm `oidc-provider`
   come from tests/oidc/harness.py (`provider_and_app`). A fresh client (a new browser) does
   (a) GET /sso/test/login -> the 302 to the provider, timed; then the provider's login form and
   consent, driven as tests/web/test_sso.py's `sign_in` does, not timed; then
   (b) GET /sso/test/callback?code=…&state=… -> the 303 into the inbox, timed: the code exchange
   with the provider, the ID token checks, the user refresh and the new session.
   SIGN_INS sign-ins after one warm-up; p50/p95 of (a), (b) and (a)+(b).
2. SCIM writes: SCIM_USERS times `POST /scim/v2/Users`, then as many `PATCH /scim/v2/Users/{id}`
   active=false, with a `scim`-scoped admin token; p50/p95 of each.
3. From a SCIM deactivation to the person's refusal, per channel, REPETITIONS times each. A
   person with a working credential (checked just before) is deactivated by PATCH active=false;
   as soon as its 200 is back, the credential is used again:
   - web: a session from a real SSO sign-in; its next GET / must no longer be let in (200 = let in);
   - e-mail: the approve link of a pending call (`store.outbound.create_email_links`, as
     tests/web/test_scim.py makes them; a GET, which decides nothing, shows it works); its next
     GET, then a POST, must both be refused;
   - Slack: the user is linked to a member of the fake Slack (tests/fixtures/fake_slack.py), and
     the app's own deliverer posts a pending call needing two approvals; the member's signed
     Approve click counts (1 of 2); after the deactivation that approval must be withdrawn and the
     next click must decide nothing (the app answers Slack 200 either way and tells the member
     privately, as in tests/web/test_scim_slack.py). This app has Slack configured, so it is a
     second app on the same database, started after the first one stops.
   Printed: how many requests after the PATCH's 200 still succeeded (the target is none: the
   refusal is "the next request"), the p50 of that first refused request, and the p50 from sending
   the PATCH to that refusal.

The client, the app and (for Slack) the fake Slack share this process (the app on its own
thread and event loop, as the harness runs it) on a 2-core machine: the numbers include our
client's own Python time. Prints numbers; asserts only that each step did what it should.
Needs the npm tools: `APPROVALS_CLIS_DIR=$(bash tests/clis/install.sh)`.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import json
import os
import re
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlencode

import httpx
import uvicorn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _databases import migrated_database

from approvals.calls import CallRequest, validate_request
from approvals.channels.slack_blocks import ACTION_APPROVE
from approvals.store import SYSTEM, Actor
from approvals.store.models import DecisionRow, ToolCallRow
from approvals_web.app import create_app
from approvals_web.settings import Settings
from tests.fixtures.fake_slack import FakeSlack, SlackMessage, running_fake_slack, sign
from tests.oidc.harness import App, Provider, oidc_provider, provider_and_app
from tests.processes import free_port
from tests.web.test_sso import FORM, HIDDEN

SIGN_INS = int(os.environ.get("BENCH_SIGN_INS", 30))
SCIM_USERS = int(os.environ.get("BENCH_SCIM_USERS", 100))
REPETITIONS = int(os.environ.get("BENCH_REPETITIONS", 20))
MAX_TRIES = 10
"""Requests sent after a deactivation before giving up on seeing a refusal (a bug if ever reached)."""

SCIM_JSON = "application/scim+json"
USER_SCHEMA = "urn:ietf:params:scim:schemas:core:2.0:User"
DEACTIVATE = {
    "schemas": ["urn:ietf:params:scim:api:messages:2.0:PatchOp"],
    "Operations": [{"op": "replace", "path": "active", "value": False}],
}
TITLE = re.compile(r"<h1[^>]*>([^<]*)</h1>")
ASKER = Actor(id="bench-service", role="reviewer", person=False)
SLACK_CHANNEL = "C0BENCH"


def ms(seconds: float) -> float:
    return seconds * 1000


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def p50_p95(values: list[float]) -> str:
    return f"p50 {pct(values, 0.5):6.1f} ms  p95 {pct(values, 0.95):6.1f} ms"


# --- the provider's pages ----------------------------------------------------------------------


def submit(client: httpx.Client, page: httpx.Response, **fields: str) -> httpx.Response:
    """Post the page's first form as a browser would (its hidden inputs plus `fields`), not following redirects."""
    action = FORM.search(page.text)
    assert action, page.text[:2000]
    data = dict(HIDDEN.findall(page.text)) | fields
    return client.post(page.url.join(action.group(1).replace("&amp;", "&")), data=data)


def through_provider(client: httpx.Client, authorize: str, callback: str, user: str) -> str:
    """From the provider's authorize URL through its login form and consent to its redirect back to
    `callback`: that URL (with code and state), not yet requested."""
    response = client.get(authorize)
    for _ in range(12):
        if response.is_redirect:
            location = str(response.url.join(response.headers["location"]))
            if location.startswith(callback):
                return location
            response = client.get(location)
        elif 'name="login"' in response.text:
            response = submit(client, response, login=user, password="anything")
        elif 'value="consent"' in response.text:
            response = submit(client, response)
        else:
            raise AssertionError(f"unexpected provider page {response.status_code}: {response.text[:2000]}")
    raise AssertionError("the provider never sent the browser back")


@dataclass
class SignIn:
    client: httpx.Client
    """The browser, now holding the app's session cookie."""
    to_provider: float
    back_from_provider: float


def sign_in(app_url: str, user: str) -> SignIn:
    """A new browser signs `user` in; our two legs timed (seconds)."""
    client = httpx.Client(follow_redirects=False)
    started = time.perf_counter()
    start = client.get(f"{app_url}/sso/test/login")
    to_provider = time.perf_counter() - started
    assert start.status_code == 302, start.text[:2000]
    callback = through_provider(client, start.headers["location"], f"{app_url}/sso/test/callback", user)
    started = time.perf_counter()
    back = client.get(callback)
    back_from_provider = time.perf_counter() - started
    assert back.status_code == 303, back.text[:2000]
    assert "/sso/" not in back.headers["location"], back.headers
    assert "/login" not in back.headers["location"], back.headers
    return SignIn(client, to_provider, back_from_provider)


# --- the app and the store ---------------------------------------------------------------------


@contextmanager
def serving(settings: Settings) -> Iterator[App]:
    """The app for `settings` under uvicorn on a free port, on its own thread and loop (as the harness runs it)."""
    port = free_port()
    app = create_app(settings)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(server.serve(),), daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "the app did not start"
    try:
        yield App(f"http://127.0.0.1:{port}", app.state.context.store, loop)
    finally:
        server.should_exit = True
        thread.join(timeout=20)
        loop.close()


def scim_client(app: App, name: str) -> httpx.Client:
    """A provider's SCIM client: a `scim`-scoped admin token, kept-alive connections."""
    token = app.call(app.store.people.create_token(name, role="admin", actor=SYSTEM, scopes=["scim"]))
    headers = {"Authorization": f"Bearer {token}", "Content-Type": SCIM_JSON}
    return httpx.Client(base_url=app.url, headers=headers)


def provision(idp: httpx.Client, username: str) -> str:
    """Create `username` through SCIM; its SCIM id."""
    body = {"schemas": [USER_SCHEMA], "userName": username, "emails": [{"value": f"{username}@example.com"}]}
    created = idp.post("/scim/v2/Users", json=body)
    assert created.status_code == 201, created.text
    return str(created.json()["id"])


def pending_call(app: App, n: int, approvals_required: int = 1) -> ToolCallRow:
    """A call waiting for people, asked through the gate's store path."""
    request = CallRequest(
        engine="gate",
        source="bench-app",
        session_id=f"identity-{n}",
        tool_name="refund",
        args={"order_id": f"A-{n}", "amount": 12.0},
        json_schema={"type": "object", "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}}},
        approvals_required=approvals_required,
    )
    call, _ = app.call(app.store.calls.request_call(validate_request(request), actor=ASKER))
    return call


# --- 3. deactivation to refusal -----------------------------------------------------------------


@dataclass
class Refusals:
    """One channel's repetitions on one database."""

    channel: str
    still_let_in: list[int] = field(default_factory=list)
    """Per repetition: requests after the PATCH's 200 that still succeeded."""
    refused_in: list[float] = field(default_factory=list)
    """Per repetition: the first refused request's own time (s)."""
    patch_to_refusal: list[float] = field(default_factory=list)
    """Per repetition: from sending the PATCH to that refusal's answer (s)."""
    answers: Counter[str] = field(default_factory=Counter)
    """What the first refused requests were answered."""
    notes: list[str] = field(default_factory=list)
    """What went wrong (a request let in, a refusal not explained): each one a finding."""
    facts: list[str] = field(default_factory=list)
    """Other numbers worth printing."""


@dataclass
class Answer:
    """What one use of a credential got."""

    let_in: bool
    said: str
    at: float
    """`time.perf_counter()` when the answer arrived (before any checking of what it did)."""


Attempt = Callable[[], Answer]
"""One use of a credential."""


def deactivate_then(
    idp: httpx.Client, scim_id: str, attempts: list[Attempt], result: Refusals, repetition: int
) -> None:
    """PATCH active=false, then make the `attempts` in turn until one is refused."""
    started = time.perf_counter()
    off = idp.patch(f"/scim/v2/Users/{scim_id}", json=DEACTIVATE)
    assert off.status_code == 200, off.text
    assert off.json()["active"] is False, off.text
    let_in = 0
    for attempt in attempts:
        sent = time.perf_counter()
        answer = attempt()
        if answer.let_in:
            let_in += 1
            continue
        result.answers[answer.said] += 1
        result.refused_in.append(answer.at - sent)
        result.patch_to_refusal.append(answer.at - started)
        break
    else:
        result.notes.append(f"repetition {repetition}: never refused in {len(attempts)} requests")
    result.still_let_in.append(let_in)


def web_sessions(app: App, idp: httpx.Client, provider: Provider, kind: str) -> Refusals:
    """A session from an SSO sign-in, then its next GET / after the deactivation."""
    result = Refusals("web (session, GET /)")
    for n in range(REPETITIONS):
        user = f"web-{kind}-{n}"
        provider.set_groups(user, ["staff"])  # a reviewer at the provider, signed in just in time
        with closing(sign_in(app.url, user).client) as browser:
            assert browser.get(f"{app.url}/").status_code == 200, "the session does not work to begin with"
            scim_id = str(app.call(app.store.people.get_user(user)).id)

            def home(browser: httpx.Client = browser) -> Answer:
                page = browser.get(f"{app.url}/")
                at = time.perf_counter()
                return Answer(page.status_code == 200, f"{page.status_code} to {page.headers.get('location')}", at)

            deactivate_then(idp, scim_id, [home] * MAX_TRIES, result, n)
    return result


def use_link(send: Callable[[str], httpx.Response], url: str) -> Answer:
    page = send(url)
    at = time.perf_counter()
    title = TITLE.search(page.text)
    return Answer(
        page.status_code == 200, f"{page.request.method} {page.status_code} {title.group(1) if title else ''}", at
    )


def email_links(app: App, idp: httpx.Client, kind: str) -> Refusals:
    """An approve link of a pending call, GET then POST after the deactivation."""
    result = Refusals("e-mail link (GET, then POST)")
    expires = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    posts: Counter[str] = Counter()
    with httpx.Client(base_url=app.url) as reader:
        for n in range(REPETITIONS):
            user = f"mail-{kind}-{n}"
            scim_id = provision(idp, user)
            call = pending_call(app, 10_000 + n)
            links = app.call(
                app.store.outbound.create_email_links(call.id, user, call.current_digest, expires_at=expires)
            )
            link = f"/email/{links.approve}"
            assert reader.get(link).status_code == 200, "the link does not work to begin with"
            deactivate_then(
                idp,
                scim_id,
                [functools.partial(use_link, reader.get, link), functools.partial(use_link, reader.post, link)],
                result,
                n,
            )
            post = use_link(reader.post, link)
            posts[post.said] += 1
            if post.let_in:
                result.notes.append(f"repetition {n}: the link's POST decided the call after the deactivation")
            decisions = app.call(app.store.calls.decisions_for(call.id))
            if decisions:
                result.notes.append(f"repetition {n}: {len(decisions)} decision(s) recorded: {decisions}")
    result.facts.append("then a POST of the link: " + ", ".join(f"{said} ({count})" for said, count in posts.items()))
    return result


def click(client: httpx.Client, fake: FakeSlack, message: SlackMessage, member: str) -> httpx.Response:
    """The member's Approve click on `message`, signed and posted as Slack does (fake Slack's `send`, sync)."""
    body = urlencode({"payload": json.dumps(fake.block_actions(message, ACTION_APPROVE, member))}).encode()
    stamp = str(int(time.time()))
    headers = {
        "Content-Type": "application/x-www-form-urlencoded",
        "X-Slack-Request-Timestamp": stamp,
        "X-Slack-Signature": sign(fake.signing_secret, stamp, body),
    }
    return client.post("/slack/interactions", content=body, headers=headers)


def posted_about(fake: FakeSlack, call: ToolCallRow, seconds: float = 10.0) -> SlackMessage:
    """The deliverer's message about `call`, once it is there."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = [m for m in fake.posted() if call.id in json.dumps(m.blocks)]
        if found:
            return found[0]
        time.sleep(0.002)
    raise AssertionError(f"call {call.id} never reached Slack")


def slack_clicks(app: App, idp: httpx.Client, fake: FakeSlack, kind: str) -> Refusals:
    """A linked member approves a posted call needing two approvals (1 of 2: the click works), is
    deactivated (that approval is withdrawn), and clicks Approve again: it must decide nothing."""
    result = Refusals("Slack (Approve click)")
    told_after: list[float] = []

    def approvals_by(user: str, call_id: str) -> list[DecisionRow]:
        return [d for d in app.call(app.store.calls.decisions_for(call_id)) if d.actor == user]

    with httpx.Client(base_url=app.url) as slack_side:
        for n in range(REPETITIONS):
            user, member = f"slack-{kind}-{n}", f"U0{kind.upper()[:2]}{n:04d}"
            fake.add_user(member, user)
            scim_id = provision(idp, user)
            app.call(app.store.people.set_user_contact(user, actor=SYSTEM, slack_user_id=member))
            call = pending_call(app, 20_000 + n, approvals_required=2)
            message = posted_about(fake, call)
            assert click(slack_side, fake, message, member).status_code == 200
            assert len(approvals_by(user, call.id)) == 1, "the click does not work to begin with"
            answered: list[float] = []

            def approve(
                message: SlackMessage = message,
                member: str = member,
                user: str = user,
                call_id: str = call.id,
                answered: list[float] = answered,
            ) -> Answer:
                answer = click(slack_side, fake, message, member)
                answered.append(time.perf_counter())
                assert answer.status_code == 200, answer.text
                decided = len(approvals_by(user, call_id)) > 1
                return Answer(
                    decided, f"{answer.status_code}, {'decided' if decided else 'nothing decided'}", answered[0]
                )

            deactivate_then(idp, scim_id, [approve], result, n)
            if any(d.consumed_at is None for d in approvals_by(user, call.id)):
                result.notes.append(f"repetition {n}: the approval from before the deactivation still stands")
            deadline = time.perf_counter() + 10
            while time.perf_counter() < deadline and not any(e["user"] == member for e in fake.ephemerals):
                time.sleep(0.001)
            told = [e for e in fake.ephemerals if e["user"] == member]
            if not told or "disabled" not in told[0]["text"]:
                result.notes.append(f"repetition {n}: the member was not told the user is disabled: {told}")
            else:
                told_after.append(time.perf_counter() - answered[0])
    if told_after:
        after = pct(told_after, 0.5) * 1000
        result.facts.append(f"the private 'disabled' note reached Slack {after:.1f} ms (p50) after the click's answer")
    return result


# --- per database -------------------------------------------------------------------------------


def report(kind: str, result: Refusals) -> None:
    let_in = sum(result.still_let_in)
    worst = max(result.still_let_in, default=0)
    refused = [ms(s) for s in result.refused_in]
    patch_to = [ms(s) for s in result.patch_to_refusal]
    numbers = (
        f"first refused request p50 {pct(refused, 0.5):6.1f} ms, PATCH sent -> refused p50 {pct(patch_to, 0.5):6.1f} ms"
        if refused
        else "never refused"
    )
    print(
        f"  {kind:<10} {result.channel:<30} let in after the PATCH: {let_in} in {len(result.still_let_in)} "
        f"repetitions (worst {worst}); {numbers}"
    )
    answers = ", ".join(f"{answer} ({count})" for answer, count in result.answers.most_common())
    print(f"  {'':<10}   first refusals: {answers}")
    for fact in result.facts:
        print(f"  {'':<10}   {fact}")
    for note in result.notes:
        print(f"  {'':<10}   ! {note}")


def one_database(kind: str, url: str, fake: FakeSlack) -> None:
    with (
        tempfile.TemporaryDirectory() as folder,
        oidc_provider(Path(folder), "http://127.0.0.1:1") as shared,
        provider_and_app(url, shared) as (provider, app),
    ):
        # 1. sign-in round trips
        sign_in(app.url, "alice").client.close()  # warm-up: discovery and the provider's keys fetched once
        legs = []
        for _ in range(SIGN_INS):
            done = sign_in(app.url, "alice")
            done.client.close()
            legs.append((ms(done.to_provider), ms(done.back_from_provider)))
        print(f"  {kind:<10} (a) login -> 302 to provider      {p50_p95([a for a, _ in legs])}")
        print(f"  {kind:<10} (b) callback -> 303 into inbox    {p50_p95([b for _, b in legs])}")
        print(f"  {kind:<10} (a)+(b)                           {p50_p95([a + b for a, b in legs])}")

        with scim_client(app, "idp") as idp:
            # 2. SCIM create and deactivate
            created, ids = [], []
            for n in range(SCIM_USERS):
                started = time.perf_counter()
                ids.append(provision(idp, f"scim-{kind}-{n}"))
                created.append(ms(time.perf_counter() - started))
            deactivated = []
            for scim_id in ids:
                started = time.perf_counter()
                off = idp.patch(f"/scim/v2/Users/{scim_id}", json=DEACTIVATE)
                deactivated.append(ms(time.perf_counter() - started))
                assert off.status_code == 200, off.text
            print(f"  {kind:<10} SCIM POST /Users (create)         {p50_p95(created)}")
            print(f"  {kind:<10} SCIM PATCH active=false           {p50_p95(deactivated)}")

            # 3. deactivation -> refusal: web and e-mail on this app
            report(kind, web_sessions(app, idp, provider, kind))
            report(kind, email_links(app, idp, kind))

    # 3. Slack: the same database, an app with Slack configured
    settings = Settings(
        database_url=url,
        worker=False,
        secret_key="bench-secret",
        public_url="https://approvals.example",
        slack_bot_token=fake.token,
        slack_signing_secret=fake.signing_secret,
        slack_channel=SLACK_CHANNEL,
        slack_api_url=fake.url,
    )
    with serving(settings) as app, scim_client(app, "idp-slack") as idp:
        report(kind, slack_clicks(app, idp, fake, kind))


def main() -> None:
    clis = os.environ.get("APPROVALS_CLIS_DIR")
    if not clis or not (Path(clis) / "node_modules" / "oidc-provider").is_dir():
        sys.exit("needs the npm oidc-provider: APPROVALS_CLIS_DIR=$(bash tests/clis/install.sh)")
    print(
        f"Identity: {SIGN_INS} SSO sign-ins, {SCIM_USERS} SCIM creates and deactivations, "
        f"{REPETITIONS} deactivations per channel"
    )
    started = time.perf_counter()
    with running_fake_slack(FakeSlack(channels={SLACK_CHANNEL: True})) as fake:
        for kind in ("sqlite", "postgresql"):
            with migrated_database(kind) as url:
                one_database(kind, url, fake)
    print(f"  ({time.perf_counter() - started:.0f} s in all)")


if __name__ == "__main__":
    main()
