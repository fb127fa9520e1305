"""`Store`: one object over one database, holding the store's aggregates as parts.

Callers name the aggregate whose rows an operation changes or reads: `store.calls.decide(...)`.
The split is by what each operation writes:

- `store.runs` (`runs.Runs`): the `runs` rows and their messages: start (also already paused),
  claim, lease, mark executing, append steps, pause, finish, release, cancel, retry; a run's
  reads and history.
- `store.calls` (`calls.Calls`): the `tool_calls` rows and their decisions: decide, expire, a
  gate's request, wait, hand out and settle; the reads of calls, the inbox and a reviewer's options.
- `store.rules` (`policy_rules.Rules`): the standing rules' versions: save, enable, delete,
  apply a file, approve and remember, dry run.
- `store.conversations` (`conversations.Conversations`): chat conversations' records and
  entries, and the paused runs they open.
- `store.people` (`people.People`): accounts, API tokens, sign-in sessions, reviewers' identities.
- `store.outbound` (`outbound.Outbound`): channel messages, e-mail links, follow-ups.
- `store.audit` (`audit_log.AuditLog`): the audit log's reads and its verification.

What aggregates share is given to them, not inherited: `store.policy`, the rules in force
compiled once per `Store` (`policy_evaluation.PolicyEvaluation`), which runs, calls, rules and
conversations all evaluate by, so a rule change any of them reads is the rule set all of them
use; and the tool definitions this process stored, which runs and calls skip sending again.
Every aggregate runs its transactions on the same database, backend and notifier (`StoreBase`).
"""

from __future__ import annotations

from .audit_log import AuditLog
from .backends.database import Database
from .backends.notify import Notifier
from .calls import Calls
from .conversations import Conversations
from .outbound import Outbound
from .people import People
from .policy_evaluation import PolicyEvaluation
from .policy_rules import Rules
from .runs import Runs

__all__ = ("Store",)


class Store:
    """The store's aggregates over one database, one notifier and one rule set in force."""

    def __init__(self, db: Database, notifier: Notifier | None = None) -> None:
        self.db = db
        self.backend = db.backend
        self.notifier = notifier or db.backend.notifier(db)
        self.policy = PolicyEvaluation(db)
        tool_versions: set[str] = set()  # one for runs and calls: a version's definition never changes
        self.runs = Runs(db, self.notifier, policy=self.policy, tool_versions=tool_versions)
        self.calls = Calls(db, self.notifier, policy=self.policy, tool_versions=tool_versions)
        self.rules = Rules(db, self.notifier, policy=self.policy, runs=self.runs, calls=self.calls)
        self.conversations = Conversations(db, self.notifier, policy=self.policy)
        self.people = People(db, self.notifier)
        self.outbound = Outbound(db, self.notifier)
        self.audit = AuditLog(db, self.notifier)
