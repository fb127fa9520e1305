"""The rules API under /api/rules: read, write, check, dry-run and apply standing rules as JSON.

- `GET /api/rules`, `GET /api/rules/{name}` (its `ETag` is the version), `GET .../versions`;
- `PUT /api/rules/{name}` creates or changes a rule (`If-Match` or `expected_version`: only
  over that version, else 409), `POST .../enabled`, `DELETE`;
- `POST /api/rules/check` says whether a condition compiles, and where it does not;
- `POST /api/rules/dry-run` tries a rule on the last calls without saving it;
- `POST /api/rules/apply` makes the standing rules those of a rules file (YAML or JSON):
  idempotent, all or nothing, answered with its diff.

Tokens: `rules:read` to read (role viewer) and check a condition (role reviewer: reviewers
write conditions when they remember an approval); `rules:write` (role admin) to change,
apply and dry-run. `DELETE` takes a reviewer too: the one who remembered the rule
(`store.rules.delete_rule` decides). Errors are RFC 9457 problems, as in the rest of the API; an
invalid rule is a 422 whose `errors` name each field, with the condition's `line` and
`column` when it is not valid CEL. The page routes are `approvals_web.rules.pages`.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Sequence
from typing import Annotated, Any, Self

import yaml
from fastapi import APIRouter, Body, Depends, Header, HTTPException, Path, Query, Request, Response
from fastapi.responses import JSONResponse
from pydantic import AfterValidator, BaseModel, Field, StringConstraints

from approvals.calls.actors import Actor
from approvals.policy import (
    Effect,
    InvalidRule,
    Kind,
    Outcome,
    RulesDiff,
    RuleSpec,
    StoredRule,
    load_rules,
    parse_rule,
    parse_rules,
)
from approvals.service import ApprovalService
from approvals.store.policy_rules import MAX_DRY_RUN

from ..api.problems import PROBLEM_JSON, problem
from ..api.routes import EVERY_ROUTE, authenticate_writes, errors
from ..api.schemas import Name, Problem, Strict, check_json, check_text
from ..auth import ContextDep, require, verify_csrf
from .pages import DRY_RUN_DEFAULT, check_condition, now, split_problem

__all__ = ("router",)

READ_SCOPE = "rules:read"
WRITE_SCOPE = "rules:write"

RulesReadAPI = Annotated[Actor, require("viewer", scope=READ_SCOPE)]
RulesWriteAPI = Annotated[Actor, require("admin", scope=WRITE_SCOPE)]
RulesRemoveAPI = Annotated[Actor, require("reviewer", scope=WRITE_SCOPE)]
RulesCheckAPI = Annotated[Actor, require("reviewer", scope=READ_SCOPE)]
"""Reviewers write conditions too (approve-and-remember); like every POST, it refuses viewers."""
RuleName = Annotated[Name, Path(description="The rule's name.")]

router = APIRouter(
    prefix="/api/rules",
    tags=["rules"],
    dependencies=[Depends(authenticate_writes), Depends(verify_csrf)],
    responses=errors(*EVERY_ROUTE),
)


def _inline_defs(schema: dict[str, Any]) -> dict[str, Any]:
    """A pydantic JSON schema with its `$defs` put in place, so it can sit inside the OpenAPI document."""
    defs = schema.pop("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return resolve(defs[ref.removeprefix("#/$defs/")])
            return {key: resolve(value) for key, value in node.items()}
        if isinstance(node, list):
            return [resolve(item) for item in node]
        return node

    resolved: dict[str, Any] = resolve(schema)
    return resolved


RULE_SCHEMA = _inline_defs(RuleSpec.model_json_schema())
"""A rule's definition, as the API, the form and rules files take it."""
RULES_FILE_SCHEMA = {
    "type": "object",
    "properties": {"rules": {"type": "array", "items": RULE_SCHEMA}},
    "required": ["rules"],
    "additionalProperties": False,
}
YAML_TYPES = frozenset({"application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml"})


