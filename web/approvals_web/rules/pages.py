"""The rules pages: admins list, write, try and retire standing rules; everyone logged in reads them.

- `/rules` lists standing and remembered rules with their flags (can never match, shadowed)
  and their condition's last failure; admins enable, disable and remove them there, and a
  reviewer revokes a rule they remembered (`store.rules.delete_rule` decides who may).
- `/rules/new` and `/rules/{name}/edit` are the form. Its condition is checked as the admin
  types (`POST /rules/check`, an htmx fragment under the field) and the rule can be tried on
  the last calls before saving (`POST /rules/dry-run`). A form is saved to `/rules` (a new
  rule) or `/rules/{name}/edit`, so a rule named `check` cannot clash with a route.
  `expected_version` travels in the form: a save over someone else's is refused (409).
- `/rules/{name}/history` shows every version, what each changed, and the audit events.

Reading is for anyone logged in: the audit log shows viewers every definition anyway.
Writing and the dry run (it reads past calls in bulk, for the form) are for admins. A
definition is checked by the core's one validator (`approvals.policy.parse_rule`), so the
form, the API (`approvals_web.rules.api`) and rules files refuse the same things in the same words.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml
from fastapi import APIRouter, Depends, Request, Response

from approvals.calls.actors import Actor
from approvals.exceptions import Conflict, UserError
from approvals.policy import (
    Effect,
    InvalidCondition,
    InvalidRule,
    Kind,
    Outcome,
    RuleSpec,
    StoredRule,
    compile_condition,
    parse_rule,
)
from approvals.service import ApprovalService, AuditEvent
from approvals.store import DryRun, Store
from approvals.store.policy_rules import MAX_DRY_RUN

from ..api.schemas import check_text
from ..auth import AdminPage, ContextDep, ReviewerPage, ViewerPage, verify_csrf
from ..pages import views
from ..pages.htmx import is_htmx, render_page, see_other

__all__ = (
    "ConditionCheck",
    "check_condition",
    "now",
    "router",
    "split_problem",
)

DRY_RUN_DEFAULT = 100


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


# --- conditions as they are typed ----------------------------------------------------------


@dataclass(frozen=True)
class ConditionCheck:
    """What the form (and `POST /api/rules/check`) says about a condition: valid, or the error and where."""

    valid: bool
    error: str | None = None
    line: int | None = None
    column: int | None = None


def check_condition(text: str) -> ConditionCheck:
    """Compile `text` as the rule will; an empty condition is valid (the rule takes every call it matches)."""
    if not text.strip():
        return ConditionCheck(True)
    try:
        check_text(text)
        compile_condition(text)
    except InvalidCondition as exc:
        return ConditionCheck(False, exc.message, exc.line, exc.column)
    except ValueError as exc:
        return ConditionCheck(False, str(exc))
    return ConditionCheck(True)


# --- the form ------------------------------------------------------------------------------

FORM_FIELDS = (
    "name",
    "description",
    "effect",
    "engine",
    "agent",
    "tool",
    "session",
    "when",
    "reason",
    "approvals",
    "groups",
    "ttl",
    "remind_before",
    "escalate_after",
    "escalate_to",
    "expires_at",
    "enabled",
)
_LIST_FIELDS = frozenset({"engine", "agent", "tool", "groups", "escalate_to"})
NEW_RULE = {"effect": "ask", "engine": "*", "agent": "*", "tool": "*", "approvals": "1", "enabled": "true"}
"""What the form for a new rule starts with."""


def _split(text: str) -> list[str]:
    """Patterns or groups typed as one text: separated by commas or new lines."""
    return [part.strip() for part in re.split(r"[,\n]", text) if part.strip()]


def duration_text(seconds: float | None) -> str:
    """Seconds as the form shows them, in the largest unit that divides them (14400 -> 4h)."""
    if seconds is None:
        return ""
    for unit, size in (("w", 604800), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return str(int(seconds)) if float(seconds).is_integer() else repr(seconds)


def form_values(spec: RuleSpec) -> dict[str, str]:
    """A stored rule as the form's fields."""
    return {
        "name": spec.name,
        "description": spec.description,
        "effect": spec.effect.value,
        "engine": ", ".join(spec.engine),
        "agent": ", ".join(spec.agent),
        "tool": ", ".join(spec.tool),
        "session": spec.session or "",
        "when": spec.when,
        "reason": spec.reason,
        "approvals": str(spec.approvals),
        "groups": ", ".join(spec.groups),
        "ttl": duration_text(spec.ttl),
        "remind_before": duration_text(spec.remind_before),
        "escalate_after": duration_text(spec.escalate_after),
        "escalate_to": ", ".join(spec.escalate_to or ()),
        "expires_at": spec.expires_at.isoformat() if spec.expires_at else "",
        "enabled": "true" if spec.enabled else "",
    }


