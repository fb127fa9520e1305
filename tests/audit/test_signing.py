"""The audit signing key: made by `keygen`, read from a file or the environment, never shown, and a
configured key that cannot be used stops the server at start-up with one clear line."""

from __future__ import annotations

import base64
import json
import stat
from pathlib import Path

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat
from typer.testing import CliRunner

from approvals.audit.signing import (
    SigningConfig,
    SigningKey,
    SigningKeyError,
    load_public_key,
    load_signing_key,
)
from approvals.cli import app as cli
from approvals_web.app import create_app
from approvals_web.settings import Settings

runner = CliRunner()


def test_keygen_writes_a_private_key_only_its_owner_reads_and_prints_the_public_key(tmp_path: Path) -> None:
    path = tmp_path / "audit.pem"
    result = runner.invoke(cli, ["audit", "keygen", "--out", str(path)])
    assert result.exit_code == 0, result.output
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    key = load_signing_key(SigningConfig(key_file=path))
    assert key is not None
    assert key.public.pem() in result.output and "PRIVATE" not in result.output
    again = runner.invoke(cli, ["audit", "keygen", "--out", str(path)])
    assert again.exit_code == 1 and "refusing to overwrite" in again.output
    assert load_signing_key(SigningConfig(key_file=path)).key_id == key.key_id  # type: ignore[union-attr]

    printed = runner.invoke(cli, ["audit", "public-key"], env={"APPROVALS_AUDIT_SIGNING_KEY_FILE": str(path)})
    assert printed.exit_code == 0 and printed.output == key.public.pem()
    as_json = runner.invoke(
        cli, ["audit", "public-key", "--format", "json"], env={"APPROVALS_AUDIT_SIGNING_KEY_FILE": str(path)}
    )
    assert json.loads(as_json.output)["kid"] == key.key_id
    (tmp_path / "pub.pem").write_text(printed.output)
    (tmp_path / "pub.json").write_text(as_json.output)
    assert load_public_key(tmp_path / "pub.pem").key_id == load_public_key(tmp_path / "pub.json").key_id == key.key_id


def test_a_key_from_the_environment_is_pem_or_a_base64_seed() -> None:
    seed = Ed25519PrivateKey.generate()
    raw = seed.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    from_seed = load_signing_key(SigningConfig(key_text=base64.b64encode(raw).decode()))
    pem = seed.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    from_pem = load_signing_key(SigningConfig(key_text=pem.decode()))
    assert from_seed is not None and from_pem is not None and from_seed.key_id == from_pem.key_id


def _rsa_pem() -> bytes:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())


def _encrypted_pem() -> bytes:
    return Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.BestAvailableEncryption(b"pw")
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "does not exist"),
        ("directory", "cannot be read"),
        (b"not a key at all", "cannot be read: not an unencrypted PEM"),
        ("encrypted", "it is encrypted"),
        ("rsa", "is not an Ed25519 key"),
    ],
)
def test_a_configured_key_that_cannot_be_used_stops_the_start(
    tmp_path: Path, content: bytes | str | None, message: str
) -> None:
    path = tmp_path / "audit.pem"
    if content == "directory":
        path.mkdir()
    elif content == "encrypted":
        path.write_bytes(_encrypted_pem())
    elif content == "rsa":
        path.write_bytes(_rsa_pem())
    elif isinstance(content, bytes):
        path.write_bytes(content)
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'a.db'}", audit_signing_key_file=str(path))
    with pytest.raises(SigningKeyError, match=message):
        create_app(settings)
    result = runner.invoke(cli, ["serve", "--port", "0", "--database-url", f"sqlite:///{tmp_path / 'b.db'}"],
                           env={"APPROVALS_AUDIT_SIGNING_KEY_FILE": str(path)})  # fmt: skip
    assert result.exit_code == 1
    assert result.output.startswith("error: the audit signing key") and message in result.output
    assert "Traceback" not in result.output and "BEGIN" not in result.output


def test_signing_asked_for_without_a_key_stops_the_start(tmp_path: Path) -> None:
    for settings in (
        Settings(database_url="sqlite://", audit_signing=True),
        Settings(database_url="sqlite://", audit_checkpoint_dir=str(tmp_path)),
    ):
        with pytest.raises(SigningKeyError, match="audit signing is on but no key is set"):
            create_app(settings)
    with pytest.raises(SigningKeyError, match="APPROVALS_AUDIT_SIGNING_KEY cannot be read"):
        load_signing_key(SigningConfig(key_text="c2hvcnQ="))  # a seed of 5 bytes


def test_the_key_never_shows_in_a_repr(tmp_path: Path) -> None:
    key = SigningKey.generate()
    pem = key.private_pem().decode()
    secret_line = pem.splitlines()[1]
    settings = Settings(database_url="sqlite://", audit_signing_key=pem)
    for shown in (repr(key), repr(settings), repr(settings.audit_signing_config()), str(settings.model_dump_json(
            exclude={"audit_signing_key"}))):  # fmt: skip
        assert secret_line not in shown


@pytest.mark.anyio
async def test_the_public_key_is_served_at_a_well_known_url_without_login() -> None:
    key = SigningKey.generate()
    app = create_app(Settings(database_url="sqlite://", audit_signing_key=key.private_pem().decode()))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://testserver") as client:
        document = (await client.get("/.well-known/approvals-audit-key")).json()
        assert (document["kid"], document["crv"], document["pem"]) == (key.key_id, "Ed25519", key.public.pem())
        pem = await client.get("/.well-known/approvals-audit-key?format=pem")
        assert pem.headers["content-type"].startswith("application/x-pem-file") and pem.text == key.public.pem()
    off = create_app(Settings(database_url="sqlite://"))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=off), base_url="http://testserver") as client:
        assert (await client.get("/.well-known/approvals-audit-key")).status_code == 404


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
