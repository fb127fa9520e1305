"""Secrets: password hashes (argon2), API tokens (random, stored as SHA-256), webhook signatures (HMAC).

Nothing here logs or returns a secret except `new_token`, whose plaintext is shown once.
"""

from __future__ import annotations

import hashlib
import secrets

import anyio
import anyio.to_thread
from anyio.lowlevel import RunVar
from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

__all__ = (
    "HASHING_CONCURRENCY",
    "TOKEN_PREFIX",
    "hash_password",
    "hash_password_async",
    "hash_token",
    "new_password",
    "new_token",
    "verify_password",
    "verify_password_async",
)

TOKEN_PREFIX = "apv_"  # noqa: S105 - a prefix that marks our tokens, not a secret
_hasher = PasswordHasher()
HASHING_CONCURRENCY = 3
"""Password hashes computed at once per event loop: each argon2id hash takes ~180 ms and 64 MiB."""
_hashing_limiter: RunVar[anyio.CapacityLimiter] = RunVar("approvals_password_hashing")


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


def _limiter() -> anyio.CapacityLimiter:
    """The event loop's limiter for password hashing (one per loop: a limiter belongs to its loop)."""
    try:
        return _hashing_limiter.get()
    except LookupError:
        limiter = anyio.CapacityLimiter(HASHING_CONCURRENCY)
        _hashing_limiter.set(limiter)
        return limiter


async def hash_password_async(password: str) -> str:
    """`hash_password` in a worker thread, at most `HASHING_CONCURRENCY` at once: the event loop keeps serving."""
    return await anyio.to_thread.run_sync(_call_hash, password, limiter=_limiter())


async def verify_password_async(password_hash: str | None, password: str) -> bool:
    """`verify_password` in a worker thread, at most `HASHING_CONCURRENCY` at once."""
    return await anyio.to_thread.run_sync(_call_verify, password_hash, password, limiter=_limiter())


def _call_hash(password: str) -> str:
    return hash_password(password)  # looked up at call time, so tests can slow it down


def _call_verify(password_hash: str | None, password: str) -> bool:
    return verify_password(password_hash, password)


def new_password() -> str:
    """A random password for a first admin, printed once."""
    return secrets.token_urlsafe(15)


def new_token() -> str:
    """A random bearer token; only `hash_token` of it is stored."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    """Tokens carry 256 random bits, so a fast hash is enough and lookups stay O(1)."""
    return hashlib.sha256(token.encode()).hexdigest()