def _problem_doc(description: str) -> dict[str, Any]:
    return {
        "model": Problem,
        "description": description,
        "content": {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}},
    }


_INVALID_RULE: dict[int | str, dict[str, Any]] = {
    422: _problem_doc(
        "The rule is not valid: `errors` names each field; a condition that is not valid CEL adds its "
        "`line` and `column`. Nothing was saved."
    )
}


class RuleVersionOut(BaseModel):
    """One version of a rule, as stored."""

    name: str
    version: int
    kind: Kind
    """standing (written by an admin) or remembered (made by a reviewer's approve-and-remember)."""
    author: str
    created_at: dt.datetime
    """When this version was saved."""
    deleted: bool
    """This version removed the rule."""
    definition: dict[str, Any]
    """The rule as a rules file holds it (defaults left out)."""
    last_error: str | None
    """Why its condition last failed to evaluate for a call, if it ever did (such a call asks)."""
    last_error_at: dt.datetime | None

    @classmethod
    def build(cls, rule: StoredRule, **extra: Any) -> Self:
        return cls(
            name=rule.name,
            version=rule.version,
            kind=rule.kind,
            author=rule.author,
            created_at=rule.created_at,
            deleted=rule.deleted,
            definition=rule.spec.definition(),
            last_error=rule.last_error,
            last_error_at=rule.last_error_at,
            **extra,
        )


class RuleOut(RuleVersionOut):
    """A rule's current version, and what is wrong with it."""

    effect: Effect
    enabled: bool
    expires_at: dt.datetime | None
    flags: list[str]
    """Why it can never match, or which rule shadows it."""


class RuleList(BaseModel):
    """Rules by name."""

    items: list[RuleOut]


class RuleVersionList(BaseModel):
    """A rule's versions, newest first."""

    items: list[RuleVersionOut]


class EnabledIn(Strict):
    enabled: bool


class CheckIn(Strict):
    """A condition to check."""

    when: Annotated[str, StringConstraints(max_length=10_000), AfterValidator(check_text)]


class CheckOut(BaseModel):
    """Whether a condition compiles; if not, the error and where (1-based line and column, when known)."""

    valid: bool
    error: str | None
    line: int | None
    column: int | None


class DryRunIn(Strict):
    """A rule to try on the last calls, without saving it."""

    rule: dict[str, Any] = Field(description="The rule's definition, as `PUT /api/rules/{name}` takes it.")
    limit: int = Field(DRY_RUN_DEFAULT, ge=1, le=MAX_DRY_RUN, description="How many of the last calls to try.")


class FailureOut(BaseModel):
    rule: str
    version: int
    error: str


class OutcomeOut(BaseModel):
    """What rules decided for a call: `effect` null when none matched (the call asks as its tool says)."""

    effect: Effect | None
    rule: str | None
    version: int | None
    reason: str
    approvals: int
    groups: list[str]
    ttl: float | None
    remembered: bool
    failures: list[FailureOut]
    """Conditions that could not be evaluated for the call (each counts as ask)."""
    matched: list[str]

    @classmethod
    def build(cls, outcome: Outcome) -> OutcomeOut:
        return cls(
            effect=outcome.effect,
            rule=outcome.rule,
            version=outcome.version,
            reason=outcome.reason,
            approvals=outcome.approvals,
            groups=list(outcome.groups),
            ttl=outcome.ttl,
            remembered=outcome.remembered,
            failures=[FailureOut(rule=f.rule, version=f.version, error=f.message) for f in outcome.failures],
            matched=list(outcome.matched),
        )


class DryRunRowOut(BaseModel):
    """One past call: what happened to it, what the rule alone would do, and all rules with it."""

    call_id: str
    run_id: str
    created_at: dt.datetime
    agent: str
    tool: str
    args: Any
    status: str
    decided_by: str | None
    rule: OutcomeOut
    policy: OutcomeOut


