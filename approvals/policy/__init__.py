"""Standing rules: which calls are allowed, denied or routed to whom, without asking each time.

Rules are versioned rows (`approvals.store.policy_rules`) written by admins (the web app,
the API, `approvals rules apply rules.yaml`) or made by a reviewer's approve-and-remember.
The rules in force are compiled once per change and evaluated once per requested call, in
the call lifecycle, so every engine gets them: a rule's outcome and version are stored on
the call and in the audit log.

- `rules`: a rule's definition (`RuleSpec`), its effects and precedence;
- `conditions`: CEL conditions over the call;
- `evaluation`: a compiled `RuleSet` and its `decide`;
- `outcomes`: what an outcome writes on a call;
- `files`: rules files (YAML) and their diff;
- `remember`: the narrow rule an approve-and-remember makes;
- `lint`: rules that can never match or that others shadow.
"""

from __future__ import annotations

from .conditions import VARIABLES, ConditionFailed, InvalidCondition, compile_condition
from .evaluation import NO_RULE, AskedCall, Failure, Outcome, RuleSet, StoredRule
from .files import RulesDiff, dump_rules, load_rules, parse_rules, plan_apply
from .lint import rule_flags
from .remember import MAX_REMEMBER, Remember, RememberScope, pinned_condition, remembered_rule
from .rules import Effect, InvalidRule, Kind, RuleSpec, parse_duration, parse_rule

__all__ = (
    "MAX_REMEMBER",
    "NO_RULE",
    "VARIABLES",
    "AskedCall",
    "ConditionFailed",
    "Effect",
    "Failure",
    "InvalidCondition",
    "InvalidRule",
    "Kind",
    "Outcome",
    "Remember",
    "RememberScope",
    "RuleSet",
    "RuleSpec",
    "RulesDiff",
    "StoredRule",
    "compile_condition",
    "dump_rules",
    "load_rules",
    "parse_duration",
    "parse_rule",
    "parse_rules",
    "pinned_condition",
    "plan_apply",
    "remembered_rule",
    "rule_flags",
)
