"""The cache of verified bearer tokens: how long an entry lives, what a change to accounts does, how big it gets."""

from __future__ import annotations

from approvals.store import Actor
from approvals.store.token_cache import TokenCache

ALICE = Actor("alice", "reviewer")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_verified_token_is_kept_for_the_ttl_and_no_longer() -> None:
    clock = Clock()
    cache = TokenCache(ttl=5.0, clock=clock)
    cache.put("h1", ALICE, generation=cache.generation)
    clock.now = 4.9
    assert cache.get("h1") == ALICE
    clock.now = 5.0
    assert cache.get("h1") is None
    assert cache.get("unknown") is None


def test_a_lookup_under_way_while_accounts_change_is_not_kept() -> None:
    cache = TokenCache(ttl=5.0, clock=Clock())
    began = cache.generation  # the lookup read the token before the revocation committed
    cache.clear()  # the revocation
    cache.put("h1", ALICE, generation=began)
    assert cache.get("h1") is None
    cache.put("h1", ALICE, generation=cache.generation)
    assert cache.get("h1") == ALICE


def test_clear_forgets_every_token() -> None:
    cache = TokenCache(ttl=5.0, clock=Clock())
    for key in ("h1", "h2"):
        cache.put(key, ALICE, generation=cache.generation)
    cache.clear()
    assert cache.get("h1") is None and cache.get("h2") is None


def test_the_cache_never_grows_past_its_limit() -> None:
    clock = Clock()
    cache = TokenCache(ttl=5.0, max_entries=2, clock=clock)
    cache.put("old", ALICE, generation=0)
    clock.now = 1.0
    cache.put("h1", ALICE, generation=0)
    cache.put("h2", ALICE, generation=0)  # full: the oldest makes room
    assert cache.get("old") is None and cache.get("h1") == ALICE and cache.get("h2") == ALICE
    clock.now = 6.5  # h1 and h2 expired; a new token takes the room of expired ones
    cache.put("h3", ALICE, generation=0)
    assert len(cache) == 1 and cache.get("h3") == ALICE