class DryRunOut(BaseModel):
    """A dry run over the last calls, newest first."""

    matched: int
    """Calls the rule would have had a say in, those it could not evaluate (which ask) included."""
    failed: int
    """Calls its condition could not be evaluated for."""
    rows: list[DryRunRowOut]


class RuleChangeOut(BaseModel):
    name: str
    fields: dict[str, list[Any]]
    """Each changed field: [before, after]."""


class ApplyOut(BaseModel):
    """What applying a rules file did (or, with `dry_run`, would do)."""

    dry_run: bool
    created: list[str]
    changed: list[RuleChangeOut]
    removed: list[str]
    unchanged: list[str]
    lines: list[str]
    """The diff as lines: `+` created, `~` changed (with each field), `-` removed."""

    @classmethod
    def build(cls, diff: RulesDiff, *, dry_run: bool) -> ApplyOut:
        summary = diff.summary()
        return cls(
            dry_run=dry_run,
            created=summary["created"],
            changed=[RuleChangeOut(**change) for change in summary["changed"]],
            removed=summary["removed"],
            unchanged=summary["unchanged"],
            lines=diff.lines(),
        )


async def _rule_out(service: ApprovalService, rule: StoredRule) -> RuleOut:
    return _out(rule, await service.rule_flags(rule.name, now=now()))


def _out(rule: StoredRule, flags: list[str]) -> RuleOut:
    spec = rule.spec
    return RuleOut.build(rule, effect=spec.effect, enabled=spec.enabled, expires_at=spec.expires_at, flags=flags)


def _etag(response: Response, rule: StoredRule) -> None:
    response.headers["ETag"] = f'"{rule.version}"'


def invalid_rule(problems: Sequence[str], detail: str, *, when: Any = None, subject: str = "rule") -> JSONResponse:
    """A 422 problem naming each bad field; the condition's line and column when it is not valid CEL.

    The position is counted in the condition as sent (the stored one is stripped of surrounding blanks).
    """
    check = check_condition(when) if isinstance(when, str) else None
    found = []
    for text in problems:
        name, message = split_problem(text)
        if name == "when" and check is not None and check.line is not None:
            message = f"{check.error} at line {check.line}, column {check.column}"
        found.append({"loc": name or subject, "msg": message})
    extra: dict[str, Any] = {}
    if check is not None and check.line is not None:
        extra = {"line": check.line, "column": check.column}
    return problem(422, "Invalid rule", detail, errors=found, **extra)


def _parse_body(data: dict[str, Any]) -> RuleSpec | JSONResponse:
    """A definition from the API: storable JSON, then the core's validator."""
    try:
        check_json(data)
    except ValueError as exc:
        return invalid_rule([str(exc)], f"Invalid rule: {exc}")
    try:
        return parse_rule(data)
    except InvalidRule as exc:
        return invalid_rule(exc.problems, str(exc), when=data.get("when"))


_IF_MATCH = re.compile(r'\s*(?:W/)?"?(\d{1,9})"?\s*')


def expected_version(if_match: str | None, query: int | None) -> int | None:
    """The version the client edited: `expected_version`, else the `If-Match` ETag (`*`: any)."""
    if query is not None:
        return query
    if if_match is None or if_match.strip() == "*":
        return None
    found = _IF_MATCH.fullmatch(if_match)
    if found is None:
        raise HTTPException(400, 'If-Match takes the ETag a rule was read with (its version, e.g. "3")')
    return int(found.group(1))


@router.get("", summary="The rules (standing and remembered), with their flags", responses=errors(401, 422))
async def list_rules(
    actor: RulesReadAPI,
    context: ContextDep,
    kind: Annotated[Kind | None, Query(description="Only standing or only remembered rules.")] = None,
) -> RuleList:
    every = await context.service.flagged_rules(now=now())
    return RuleList(items=[_out(f.rule, f.flags) for f in every if kind is None or f.rule.kind is kind])


