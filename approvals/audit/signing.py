"""The Ed25519 key that signs audit checkpoints: read from a file or the environment, never from the database.

A checkpoint is only worth something if whoever can write the database cannot sign one, so the
private key lives outside it (a file with 0600 permissions, or `APPROVALS_AUDIT_SIGNING_KEY`) and
is never logged: `SigningKey` shows its key id only. A key that is configured but missing or
unreadable is a `SigningKeyError` at start-up, never a silently unsigned log.

The public key is published (PEM, or a JWK-like JSON object with its key id) and is all a
verifier needs: `load_public_key` reads either form.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from ..exceptions import UserError

__all__ = (
    "WELL_KNOWN_PATH",
    "PublicKey",
    "SigningConfig",
    "SigningKey",
    "SigningKeyError",
    "generate_key_file",
    "load_public_key",
    "load_signing_key",
)

WELL_KNOWN_PATH = "/.well-known/approvals-audit-key"
"""Where the web app publishes the public key (no login: anyone verifying needs it)."""


class SigningKeyError(UserError):
    """The signing key is configured but cannot be used: the server must not start."""


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass(frozen=True)
class PublicKey:
    """A verifier's half of the key: checks signatures, names itself by `key_id`."""

    key: Ed25519PublicKey

    @property
    def raw(self) -> bytes:
        return self.key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)

    @property
    def key_id(self) -> str:
        """The first 16 hex digits of SHA-256 over the raw public key: what checkpoints name their signer by."""
        return hashlib.sha256(self.raw).hexdigest()[:16]

    def pem(self) -> str:
        return self.key.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ).decode()

    def jwk(self) -> dict[str, str]:
        """The key as a JWK (RFC 8037, OKP/Ed25519) with its key id, and its PEM beside it."""
        return {"kty": "OKP", "crv": "Ed25519", "alg": "EdDSA", "kid": self.key_id, "x": _b64url(self.raw),
                "pem": self.pem()}  # fmt: skip

    def verify(self, signature_b64: str, message: bytes) -> bool:
        """Whether `signature_b64` (base64) is this key's signature of `message`."""
        try:
            signature = base64.b64decode(signature_b64, validate=True)
            self.key.verify(signature, message)
        except (InvalidSignature, binascii.Error, ValueError):
            return False
        return True


class SigningKey:
    """The private key; its repr shows the key id only, so it never reaches a log."""

    def __init__(self, key: Ed25519PrivateKey, source: str = "") -> None:
        self._key = key
        self.public = PublicKey(key.public_key())
        self.source = source
        """Where it was read from (a path or the variable's name), for messages: never the key."""

    @property
    def key_id(self) -> str:
        return self.public.key_id

    def sign(self, message: bytes) -> str:
        """The Ed25519 signature of `message`, base64."""
        return base64.b64encode(self._key.sign(message)).decode()

    def private_pem(self) -> bytes:
        return self._key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )

    def __repr__(self) -> str:
        return f"SigningKey(key_id={self.key_id!r})"

    @classmethod
    def generate(cls) -> SigningKey:
        return cls(Ed25519PrivateKey.generate(), "generated")


@dataclass(frozen=True)
class SigningConfig:
    """Where the key comes from: the web app's settings and the CLI build this (the core reads no environment)."""

    key_file: Path | None = None
    key_text: str | None = None
    """The key itself (PEM, or the base64 of its 32-byte seed), from `APPROVALS_AUDIT_SIGNING_KEY`."""
    required: bool = False
    """Signing was asked for (`APPROVALS_AUDIT_SIGNING=true`): no key is an error, not "unsigned"."""

    def __repr__(self) -> str:
        return f"SigningConfig(key_file={self.key_file!r}, key_text={'<set>' if self.key_text else None}, " \
            f"required={self.required})"  # fmt: skip

    @property
    def enabled(self) -> bool:
        return self.required or self.key_file is not None or bool(self.key_text)


def _parse_private(data: bytes, source: str) -> SigningKey:
    text = data.strip()
    try:
        if text.startswith(b"-----BEGIN"):
            key = serialization.load_pem_private_key(text, password=None)
        else:
            seed = base64.b64decode(text, validate=True)
            if len(seed) != 32:
                raise ValueError(f"an Ed25519 seed is 32 bytes, this is {len(seed)}")
            key = Ed25519PrivateKey.from_private_bytes(seed)
    except (ValueError, TypeError, binascii.Error) as exc:
        raise SigningKeyError(f"the audit signing key in {source} cannot be read: {_reason(exc)}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise SigningKeyError(f"the audit signing key in {source} is not an Ed25519 key")
    return SigningKey(key, source)


def _reason(exc: Exception) -> str:
    """Why a key did not parse, without echoing any of it."""
    if isinstance(exc, TypeError):
        return "it is encrypted (give an unencrypted PKCS#8 PEM key)"
    return "not an unencrypted PEM private key nor the base64 of a 32-byte seed"


def load_signing_key(config: SigningConfig) -> SigningKey | None:
    """The configured key; None when signing is off. Raises `SigningKeyError` with the reason when it cannot be used."""
    if config.key_file is not None:
        path = config.key_file
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise SigningKeyError(f"the audit signing key file {path} does not exist") from None
        except OSError as exc:
            raise SigningKeyError(f"the audit signing key file {path} cannot be read: {exc.strerror}") from None
        return _parse_private(data, str(path))
    if config.key_text:
        return _parse_private(config.key_text.encode(), "APPROVALS_AUDIT_SIGNING_KEY")
    if config.required:
        raise SigningKeyError(
            "audit signing is on but no key is set: set APPROVALS_AUDIT_SIGNING_KEY_FILE (make one with "
            "`approvals audit keygen --out FILE`) or APPROVALS_AUDIT_SIGNING_KEY"
        )
    return None


def generate_key_file(path: Path) -> SigningKey:
    """A new key written to `path` (PKCS#8 PEM), readable by its owner only; an existing file is never replaced."""
    key = SigningKey.generate()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise SigningKeyError(f"{path} already exists; refusing to overwrite a key") from None
    except OSError as exc:
        raise SigningKeyError(f"cannot create {path}: {exc.strerror}") from None
    with os.fdopen(fd, "wb") as handle:
        handle.write(key.private_pem())
    os.chmod(path, 0o600)  # whatever the umask did
    key.source = str(path)
    return key


def load_public_key(path: Path) -> PublicKey:
    """A public key from a PEM file, a JWK-like JSON file (as the well-known URL serves), or a private key file."""
    try:
        data = path.read_bytes().strip()
    except OSError as exc:
        raise SigningKeyError(f"the public key file {path} cannot be read: {exc.strerror}") from None
    return parse_public_key(data, str(path))


def parse_public_key(data: bytes, source: str) -> PublicKey:
    """A public key from PEM or JWK JSON text."""
    try:
        if data.startswith(b"{"):
            document: Any = json.loads(data)
            if document.get("pem"):
                return parse_public_key(document["pem"].encode(), source)
            raw = base64.urlsafe_b64decode(document["x"] + "=" * (-len(document["x"]) % 4))
            return PublicKey(Ed25519PublicKey.from_public_bytes(raw))
        if b"PRIVATE KEY" in data:
            return _parse_private(data, source).public
        key = serialization.load_pem_public_key(data)
    except (ValueError, KeyError, TypeError, AttributeError, binascii.Error):
        raise SigningKeyError(f"{source} is not an Ed25519 public key (PEM or JWK JSON)") from None
    if not isinstance(key, Ed25519PublicKey):
        raise SigningKeyError(f"{source} is not an Ed25519 public key")
    return PublicKey(key)