def definition_from_form(values: Mapping[str, str]) -> dict[str, Any]:
    """The form's fields as a definition for `parse_rule`: empty fields are left to their defaults."""
    data: dict[str, Any] = {"enabled": values.get("enabled") == "true"}
    for name in FORM_FIELDS:
        text = values.get(name, "")
        if name == "enabled":
            continue
        if name in _LIST_FIELDS:
            if _split(text):
                data[name] = _split(text)
        elif text.strip():
            data[name] = text
    return data


def split_problem(text: str) -> tuple[str | None, str]:
    """`when: ...` -> ("when", "..."); a problem that names no field (a check across fields) -> (None, text)."""
    head, sep, rest = text.partition(": ")
    name = head.split(".")[0]
    return (name, rest) if sep and name in RuleSpec.model_fields else (None, text)


@dataclass
class DryRunLine:
    """One past call in the dry run's table, with what the rule alone and all rules would have done."""

    call_id: str
    created_at: dt.datetime
    agent: str
    tool: str
    args: str
    status: str
    decided_by: str | None
    rule: str
    rule_tone: str
    policy: str
    policy_tone: str


@dataclass
class DryRunView:
    """A dry run as the form shows it."""

    total: int
    matched: int
    """Calls it would decide (its condition held)."""
    failed: int
    """Calls its condition could not be evaluated for (they would ask)."""
    lines: list[DryRunLine]
    tried_enabled: bool
    """The rule is disabled: it was tried as if enabled, or it would match nothing."""


_TONES = {Effect.ALLOW: "ok", Effect.DENY: "bad", Effect.ASK: "warn"}


def _effect_words(outcome: Outcome) -> str:
    words = str(outcome.effect)
    if outcome.effect is Effect.ASK:
        if outcome.approvals > 1:
            words += f" ({outcome.approvals} approvals)"
        if outcome.groups:
            words += f" from {', '.join(outcome.groups)}"
    return words


def rule_says(outcome: Outcome) -> tuple[str, str]:
    """What the proposed rule alone would do for a call, and its tone."""
    if outcome.failures:
        return f"cannot tell ({outcome.failures[0].message}): asks", "bad"
    if outcome.effect is None:
        return "no match", ""
    return _effect_words(outcome), _TONES[outcome.effect]


def policy_says(outcome: Outcome, proposed: str) -> tuple[str, str]:
    """What all the rules, the proposed one in place, would do for a call, and its tone."""
    if outcome.effect is None:
        return "no rule: asks as its tool says", ""
    by = "this rule" if outcome.rule == proposed else outcome.rule
    return f"{_effect_words(outcome)} by {by}", _TONES[outcome.effect]


def dry_run_view(result: DryRun, spec: RuleSpec, *, tried_enabled: bool) -> DryRunView:
    lines = []
    for row in result.rows:
        rule, rule_tone = rule_says(row.rule)
        policy, policy_tone = policy_says(row.policy, spec.name)
        lines.append(
            DryRunLine(
                call_id=row.call_id,
                created_at=row.created_at,
                agent=row.agent,
                tool=row.tool,
                args=views.summarize(row.args, width=90),
                status=row.status,
                decided_by=row.decided_by,
                rule=rule,
                rule_tone=rule_tone,
                policy=policy,
                policy_tone=policy_tone,
            )
        )
    return DryRunView(len(result.rows), result.matched - result.failed, result.failed, lines, tried_enabled)


@dataclass
class RuleForm:
    """The rule form as shown: what is in each field, the problems next to them, and what saving does."""

    values: dict[str, str]
    editing: str | None = None
    """The name of the rule being edited; None for a new one."""
    expected_version: int | None = None
    """The version the form was opened at: saving is refused if someone saved another since."""
    errors: dict[str, list[str]] = field(default_factory=dict)
    """Problems by field; those about several fields sit with `effect`, whose needs they are."""
    check: ConditionCheck = ConditionCheck(True)
    message: str | None = None
    """A refusal that belongs to no field (someone saved the rule meanwhile)."""
    limit: int = DRY_RUN_DEFAULT
    tried: bool = False
    """The admin asked for a dry run: its answer, or why the rule cannot be tried."""
    dry_run: DryRunView | None = None

    @property
    def action(self) -> str:
        return f"/rules/{self.editing}/edit" if self.editing else "/rules"

    def parse(self) -> RuleSpec | None:
        """The rule the fields describe, or None with every problem put next to its field."""
        self.check = check_condition(self.values.get("when", ""))
        for name, text in self.values.items():
            try:
                check_text(text)
            except ValueError as exc:
                self.errors.setdefault(name, []).append(str(exc))
        if self.errors:
            return None
        try:
            return parse_rule(definition_from_form(self.values))
        except InvalidRule as exc:
            for problem_text in exc.problems:
                where, message = split_problem(problem_text)
                if where == "when" and not self.check.valid:
                    continue  # the condition's check says it, with its line and column
                self.errors.setdefault(where or "effect", []).append(message)
            return None

    @property
    def problems(self) -> list[str]:
        """Every problem as one line, for the dry run's answer (which replaces only its own part of the page)."""
        found = [f"{name}: {message}" for name, messages in self.errors.items() for message in messages]
        if not self.check.valid:
            where = f" (line {self.check.line}, column {self.check.column})" if self.check.line is not None else ""
            found.insert(0, f"when: {self.check.error}{where}")
        return found