@router.get(
    "/{name}",
    summary="A rule's current version",
    description="The `ETag` header is the version: send it back as `If-Match` to save only over that version.",
    responses=errors(401, 404, 422, e404="No such rule, or it was removed (its versions remain)."),
)
async def get_rule(name: RuleName, actor: RulesReadAPI, context: ContextDep, response: Response) -> RuleOut:
    rule = await context.service.current_rule(name)
    _etag(response, rule)
    return await _rule_out(context.service, rule)


@router.get("/{name}/versions", summary="Every version of a rule, newest first", responses=errors(401, 404, 422))
async def rule_versions(name: RuleName, actor: RulesReadAPI, context: ContextDep) -> RuleVersionList:
    versions = await context.store.rules.rule_versions(name)
    return RuleVersionList(items=[RuleVersionOut.build(rule) for rule in versions])


@router.put(
    "/{name}",
    response_model=RuleOut,
    summary="Create or change a rule (admin)",
    description=(
        "The body is the rule's definition (its `name` may be left out). A change is a new version; an unchanged "
        "definition writes nothing. Send `If-Match` (the ETag of `GET`) or `expected_version` to refuse the save "
        "(409) if someone saved another version since; `expected_version=0` creates only. 201 when created."
    ),
    responses={
        201: {"model": RuleOut, "description": "Created."},
        **errors(400, 401, 403, 409, e409="Someone saved another version since the one expected."),
        **_INVALID_RULE,
    },
    openapi_extra={"requestBody": {"required": True, "content": {"application/json": {"schema": RULE_SCHEMA}}}},
)
async def put_rule(
    name: RuleName,
    body: Annotated[dict[str, Any], Body()],
    actor: RulesWriteAPI,
    context: ContextDep,
    response: Response,
    if_match: Annotated[str | None, Header(max_length=100)] = None,
    expected: Annotated[int | None, Query(alias="expected_version", ge=0, le=999_999_999)] = None,
) -> Response | RuleOut:
    version = expected_version(if_match, expected)
    if body.setdefault("name", name) != name:
        problems = [f"name: the body names {body['name']!r}, the path {name!r}"]
        return invalid_rule(problems, "Invalid rule: the body's name is not the path's")
    spec = _parse_body(body)
    if isinstance(spec, JSONResponse):
        return spec
    before = await context.service.find_rule(name)
    rule = await context.service.save_rule(spec, actor=actor, expected_version=version)
    if before is None or before.deleted:
        response.status_code = 201
        response.headers["Location"] = f"/api/rules/{name}"
    _etag(response, rule)
    return await _rule_out(context.service, rule)


@router.post(
    "/{name}/enabled",
    summary="Enable or disable a rule (admin)",
    description="A new version, unless the rule already is as asked.",
    responses=errors(401, 403, 404, 422),
)
async def set_enabled(
    name: RuleName, body: Annotated[EnabledIn, Body()], actor: RulesWriteAPI, context: ContextDep, response: Response
) -> RuleOut:
    rule = await context.service.set_rule_enabled(name, body.enabled, actor=actor)
    _etag(response, rule)
    return await _rule_out(context.service, rule)


@router.delete(
    "/{name}",
    summary="Remove a rule (admin, or the reviewer who remembered it)",
    description="The answer is the version that removed it; its history remains (`/versions`).",
    responses=errors(401, 403, 404, 422),
)
async def delete_rule_api(name: RuleName, actor: RulesRemoveAPI, context: ContextDep) -> RuleVersionOut:
    return RuleVersionOut.build(await context.service.delete_rule(name, actor=actor))


@router.post(
    "/check",
    summary="Check a condition (CEL) as a rule would compile it",
    description="Always 200: `valid`, or the `error` with its 1-based `line` and `column` when known (reviewers).",
    responses=errors(401, 403, 422),
)
async def check(body: Annotated[CheckIn, Body()], actor: RulesCheckAPI) -> CheckOut:
    found = check_condition(body.when)
    return CheckOut(valid=found.valid, error=found.error, line=found.line, column=found.column)


