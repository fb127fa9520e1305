"""Rules files: the standing rules as YAML, applied idempotently (GitOps) with a printed diff.

A file is a mapping with a `rules` list; each entry is a `RuleSpec`. Applying a file
changes each rule whose definition differs (a new version), creates the new ones and,
with `prune`, removes standing rules the file no longer holds. Remembered rules are
never touched by a file. A file with any error changes nothing: every entry is checked
first, and every problem is reported at once with the entry it belongs to.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from .rules import InvalidRule, RuleSpec, parse_rule

__all__ = ("RulesDiff", "dump_rules", "load_rules", "plan_apply")


class _Loader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key written twice in one mapping (YAML would keep the last silently).

    Only `true` and `false` are booleans, as in YAML 1.2: a rule named `off` or a reason
    that says `No` stay text (`enabled: no` still reads as false: the rule's field takes it).
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[str] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # what a merge key (`<<: *defaults`) brings may be overridden
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, str):
                continue
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    "while reading a mapping", node.start_mark, f"the key {key!r} is written twice", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


_BOOL = "tag:yaml.org,2002:bool"
_Loader.yaml_implicit_resolvers = {
    first: [(tag, pattern) for tag, pattern in resolvers if tag != _BOOL]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(_BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))


def load_rules(text: str, *, source: str = "rules file") -> list[RuleSpec]:
    """The rules a YAML (or JSON) document holds; `InvalidRule` lists every problem in it."""
    try:
        data = yaml.load(text, Loader=_Loader)  # noqa: S506  # _Loader is a safe loader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise InvalidRule([f"not valid YAML{where}: {problem}"], source) from None
    if isinstance(data, list):
        data = {"rules": data}
    if not isinstance(data, dict) or set(data) != {"rules"}:
        # an empty file is refused too: applied with `prune`, it would remove every rule by mistake
        raise InvalidRule(
            ["the file is a mapping with one key, 'rules': a list of rules (`rules: []` for none)"], source
        )
    entries = data["rules"]
    if not isinstance(entries, list):
        raise InvalidRule(["'rules' must be a list of rules (`rules: []` for none)"], source)
    return parse_rules(entries, source=source)


def parse_rules(entries: Sequence[Any], *, source: str = "rules") -> list[RuleSpec]:
    """Every entry checked; `InvalidRule` names each bad entry (by position and name) with its problems."""
    specs: list[RuleSpec] = []
    problems: list[str] = []
    seen: dict[str, int] = {}
    for position, entry in enumerate(entries, start=1):
        label = f"rule {position}"
        if not isinstance(entry, Mapping):
            problems.append(f"{label}: a rule is a mapping of name, effect, ..., not {entry!r}")
            continue
        name = entry.get("name")
        if isinstance(name, str):
            label += f" ({name})"
            name = name.strip()  # as the rule will hold it
            if name in seen:  # a name used twice is a problem even when one of the two has others
                problems.append(f"{label}: the name {name!r} is used by rule {seen[name]} too")
            seen.setdefault(name, position)
        try:
            specs.append(parse_rule(entry))
        except InvalidRule as exc:
            problems.extend(f"{label}: {problem}" for problem in exc.problems)
    if problems:
        raise InvalidRule(problems, source)
    return specs


def dump_rules(specs: Iterable[RuleSpec]) -> str:
    """Rules as a YAML file that `load_rules` reads back to the same rules."""
    rules = [spec.definition() for spec in specs]
    return yaml.safe_dump({"rules": rules}, sort_keys=False, allow_unicode=True, width=100)


@dataclass(frozen=True)
class RuleChange:
    """One rule a file changes: its name, the fields that differ (before, after)."""

    name: str
    fields: dict[str, tuple[Any, Any]]


@dataclass
class RulesDiff:
    """What applying a file does (or did)."""

    created: list[RuleSpec] = field(default_factory=list)
    changed: list[tuple[RuleSpec, RuleChange]] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.created or self.changed or self.removed)

    def lines(self) -> list[str]:
        """The diff as lines to print: `+` created, `~` changed (with each field), `-` removed."""
        out = [f"+ {spec.name} ({spec.effect})" for spec in self.created]
        for spec, change in self.changed:
            out.append(f"~ {spec.name}")
            out.extend(f"    {name}: {before!r} -> {after!r}" for name, (before, after) in change.fields.items())
        out.extend(f"- {name}" for name in self.removed)
        return out or ["no changes"]

    def summary(self) -> dict[str, Any]:
        return {
            "created": [spec.name for spec in self.created],
            "changed": [{"name": c.name, "fields": {k: list(v) for k, v in c.fields.items()}} for _, c in self.changed],
            "removed": list(self.removed),
            "unchanged": list(self.unchanged),
        }


def plan_apply(current: Mapping[str, RuleSpec], wanted: Sequence[RuleSpec], *, prune: bool) -> RulesDiff:
    """The diff from the standing rules in force (`current`, by name) to `wanted`."""
    diff = RulesDiff()
    for spec in wanted:
        before = current.get(spec.name)
        if before is None:
            diff.created.append(spec)
            continue
        old, new = before.model_dump(mode="json"), spec.model_dump(mode="json")
        fields = {name: (old[name], new[name]) for name in new if old.get(name) != new[name]}
        if fields:
            diff.changed.append((spec, RuleChange(spec.name, fields)))
        else:
            diff.unchanged.append(spec.name)
    if prune:
        names = {spec.name for spec in wanted}
        diff.removed = sorted(name for name in current if name not in names)
    return diff