async def _read_form(request: Request, editing: str | None = None) -> RuleForm:
    """The posted form; an edited rule's name comes from the URL, whatever the form says."""
    posted = await request.form()
    values = {name: str(posted.get(name) or "") for name in FORM_FIELDS}
    if editing is not None:
        values["name"] = editing
    expected = _number(posted.get("expected_version"))
    limit = _number(posted.get("limit"))
    return RuleForm(
        values,
        editing=editing,
        expected_version=expected,
        limit=DRY_RUN_DEFAULT if limit is None else max(1, min(limit, MAX_DRY_RUN)),
    )


def _number(value: object) -> int | None:
    """A hidden or number field's whole number; None when it holds none."""
    text = str(value or "").strip()
    return int(text) if re.fullmatch(r"[0-9]{1,9}", text) else None


# --- pages ---------------------------------------------------------------------------------

router = APIRouter(dependencies=[Depends(verify_csrf)], include_in_schema=False)  # pages, not the API


def matches_text(spec: RuleSpec) -> str:
    """Which calls a rule looks at, in a few words: the patterns that are not `*`."""
    parts = [
        f"{label} {', '.join(patterns)}"
        for label, patterns in (("engine", spec.engine), ("agent", spec.agent), ("tool", spec.tool))
        if patterns != ["*"]
    ]
    if spec.session:
        parts.append(f"session {spec.session}")
    return " · ".join(parts) or "every call"


@dataclass
class RuleLine:
    """A rule as one line of the list."""

    rule: StoredRule
    matches: str
    flags: list[str]
    may_remove: bool


async def _list_context(service: ApprovalService, actor: Actor, message: str | None = None) -> dict[str, Any]:
    lines = [
        RuleLine(
            rule=found.rule,
            matches=matches_text(found.rule.spec),
            flags=found.flags,
            may_remove=service.may_remove_rule(found.rule, actor),
        )
        for found in await service.flagged_rules(now=now())
    ]
    return {
        "standing": [line for line in lines if line.rule.kind is Kind.STANDING],
        "remembered": [line for line in lines if line.rule.kind is Kind.REMEMBERED],
        "may_write": actor.can("admin"),
        "message": message,
    }


async def _list_page(request: Request, service: ApprovalService, actor: Actor, message: str | None = None) -> Response:
    return render_page(request, "rules.html", await _list_context(service, actor, message), block="rules")


def _form_page(request: Request, form: RuleForm, *, status: int = 200) -> Response:
    return render_page(request, "rule_form.html", {"form": form}, status=status)


@router.get("/rules")
async def rules_page(request: Request, actor: ViewerPage, context: ContextDep) -> Response:
    return await _list_page(request, context.service, actor)


@router.get("/rules/new")
async def new_rule(request: Request, actor: AdminPage) -> Response:
    return _form_page(request, RuleForm(dict(NEW_RULE)))


@router.post("/rules")
async def create_rule(request: Request, actor: AdminPage, context: ContextDep) -> Response:
    form = await _read_form(request)
    spec = form.parse()
    if spec is None:
        return _form_page(request, form, status=422)
    existing = await context.service.find_rule(spec.name)
    if existing is not None and not existing.deleted:
        form.errors["name"] = [f"a rule named {spec.name} exists already: edit it instead"]
        return _form_page(request, form, status=422)
    form.expected_version = existing.version if existing else 0  # someone creating it meanwhile is a conflict
    return await _save(request, context.service, actor, form, spec)


@router.post("/rules/check")
async def check_page(request: Request, actor: AdminPage) -> Response:
    """The condition's check, as the admin types it (htmx swaps it in under the field)."""
    when = str((await request.form()).get("when") or "")
    form = RuleForm({"when": when}, check=check_condition(when))
    return render_page(request, "rule_form.html", {"form": form}, block="when_check")