@router.post(
    "/dry-run",
    response_model=DryRunOut,
    summary="What a rule would have decided over the last calls, alone and with the rules in force (admin)",
    description="Nothing is saved. A disabled rule is tried as if enabled.",
    responses={**errors(401, 403), **_INVALID_RULE},
)
async def dry_run(body: Annotated[DryRunIn, Body()], actor: RulesWriteAPI, context: ContextDep) -> Response | DryRunOut:
    spec = _parse_body(body.rule)
    if isinstance(spec, JSONResponse):
        return spec
    result = await context.service.dry_run_rule(spec, body.limit)
    rows = [
        DryRunRowOut(
            call_id=row.call_id,
            run_id=row.run_id,
            created_at=row.created_at,
            agent=row.agent,
            tool=row.tool,
            args=row.args,
            status=row.status,
            decided_by=row.decided_by,
            rule=OutcomeOut.build(row.rule),
            policy=OutcomeOut.build(row.policy),
        )
        for row in result.rows
    ]
    return DryRunOut(matched=result.matched, failed=result.failed, rows=rows)


@router.post(
    "/apply",
    response_model=ApplyOut,
    summary="Make the standing rules those of a rules file (admin)",
    description=(
        'The body is a rules file, `{"rules": [...]}`, as YAML (`application/yaml` or `text/yaml`) or JSON; an '
        "empty body or one without `rules` is refused, so a truncated upload never prunes every rule. Each rule "
        "that differs gets a new version, in one transaction; applying the same file again changes nothing. "
        "A file with any error changes nothing (422 lists every problem). Remembered rules are left alone; "
        "`prune` removes standing rules the file does not hold; `dry_run` only says what would change."
    ),
    responses={
        **errors(401, 403, 409, e409="A rule in the file has the name of a remembered rule."),
        415: _problem_doc("The body is neither YAML nor JSON."),
        **_INVALID_RULE,
    },
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": RULES_FILE_SCHEMA},
                "application/yaml": {"schema": RULES_FILE_SCHEMA},
            },
        }
    },
)
async def apply(
    request: Request,
    actor: RulesWriteAPI,
    context: ContextDep,
    prune: Annotated[bool, Query(description="Remove standing rules the file does not hold.")] = False,
    dry_run: Annotated[bool, Query(description="Only say what would change.")] = False,
) -> Response | ApplyOut:
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type != "application/json" and media_type not in YAML_TYPES:
        return problem(415, "Unsupported Media Type", "Send the rules file as application/yaml, or as JSON")
    try:
        text = (await request.body()).decode("utf-8")
    except UnicodeDecodeError:
        return invalid_rule(["the file is not UTF-8 text"], "Invalid rules file", subject="rules")
    try:
        specs = rules_file(text, media_type)
        check_json([spec.definition() for spec in specs])
    except InvalidRule as exc:
        return invalid_rule(exc.problems, str(exc), subject="rules")
    except ValueError as exc:
        return invalid_rule([str(exc)], f"Invalid rules file: {exc}", subject="rules")
    diff = await context.service.apply_rules(specs, actor=actor, prune=prune, dry_run=dry_run)
    return ApplyOut.build(diff, dry_run=dry_run)


def rules_file(text: str, media_type: str) -> list[RuleSpec]:
    """The rules of a file sent to the API: exactly `{"rules": [...]}`, as YAML or JSON.

    Stricter than a file on disk (`load_rules` takes an empty file, or a bare list, as its
    rules): a truncated or empty upload is refused rather than applied, with `prune`, as "no rules".
    """
    try:
        data = json.loads(text) if media_type == "application/json" else yaml.safe_load(text)
    except yaml.YAMLError:
        return load_rules(text)  # which says where the YAML is broken
    except ValueError as exc:
        raise InvalidRule([f"not valid JSON: {exc}"], "rules file") from None
    if not isinstance(data, dict) or set(data) != {"rules"} or not isinstance(data["rules"], list):
        raise InvalidRule(['the body is a mapping with one key, "rules": a list of rules'], "rules file")
    return parse_rules(data["rules"], source="rules file")
