"""Who may scrape `/metrics`, also while the database is down, and the plain-text refusals a scraper gets.

The scrape that matters most is the one during an outage: `approvals_database_up 0` is how
Prometheus learns of it. A token is verified in the database, though, and the token cache
(`approvals.store.token_cache`) holds an answer for 5 s only, so once the database had been
down that long a scrape with a `metrics:read` token failed before it could say so.

So each process keeps a last-known-good record of the metrics tokens the database verified
for it, and reads that record only when the database cannot be reached:

- a token is remembered when the database (or the token cache, within its 5 s) says it may
  read metrics, and forgotten the moment the database says it may not (unknown, revoked,
  its user disabled, no `metrics:read` scope);
- a change to tokens or users made through this process (`TokenCache.clear`) voids the whole
  record, as it voids the cache, so a token revoked here never scrapes during a later outage;
- a remembered token is honoured for at most `OUTAGE_GRACE_SECONDS` after it was last
  verified; a token this process never verified (or one past that) is refused with 503,
  since nobody can say whether it is valid.

The record only ever opens `/metrics`, whose outage answer is `approvals_database_up 0`
(what `/readyz` tells anyone), never another route. The one window it adds to the cache's:
a token revoked by another process is honoured here until this process next reaches the
database, if the outage begins first.

Every refusal is `text/plain`: a scraper keeps the error in its target's `lastError`, and an
HTML error page there helps nobody.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

from fastapi import HTTPException, Request
from fastapi.responses import PlainTextResponse, Response
from sqlalchemy.exc import SQLAlchemyError

from approvals.calls.actors import Actor
from approvals.security import hash_token
from approvals.store.errors import describe, is_transient
from approvals.store.token_cache import TokenCache

from .auth import _bearer, app_context, current_actor

__all__ = ("MAX_REMEMBERED_TOKENS", "OUTAGE_GRACE_SECONDS", "MetricsTokens", "metrics_refusal")

SCOPE = "metrics:read"
_CHALLENGE = {"WWW-Authenticate": "Bearer"}
OUTAGE_GRACE_SECONDS = 3600.0
"""How long after its last verification a metrics token still opens `/metrics` while the database is down."""
MAX_REMEMBERED_TOKENS = 100
"""Metrics tokens remembered at most (a deployment has one or two scrapers); past it the oldest goes."""


@dataclass
class _Verified:
    at: float
    """When the database (or the token cache) last said yes, on the token cache's clock."""
    generation: int
    """The token cache's generation then: a local change to accounts since voids this entry."""
    actor: Actor


@dataclass
class MetricsTokens:
    """The last-known-good record of one process's metrics tokens, by token hash (never the plaintext)."""

    cache: TokenCache
    """The store's token cache: its clock and its generation (bumped by every local account change)."""
    grace: float = OUTAGE_GRACE_SECONDS
    max_entries: int = MAX_REMEMBERED_TOKENS
    _entries: dict[str, _Verified] = field(default_factory=dict)

    @property
    def clock(self) -> Callable[[], float]:
        return self.cache.clock

    def remember(self, token_hash: str, actor: Actor, *, generation: int) -> None:
        """The database verified the token in `generation` and it may read metrics."""
        if generation != self.cache.generation:
            return  # accounts changed while it was being looked up: what was read may be stale
        self._entries.pop(token_hash, None)
        if len(self._entries) >= self.max_entries:
            del self._entries[next(iter(self._entries))]
        self._entries[token_hash] = _Verified(at=self.clock(), generation=generation, actor=actor)

    def forget(self, token_hash: str) -> None:
        """The database says the token may not read metrics (any more)."""
        self._entries.pop(token_hash, None)

    def recall(self, token_hash: str) -> Actor | None:
        """The actor of a token verified within `grace` seconds and since no local account change; else None."""
        entry = self._entries.get(token_hash)
        if entry is None:
            return None
        if entry.generation != self.cache.generation or self.clock() - entry.at > self.grace:
            del self._entries[token_hash]
            return None
        return entry.actor

    def __len__(self) -> int:
        return len(self._entries)


_RECORDS: weakref.WeakKeyDictionary[TokenCache, MetricsTokens] = weakref.WeakKeyDictionary()
"""One record per token cache, i.e. per store: it lives and goes with the database it vouches for."""


def metrics_tokens(cache: TokenCache) -> MetricsTokens:
    """The record that goes with `cache`, made on first use."""
    record = _RECORDS.get(cache)
    if record is None:
        record = _RECORDS[cache] = MetricsTokens(cache)
    return record


def _plain(status: int, text: str, headers: dict[str, str] | None = None) -> Response:
    return PlainTextResponse(text + "\n", status_code=status, headers=headers)


async def metrics_refusal(request: Request) -> Response | None:
    """None when the request may read metrics; otherwise the plain-text answer for the scraper.

    The usual way is `current_actor`'s (the token cache, then the database); the record above
    is read only when that fails because the database cannot be reached.
    """
    context = app_context(request)
    if context.settings.metrics_public:
        return None
    token = _bearer(request)
    record = metrics_tokens(context.store.people.verified_tokens)
    token_hash = hash_token(token) if token is not None else None
    generation = record.cache.generation
    try:
        actor = await current_actor(request)
    except HTTPException as exc:
        if token_hash is not None and exc.status_code == 401:
            record.forget(token_hash)  # the database says: unknown, revoked, or its user disabled
        return _plain(exc.status_code, str(exc.detail), dict(exc.headers or {}))
    except (SQLAlchemyError, OSError) as exc:
        if isinstance(exc, SQLAlchemyError) and not is_transient(exc):
            return _plain(500, "The database refused to verify the credentials.")
        known = record.recall(token_hash) if token_hash is not None else None
        if known is not None:
            request.state.actor = known
            return None
        reason = describe(exc) if isinstance(exc, SQLAlchemyError) else str(exc)
        return _plain(503, f"The database cannot be reached ({reason}) and this token was not verified here lately.")
    if actor is None:
        return _plain(401, "Authentication required: a bearer token with the 'metrics:read' scope.", _CHALLENGE)
    if actor.scopes is not None and not actor.may(SCOPE):
        if token_hash is not None:
            record.forget(token_hash)
        return _plain(403, f"This needs a token with the 'metrics:read' scope; {actor.id}'s token lacks it.")
    if token_hash is not None:
        record.remember(token_hash, actor, generation=generation)
    return None
