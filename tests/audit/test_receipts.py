"""Receipts: one decision proven offline with the public key alone; any alteration fails.

The web test downloads the receipt of a decision made on the call page, from an app whose
checkpointer runs in its lifespan as configured, then checks it with the CLI as a recipient would.
"""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from approvals.audit.receipt import ReceiptUnavailable, make_receipt, verify_receipt
from approvals.audit.signing import SigningKey, generate_key_file
from approvals.cli import app as cli
from approvals.store import Store
from approvals_web.app import create_app
from approvals_web.settings import Settings

from ..store import agents as store_agents
from ..web.conftest import WebApp, db_url, web_tokens  # noqa: F401 - the web tests' seeded databases
from ..web.test_pages import paused
from .checkpoint_helpers import add_events, checkpointer

pytestmark = pytest.mark.anyio


@pytest.fixture
def key() -> SigningKey:
    return SigningKey.generate()


async def test_a_receipt_verifies_with_the_public_key_alone(store: Store, key: SigningKey, tmp_path: Path) -> None:
    await add_events(store, 37)
    await checkpointer(store, key, tmp_path).make(force=True)
    await add_events(store, 5)
    receipt = await make_receipt(store.db, 20)
    await store.db.dispose()
    check = verify_receipt(json.loads(json.dumps(receipt)), key.public)
    assert check.ok, check.message
    assert "event 20" in check.message and "is event 20 of 37 in checkpoint 1" in check.message
    assert len(receipt["proof"]) == 6, "a proof is the sibling hashes only: log2 of the checkpoint's size"
    assert "A-19" not in json.dumps(receipt["proof"]) and json.dumps(receipt).count("order_id") == 1


def _grown(statement: str) -> str:
    return statement.replace('"tree_size":16', '"tree_size":17')


async def test_an_altered_receipt_fails(store: Store, key: SigningKey, tmp_path: Path) -> None:
    await add_events(store, 16)
    await checkpointer(store, key, tmp_path).make(force=True)
    receipt = await make_receipt(store.db, 7)

    def altered(change: Any) -> dict[str, Any]:
        copied = copy.deepcopy(receipt)
        change(copied)
        return copied

    cases = {
        "details": altered(lambda r: r["event"]["details"].update(amount="1.00")),
        "actor": altered(lambda r: r["event"].update(actor="mallory")),
        "id (position)": altered(lambda r: r["event"].update(id=8)),
        "hash recomputed for new content": altered(lambda r: r["event"].update(hash="ab" * 32)),
        "proof": altered(lambda r: r["proof"].__setitem__(0, "00" * 32)),
        "index": altered(lambda r: r.update(leaf_index=3)),
        "checkpoint": altered(
            lambda r: r["checkpoint"].update(
                statement=r["checkpoint"]["statement"].replace('"tree_size":16', '"tree_size":17')
            )
        ),
    }
    for name, bad in cases.items():
        check = verify_receipt(bad, key.public)
        assert not check.ok, name
    assert not verify_receipt(receipt, SigningKey.generate().public).ok
    assert verify_receipt(receipt, key.public).ok


async def test_an_event_no_checkpoint_covers_gets_one_when_signing_is_on(
    store: Store, key: SigningKey, tmp_path: Path
) -> None:
    await add_events(store, 5)
    with pytest.raises(ReceiptUnavailable, match="no signed checkpoint covers audit event 3"):
        await make_receipt(store.db, 3)
    receipt = await make_receipt(store.db, 3, checkpointer(store, key, tmp_path / "cp"))
    assert verify_receipt(receipt, key.public).ok
    assert (tmp_path / "cp" / "checkpoint-000000000001.json").exists(), "the sinks get the checkpoint made for it"
    with pytest.raises(ReceiptUnavailable, match="no audit event 99"):
        await make_receipt(store.db, 99)


@pytest.fixture
async def signed_web(db_url: str, web_tokens: dict[str, str], tmp_path: Path) -> AsyncIterator[WebApp]:  # noqa: F811
    """An app with audit signing on, built from settings as `approvals serve` builds it."""
    generate_key_file(tmp_path / "audit.pem")
    agents = [f"{store_agents.__name__}:shop_agent", f"{store_agents.__name__}:email_agent"]
    settings = Settings(
        database_url=db_url,
        worker=False,
        secret_key="test-secret",
        agents=agents,
        audit_signing_key_file=str(tmp_path / "audit.pem"),
        audit_checkpoint_dir=str(tmp_path / "checkpoints"),
    )
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        yield WebApp(app=app, store=app.state.context.store, tokens=web_tokens)


async def test_a_receipt_downloaded_from_the_call_page_verifies_offline(signed_web: WebApp, tmp_path: Path) -> None:
    web = signed_web
    _, calls = await paused(web, tmp_path)
    refund = calls["refund"]
    client, csrf = await web.login("alice")
    await client.post(f"/calls/{refund.id}/approve", data={"args_digest": refund.args_digest, "csrf_token": csrf})
    page = (await client.get(f"/calls/{refund.id}")).text
    assert f'href="/calls/{refund.id}/receipt"' in page

    viewer, _ = await web.login("victor")
    response = await viewer.get(f"/calls/{refund.id}/receipt")
    assert response.status_code == 200, response.text
    assert "attachment" in response.headers["content-disposition"]
    receipt = response.json()
    assert (receipt["event"]["action"], receipt["event"]["actor"]) == ("call.approved", "alice")

    key_response = await web.client().get("/.well-known/approvals-audit-key")  # no login
    assert key_response.status_code == 200 and key_response.json()["kty"] == "OKP"
    (tmp_path / "receipt.json").write_text(response.text)
    (tmp_path / "key.json").write_text(key_response.text)
    runner = CliRunner()
    result = runner.invoke(cli, ["audit", "verify", "--receipt", str(tmp_path / "receipt.json"),
                                 "--public-key", str(tmp_path / "key.json")])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "call.approved by alice" in result.output

    receipt["event"]["actor"] = "bob"
    (tmp_path / "forged.json").write_text(json.dumps(receipt))
    result = runner.invoke(cli, ["audit", "verify", "--receipt", str(tmp_path / "forged.json"),
                                 "--public-key", str(tmp_path / "key.json")])  # fmt: skip
    assert result.exit_code == 1 and "was altered" in result.output

    anonymous = await web.client().get(f"/calls/{refund.id}/receipt")
    assert anonymous.status_code in (303, 401)
    assert (await viewer.get("/calls/no-such-call/receipt")).status_code == 404


async def test_readyz_says_how_the_signed_checkpoints_are_doing(signed_web: WebApp, tmp_path: Path) -> None:
    web = signed_web
    await paused(web, tmp_path)
    (made,) = await web.app.state.checkpointer.make(force=True)
    body = (await web.client().get("/readyz")).json()
    said = body["audit_checkpoints"]
    assert (said["last_seq"], said["outage"], said["sink_errors"]) == (made.seq, False, {})
    assert said["made"] >= 1  # this one, and any the app's own loop made since it started