@router.post("/rules/dry-run")
async def dry_run_page(request: Request, actor: AdminPage, context: ContextDep) -> Response:
    """What the form's rule would have decided over the last calls; the whole form again without htmx."""
    editing = str((await request.form()).get("editing") or "") or None
    form = await _read_form(request, editing)
    form.tried = True
    typed_name = form.values["name"]
    form.values["name"] = typed_name.strip() or "new-rule"  # a rule needs no name to be tried
    spec = form.parse()
    form.values["name"] = typed_name
    if spec is None:
        return render_page(request, "rule_form.html", {"form": form}, block="dry_run", status=422)
    result = await context.service.dry_run_rule(spec, form.limit)
    form.dry_run = dry_run_view(result, spec, tried_enabled=not spec.enabled)
    return render_page(request, "rule_form.html", {"form": form}, block="dry_run")


@router.get("/rules/{name}/edit")
async def edit_rule(request: Request, name: str, actor: AdminPage, context: ContextDep) -> Response:
    rule = await context.service.current_rule(name)
    return _form_page(request, RuleForm(form_values(rule.spec), editing=name, expected_version=rule.version))


@router.post("/rules/{name}/edit")
async def save_rule(request: Request, name: str, actor: AdminPage, context: ContextDep) -> Response:
    await context.service.current_rule(name)  # 404 for a rule that is not there
    form = await _read_form(request, name)
    spec = form.parse()
    if spec is None:
        return _form_page(request, form, status=422)
    return await _save(request, context.service, actor, form, spec)


async def _save(request: Request, service: ApprovalService, actor: Actor, form: RuleForm, spec: RuleSpec) -> Response:
    try:
        await service.save_rule(spec, actor=actor, expected_version=form.expected_version)
    except Conflict as exc:
        form.message = f"Not saved: {exc}. Open the rule again to see its current version, then redo your change."
        return _form_page(request, form, status=409)
    except UserError as exc:
        form.message = f"Not saved: {exc}"
        return _form_page(request, form, status=422)
    return see_other("/rules")


@router.post("/rules/{name}/enable")
async def enable_rule(request: Request, name: str, actor: AdminPage, context: ContextDep) -> Response:
    rule = await context.service.set_rule_enabled(name, True, actor=actor)
    return await _changed(request, context.service, actor, f"Enabled {name} (version {rule.version}).")


@router.post("/rules/{name}/disable")
async def disable_rule(request: Request, name: str, actor: AdminPage, context: ContextDep) -> Response:
    rule = await context.service.set_rule_enabled(name, False, actor=actor)
    return await _changed(request, context.service, actor, f"Disabled {name} (version {rule.version}).")


@router.post("/rules/{name}/delete")
async def delete_rule(request: Request, name: str, actor: ReviewerPage, context: ContextDep) -> Response:
    """Remove a rule: admins any, a reviewer one they remembered (the store decides)."""
    await context.service.delete_rule(name, actor=actor)
    return await _changed(request, context.service, actor, f"Removed {name}; its history remains.")


async def _changed(request: Request, service: ApprovalService, actor: Actor, message: str) -> Response:
    """After a change from the list: the list again (htmx), or back to it."""
    if not is_htmx(request):
        return see_other("/rules")
    return await _list_page(request, service, actor, message)


@dataclass
class VersionLine:
    """One version of a rule, with what changed from the one before."""

    rule: StoredRule
    changes: str
    definition: str


def _changes(newer: StoredRule, older: StoredRule | None) -> str:
    if newer.deleted:
        return "removed"
    if older is None or older.deleted:
        return "created"
    before, after = older.spec.model_dump(mode="json"), newer.spec.model_dump(mode="json")
    changed = [name for name in after if before.get(name) != after[name]]
    return "changed " + ", ".join(changed) if changed else "saved unchanged"


@router.get("/rules/{name}/history")
async def rule_history(request: Request, name: str, actor: ViewerPage, context: ContextDep) -> Response:
    versions = await context.store.rules.rule_versions(name)
    older: list[StoredRule | None] = [*versions[1:], None]
    lines = [
        VersionLine(rule, _changes(rule, previous), yaml.safe_dump(rule.spec.definition(), sort_keys=False))
        for rule, previous in zip(versions, older, strict=True)
    ]
    current = versions[0]
    flags = [] if current.deleted else await context.service.rule_flags(name, now=now())
    return render_page(
        request,
        "rule_history.html",
        {
            "rule": current,
            "matches": matches_text(current.spec),
            "flags": flags,
            "versions": lines,
            "events": await _events(context.store, name),
            "may_write": actor.can("admin"),
        },
    )


async def _events(store: Store, name: str) -> list[tuple[AuditEvent, Any]]:
    """The rule's audit events, newest first, each with the version it wrote."""
    page = await store.audit.audit_events(subject_id=name, limit=500)
    return [
        (event, event.details.get("version") if isinstance(event.details, dict) else None)
        for event in page.items
        if event.subject_type == "rule"
    ]
