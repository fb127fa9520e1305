"""Secrets: password hashes (argon2), API tokens (random, stored as SHA-256), webhook signatures (HMAC).

Nothing here logs or returns a secret except `new_token`, whose plaintext is shown once.
"""

from __future__ import annotations

import hashlib
import secrets

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from .webhook_signature import sign_webhook

__all__ = (
    "TOKEN_PREFIX",
    "hash_password",
    "hash_token",
    "new_password",
    "new_token",
    "sign_payload",
    "verify_password",
)

TOKEN_PREFIX = "apv_"  # noqa: S105 - a prefix that marks our tokens, not a secret
_hasher = PasswordHasher()


def hash_password(password: str) -> str:
    """An argon2id hash, salted, with the library's recommended cost."""
    return _hasher.hash(password)


def verify_password(password_hash: str | None, password: str) -> bool:
    """True when `password` matches; a missing or malformed hash never matches."""
    if not password_hash:
        _hasher.hash(password)  # spend the same time, so unknown users cannot be told apart
        return False
    try:
        return _hasher.verify(password_hash, password)
    except (VerificationError, InvalidHashError):
        return False


def new_password() -> str:
    """A random password for a first admin, printed once."""
    return secrets.token_urlsafe(15)


def new_token() -> str:
    """A random bearer token; only `hash_token` of it is stored."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    """Tokens carry 256 random bits, so a fast hash is enough and lookups stay O(1)."""
    return hashlib.sha256(token.encode()).hexdigest()


def sign_payload(secret: str, body: bytes, timestamp: str) -> str:
    """HMAC-SHA256 over `timestamp.body`, hex: receivers check it with `approvals.webhook_signature`."""
    return sign_webhook(secret, body, timestamp)
