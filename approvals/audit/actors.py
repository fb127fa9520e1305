"""Who an audit event's actor is, in words: a person, a service (an API token), a rule or the system.

Actors are stored as ids: a username, `token:<name>`, `rule:<name>`, `system`, or a worker's
`host:pid:hex`. A reviewer should not have to know those shapes to read the log.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

__all__ = ("ActorKind", "ActorWords", "actor_words")

ActorKind = Literal["person", "service", "rule", "system"]

_WORKER = re.compile(r"^(?P<host>[^:]+):(?P<pid>\d+):(?P<tag>[0-9a-f]{4,16})$")


@dataclass(frozen=True, kw_only=True)
class ActorWords:
    """An actor as a reader sees it."""

    kind: ActorKind
    """Which sort of actor: filters and styles use it."""
    text: str
    """The actor in a sentence: "alice", "service ci-bot", "rule small-refunds", "the system (worker on host vm)"."""
    name: str
    """The actor's own name (the username, the token's or rule's name, the host)."""


def actor_words(actor: str) -> ActorWords:
    """`actor` (a stored actor id) in words."""
    if actor == "system":
        return ActorWords(kind="system", text="the system", name="system")
    if actor.startswith("rule:"):
        name = actor.removeprefix("rule:")
        return ActorWords(kind="rule", text=f"rule {name}", name=name)
    if actor.startswith("token:"):
        name = actor.removeprefix("token:")
        return ActorWords(kind="service", text=f"service {name}", name=name)
    if (worker := _WORKER.match(actor)) is not None:
        host, pid = worker["host"], worker["pid"]
        return ActorWords(kind="system", text=f"the system (worker on host {host}, process {pid})", name=host)
    return ActorWords(kind="person", text=actor, name=actor)
