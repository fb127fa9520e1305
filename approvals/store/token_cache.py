"""Bearer tokens verified a moment ago, so each API request need not ask the database who it is.

Looking a token up costs every API request a round trip (on SQLite a thread hop too), more
than the rest of authenticating it. `store.people.token_actor` keeps the actor a token stood for,
keyed by the token's hash (never its plaintext), for `TOKEN_CACHE_SECONDS`.

The staleness bound, the one rule: a change made through this process's store (revoking a
token, disabling a user, changing a role) forgets every cached token at once, and a lookup
that was under way while it happened is not cached. A change made by another process (the
`approvals tokens revoke` command, another web process, SQL by hand) reaches this process
within `TOKEN_CACHE_SECONDS`. Unknown and revoked tokens are never cached: each of them
is looked up again, so nobody can fill the cache by sending made-up tokens.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ..calls.actors import Actor

__all__ = ("MAX_CACHED_TOKENS", "TOKEN_CACHE_SECONDS", "TokenCache")

TOKEN_CACHE_SECONDS = 5.0
"""The longest a token revoked (or whose user was disabled or demoted) by another process keeps working here."""
MAX_CACHED_TOKENS = 1_000
"""Tokens kept at most; past it the oldest entry makes room (a deployment has a handful of clients)."""


class TokenCache:
    """Actors of verified tokens by token hash, each for `ttl` seconds; `clear` when accounts change."""

    def __init__(
        self,
        ttl: float = TOKEN_CACHE_SECONDS,
        *,
        max_entries: int = MAX_CACHED_TOKENS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl = ttl
        self.max_entries = max_entries
        self.clock = clock
        self.generation = 0
        """Bumped by `clear`: a lookup that began in an older generation may have read what just changed."""
        self._entries: dict[str, tuple[float, Actor]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, token_hash: str) -> Actor | None:
        """The cached actor, or None when the token was not verified within `ttl` seconds."""
        entry = self._entries.get(token_hash)
        if entry is None:
            return None
        expires, actor = entry
        if self.clock() >= expires:
            del self._entries[token_hash]
            return None
        return actor

    def put(self, token_hash: str, actor: Actor, *, generation: int) -> None:
        """Keep `actor`, read from the database in `generation`, unless accounts changed since."""
        if generation != self.generation:
            return
        if token_hash not in self._entries and len(self._entries) >= self.max_entries:
            now = self.clock()
            for key in [key for key, (expires, _) in self._entries.items() if expires <= now]:
                del self._entries[key]
            if len(self._entries) >= self.max_entries:
                del self._entries[next(iter(self._entries))]
        self._entries[token_hash] = (self.clock() + self.ttl, actor)

    def clear(self) -> None:
        """Forget every token: a token, its user or their role changed."""
        self._entries.clear()
        self.generation += 1
