"""The application's front door: what the web app, the API and the CLI call.

It joins the store (durable state) with the agent registry (the tools' validators), so a
reviewer's edited arguments are checked by the same validator that checked the model's,
a run can only be started for an agent this process knows, and a resume can be run on
the spot and waited for.

Every change a person makes goes through here (decide, approve and remember, cancel or
retry a run, write rules, change users, log in), so the web pages, the JSON API, Slack
and the e-mail links share one path for each. What comes back is named here too (`Call`,
`Run`, `Decision`, `AuditEvent`, `User`, `EmailLink`): callers read those and never import
the store's tables.
"""

from __future__ import annotations

import datetime as dt
import enum
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, TypeAlias, TypeVar

import anyio
from anyio.abc import TaskGroup
from typing_extensions import TypeVarTuple

from . import tracing
from .calls import CallRequest, clock, validate_request, validate_with_schema
from .calls.bounded_jsonschema import TooCostly, quick_pass
from .calls.canonical import digest
from .calls.options import CallOptions, CallRefusal
from .calls.states import RESUMABLE_RUN_STATUSES, SETTLED_RUN_STATUSES
from .calls.tools import ArgsValidator
from .calls.verdicts import Approve, EditAndApprove, Verdict
from .engines import EngineKind, get_engine
from .engines.view import ModelRequest, ModelResponse, as_view
from .exceptions import Conflict, InvalidArguments, InvalidEdit, NotFound, ToolRetryError
from .logs import with_call, with_run
from .policy import Kind, Remember, RulesDiff, RuleSpec, StoredRule, rule_flags
from .store import RUNS_CHANNEL, Actor, DryRun, LoginAttempt, Store
from .store.email_links import LinkProblem, link_problem
from .store.errors import is_transient
from .store.models import AuditEventRow, DecisionRow, EmailLinkRow, RunRow, ScimGroupRow, ToolCallRow, UserRow
from .store.people.identities import ProviderLogin
from .store.people.provisioning import ProvisionedUser
from .store.queries import ReviewFacts
from .worker.resumer import AgentRegistry, Resumer

__all__ = (
    "ApprovalService",
    "AuditEvent",
    "Call",
    "Decision",
    "EmailLink",
    "EmailLinkRefused",
    "EmailLinkUse",
    "FlaggedRule",
    "LinkRefusal",
    "LinkUsed",
    "Login",
    "ProvisionedGroup",
    "Run",
    "RunStory",
    "User",
)

Call: TypeAlias = ToolCallRow
"""A tool call that asked a person, as read: its arguments, status, decisions' outcome."""
Run: TypeAlias = RunRow
"""A run (or a gate session), as read."""
Decision: TypeAlias = DecisionRow
"""One person's (or rule's) verdict on a call."""
AuditEvent: TypeAlias = AuditEventRow
"""One entry of the audit log's hash chain."""
User: TypeAlias = UserRow
"""An inbox user: role, groups, contact."""
EmailLink: TypeAlias = EmailLinkRow
"""A single-use link in a notification e-mail."""
ProvisionedGroup: TypeAlias = ScimGroupRow
"""A group an identity provider made over SCIM: its id and name (members are the users naming it)."""

logger = logging.getLogger("approvals.service")
T = TypeVar("T")
Ts = TypeVarTuple("Ts")


@dataclass(frozen=True, kw_only=True)
class RunStory:
    """What a run's page and a call's page tell about the run, read together."""

    run: Run
    calls: list[Call]
    """Its calls that asked a person, oldest first."""
    history: list[ModelRequest | ModelResponse]
    """The conversation as stored, in our message types whichever engine ran it."""
    decisions: list[Decision]
    remembered: frozenset[tuple[str, int]]
    """(name, version) of the remembered rules among those that decided its calls."""
    follow_ups: list[AuditEvent]
    """Reminders, escalations and fallbacks made for its calls."""


@dataclass(frozen=True, kw_only=True)
class FlaggedRule:
    """A rule in force with its flags (why it can never match, which rule shadows it)."""

    rule: StoredRule
    flags: list[str]


class LinkRefusal(enum.Enum):
    """Why an e-mail link that is itself good (`LinkProblem`: unknown, used, expired) decides nothing now."""

    RECIPIENT_GONE = "recipient_gone"
    """The account it was sent to is disabled or gone."""
    DECIDED = "decided"
    """The call is no longer open."""
    ARGS_CHANGED = "args_changed"
    """The arguments were edited after the mail was sent: its links no longer apply."""
    ALREADY_APPROVED = "already_approved"
    """The recipient's approval is counted already (a quorum still waits for others)."""
    NOT_ALLOWED = "not_allowed"
    """The recipient may not decide this call (its options say why)."""


@dataclass(frozen=True, kw_only=True)
class EmailLinkUse:
    """An e-mail link that would decide now: its call, its recipient deciding through e-mail, and their options."""

    link: EmailLink
    call: Call
    actor: Actor
    options: CallOptions


@dataclass(frozen=True, kw_only=True)
class EmailLinkRefused:
    """An e-mail link that decides nothing now, and why."""

    problem: LinkProblem | LinkRefusal
    link: EmailLink | None = None
    call: Call | None = None
    """The call, when the link names one that exists."""
    why_not: str | None = None
    """The recipient's options' own words, for `ALREADY_APPROVED` and `NOT_ALLOWED`."""


@dataclass(frozen=True, kw_only=True)
class Login:
    """What a login came to: a session for the user, or why not."""

    user: User | None
    session_id: str | None = None
    retry_after: int | None = None
    """Seconds until logging in may be tried again, when it is locked."""


class ApprovalService:
    """Starting runs, deciding calls and resuming runs, with validation and permissions."""

    def __init__(
        self,
        store: Store,
        registry: AgentRegistry,
        *,
        worker_id: str | None = None,
        background: TaskGroup | None = None,
    ) -> None:
        self.store = store
        self.registry = registry
        self.resumer = Resumer(store, registry, worker_id=worker_id)
        self.background = background
        """Where resumes started by `resume_now` run, so they outlive the request that asked."""

    async def start_run(self, agent_name: str, prompt: str, *, actor: Actor, deps: Any = None) -> str:
        """Queue a run of a registered agent; returns its id."""
        registered = self.registry.get(agent_name)  # NotFound for an agent this deployment does not know
        engine = registered.engine.name if registered.engine is not None else "native"
        return await self.store.runs.start_run(agent_name, prompt, actor=actor, deps=deps, engine=engine)

    def registered_tool(self, agent_name: str, tool_name: str) -> ArgsValidator | None:
        """The tool an agent registered in this process has under that name, if any."""
        if agent_name not in self.registry:
            return None
        return self.registry.get(agent_name).agent.tools.get(tool_name)

    async def request_call(
        self, request: CallRequest, *, actor: Actor, hand_out: bool = False
    ) -> tuple[ToolCallRow, bool]:
        """Ask people about one call of an agent that runs elsewhere; returns the call and whether it is new.

        The arguments are validated against the request's JSON Schema, else the registered
        tool of that name, else taken as any JSON object; `InvalidArguments` lists the errors.
        `hand_out`: the caller runs a call a standing rule allows at once, so it is stored handed
        out (`executing`) in the same transaction.
        """
        tool = self.registered_tool(request.source, request.tool_name) if request.json_schema is None else None
        validated = await _off_the_loop_if_slow(validate_request, request, tool)
        return await self.store.calls.request_call(validated, actor=actor, hand_out=hand_out)

    async def validate_edit(self, call: ToolCallRow, args: Any) -> dict[str, Any]:
        """A reviewer's edited arguments, checked by the validator that checked the call's own.

        That is the tool's own validator for a registered agent's call, and the JSON Schema
        stored with the call for one that was requested with a schema (a gate's). `InvalidEdit`
        lists the field errors.
        """
        tool = self.registered_tool(call.agent_name, call.tool_name)
        if tool is not None:
            try:
                validated = tool.validate_args(args if isinstance(args, dict | str) else {})
            except ToolRetryError as exc:
                raise InvalidEdit(call.tool_name, exc.errors, exc.message) from None
            return tool.dump_args(validated)
        run = await self.store.runs.get_run(call.run_id)
        if get_engine(run.engine).kind is not EngineKind.GATE:
            raise NotFound(f"Tool {call.tool_name!r} of agent {call.agent_name!r} is not available to validate edits")
        definition = await self.store.calls.tool_definition(call.tool_version)
        try:
            schema = definition.parameters_json_schema
            return await _off_the_loop_if_slow(validate_with_schema, call.tool_name, schema, args)
        except InvalidArguments as exc:
            raise InvalidEdit(exc.tool_name, exc.errors, str(exc)) from None

    async def decide(self, call_id: str, verdict: Verdict, *, actor: Actor) -> ToolCallRow:
        """Record a verdict; edits are validated first and nothing is saved when they fail."""
        with with_call(call_id):  # lines logged while deciding name the call
            if isinstance(verdict, EditAndApprove):
                call = await self.store.calls.get_call(call_id)
                edited = await self.validate_edit(call, verdict.args)
                verdict = EditAndApprove(args=edited, args_digest=verdict.args_digest)
            with tracing.deciding(call_id, verdict) as step:
                decided, run_context = await self.store.calls.record_verdict(call_id, verdict, actor=actor)
                step.found(decided, run_context)
            with with_run(decided.run_id), tracing.within(step):  # the line names the run, the call and its trace
                logger.info("call %s (%s) decided by %s: %s", call_id, decided.tool_name, actor.id, decided.status)
            return decided

    async def resumable_run(self, run_id: str) -> RunRow:
        """The run, when it can be resumed now (ready, or being resumed); `Conflict` when it cannot."""
        run = await self.store.runs.get_run(run_id)
        if run.status not in RESUMABLE_RUN_STATUSES:
            raise Conflict(f"Run {run_id!r} is {run.status}, not ready to resume", status=run.status)
        return run

    async def resume_now(self, run_id: str, *, wait: float = 30.0) -> RunRow:
        """Continue a ready run in this process, waiting up to `wait` seconds for it to settle.

        The resume itself is never cut short by the wait: abandoning a run midway would leave
        its lease held and an executing call's outcome unknown. With a `background` task group
        (the web app's) it goes on there after the wait; without one, the wait ends when it does.
        If another worker already holds the run, wait for that worker instead.
        """
        async with self.store.notifier.listen(RUNS_CHANNEL) as changes:
            with anyio.move_on_after(wait):
                if self.background is not None:
                    self.background.start_soon(self._resume_logged, run_id)
                else:
                    with anyio.CancelScope(shield=True):
                        await self.resumer.resume(run_id)
                while (await self.store.runs.get_run(run_id)).status not in SETTLED_RUN_STATUSES:
                    with anyio.move_on_after(1.0):  # a missed wake-up costs at most a second
                        while await changes.receive() != run_id:
                            pass
        return await self.store.runs.get_run(run_id)

    async def _resume_logged(self, run_id: str) -> None:
        """A resume in the app's task group: its failure is logged, never allowed to end the app's other tasks."""
        try:
            await self.resumer.resume(run_id)
        except Exception as exc:
            if is_transient(exc):
                logger.warning("run %s: resume stopped by a database outage (%s); a worker retries", run_id, exc)
            else:
                logger.exception("run %s: resume failed", run_id)

    # -- decisions beyond one verdict ---------------------------------------------------------

    async def approve_and_remember(
        self, call_id: str, remember: Remember, *, actor: Actor, args_digest: str | None = None
    ) -> tuple[Call, StoredRule]:
        """Approve a call and allow calls like it for a while (a narrow remembered rule)."""
        with with_call(call_id):
            with tracing.deciding(call_id, Approve()) as step:
                call, rule = await self.store.rules.approve_and_remember(
                    call_id, remember, actor=actor, args_digest=args_digest
                )
                step.found(call)
            with with_run(call.run_id), tracing.within(step):
                logger.info("call %s approved by %s, remembered as rule %s", call_id, actor.id, rule.name)
            return call, rule

    async def settle_call(self, call_id: str, outcome: Any, result: Any = None, *, actor: Actor) -> Call:
        """Record what came of an approved call an agent ran elsewhere (only its asker or an admin may)."""
        return await self.store.calls.settle_call(call_id, outcome, result, actor=actor)

    async def check_email_link(self, token: str, *, now: dt.datetime | None = None) -> EmailLinkUse | EmailLinkRefused:
        """What the link `token` would do for its recipient now, or why nothing (the links' rules, in one place).

        A link decides only while it is unused and unexpired, its recipient's account is enabled,
        the call is open with the arguments the mail showed, and the recipient may take its action.
        """
        link = await self.store.outbound.email_link(token)
        if link is None:
            return EmailLinkRefused(problem=LinkProblem.UNKNOWN)
        try:
            call = await self.store.calls.get_call(link.call_id)
        except NotFound:
            return EmailLinkRefused(problem=LinkProblem.UNKNOWN, link=link)
        refused = partial(EmailLinkRefused, link=link, call=call)
        try:
            actor = await self.store.people.reviewer_actor(await self.store.people.get_user(link.username))
        except NotFound:
            actor = None
        if actor is None:  # before expiry: a deactivated recipient's links expired too, but "expired" would mislead
            return refused(problem=LinkRefusal.RECIPIENT_GONE)
        problem = link_problem(link, now or clock.now())
        if problem is not None:
            return refused(problem=problem)
        if not call.is_open:
            return refused(problem=LinkRefusal.DECIDED)
        if call.current_digest != link.args_digest:
            return refused(problem=LinkRefusal.ARGS_CHANGED)
        actor = replace(actor, channel="email")
        may = (await self.options_for(actor, [call]))[call.id]
        if link.action == "approve":
            refusal, why_not = may.approve_refusal, may.why_not_approve
        else:
            refusal, why_not = may.decide_refusal, may.why_not_decide
        if refusal is CallRefusal.ALREADY_APPROVED:
            return refused(problem=LinkRefusal.ALREADY_APPROVED, why_not=why_not)
        if why_not is not None:
            return refused(problem=LinkRefusal.NOT_ALLOWED, why_not=why_not)
        return EmailLinkUse(link=link, call=call, actor=actor, options=may)

    async def decide_by_email_link(self, token: str, verdict: Verdict, *, actor: Actor, call_id: str) -> Call:
        """Use a single-use e-mail link: claim it (one of any number of clicks wins), then decide as its recipient.

        `LinkUsed` when the link was claimed already or ran out; the caller checked the link and
        its recipient's rights before (`email_link`), so nothing is claimed for a decision it refuses.
        """
        claimed = await self.store.outbound.claim_email_link(token)
        if not isinstance(claimed, EmailLinkRow):
            raise LinkUsed(claimed)
        return await self.decide(call_id, verdict, actor=actor)

    # -- runs ---------------------------------------------------------------------------------

    async def cancel_run(self, run_id: str, *, actor: Actor, reason: str | None = None) -> Run:
        """Stop a run (admins): its calls that never ran are cancelled; the run as it is now."""
        await self.store.runs.cancel_run(run_id, actor=actor, reason=reason)
        logger.info("run %s cancelled by %s", run_id, actor.id)
        return await self.store.runs.get_run(run_id)

    async def retry_run(self, run_id: str, *, actor: Actor) -> Run:
        """Queue a failed run again from its stored history (admins); the run as it is now."""
        await self.store.runs.retry_run(run_id, actor=actor)
        logger.info("run %s queued again by %s", run_id, actor.id)
        return await self.store.runs.get_run(run_id)

    async def run_story(self, run_id: str) -> RunStory:
        """A run with its calls, decisions, conversation and follow-ups, for its pages."""
        calls = await self.store.calls.run_calls(run_id)
        return RunStory(
            run=await self.store.runs.get_run(run_id),
            calls=calls,
            history=await self.history(run_id),
            decisions=await self.store.calls.decisions_for_run(run_id),
            remembered=await self.remembered_among(calls),
            follow_ups=await self.store.outbound.follow_up_events(run_id),
        )

    async def options_for(self, actor: Actor, calls: Sequence[Call]) -> dict[str, CallOptions]:
        """What `actor` may do with each call, and why not: the rules `decide` refuses by, read in one query."""
        facts = await self.store.calls.review_facts([call.id for call in calls])
        return {call.id: (facts.get(call.id) or _NO_FACTS).options(actor, call) for call in calls}

    async def remembered_among(self, calls: Sequence[Call]) -> frozenset[tuple[str, int]]:
        """(name, version) of the remembered rules among those that decided or routed these calls."""
        return await self.store.rules.remembered_rule_versions(_rule_names(calls))

    async def history(self, run_id: str) -> list[ModelRequest | ModelResponse]:
        """A run's stored conversation in our message types, whichever engine ran it."""
        return as_view(await self.store.runs.load_history(run_id))

    # -- rules --------------------------------------------------------------------------------

    async def find_rule(self, name: str) -> StoredRule | None:
        """A rule's latest version (a removed rule's too), or None when there never was one."""
        try:
            return await self.store.rules.get_rule(name)
        except NotFound:
            return None

    async def current_rule(self, name: str) -> StoredRule:
        """A rule in force (enabled or not); a removed one is `NotFound`."""
        rule = await self.store.rules.get_rule(name)
        if rule.deleted:
            raise NotFound(f"No rule {name!r}: it was removed (its history remains)")
        return rule

    async def flagged_rules(self, *, now: dt.datetime | None = None) -> list[FlaggedRule]:
        """Every rule in force with its flags, judged against the groups that have members."""
        rules = await self.store.rules.list_rules()
        members = await self.store.people.group_names()
        flags = rule_flags(rules, now=now or clock.now(), groups_with_members=members)
        return [FlaggedRule(rule=rule, flags=flags.get(rule.name, [])) for rule in rules]

    async def rule_flags(self, name: str, *, now: dt.datetime | None = None) -> list[str]:
        """One rule's flags among the rules in force."""
        return next((found.flags for found in await self.flagged_rules(now=now) if found.rule.name == name), [])

    @staticmethod
    def may_remove_rule(rule: StoredRule, actor: Actor) -> bool:
        """Whether `delete_rule` lets `actor` remove `rule`: admins any, a reviewer a rule they remembered."""
        mine = rule.kind is Kind.REMEMBERED and rule.author == actor.id and actor.can("reviewer")
        return mine or actor.can("admin")

    async def save_rule(self, spec: RuleSpec, *, actor: Actor, expected_version: int | None = None) -> StoredRule:
        """Write a rule's new version (admins); a `Conflict` if someone saved over `expected_version`."""
        rule = await self.store.rules.save_rule(spec, actor=actor, expected_version=expected_version)
        logger.info("rule %s saved by %s (version %s)", rule.name, actor.id, rule.version)
        return rule

    async def set_rule_enabled(self, name: str, enabled: bool, *, actor: Actor) -> StoredRule:
        """Enable or disable a rule (admins): a new version unless it already is as asked."""
        return await self.store.rules.set_rule_enabled(name, enabled, actor=actor)

    async def delete_rule(self, name: str, *, actor: Actor) -> StoredRule:
        """Remove a rule: admins any, a reviewer one they remembered; the version that removed it."""
        rule = await self.store.rules.delete_rule(name, actor=actor)
        logger.info("rule %s removed by %s", name, actor.id)
        return rule

    async def apply_rules(
        self, specs: Sequence[RuleSpec], *, actor: Actor, prune: bool = False, dry_run: bool = False
    ) -> RulesDiff:
        """Make the standing rules those of a rules file (admins); idempotent."""
        return await self.store.rules.apply_rules(specs, actor=actor, prune=prune, dry_run=dry_run)

    async def dry_run_rule(self, spec: RuleSpec, limit: int) -> DryRun:
        """What `spec` would have decided over the last calls, tried as the kind of rule it would replace.

        A disabled rule is tried as if enabled, or it would match nothing.
        """
        existing = await self.find_rule(spec.name)
        kind = existing.kind if existing is not None and not existing.deleted else Kind.STANDING
        tried = spec if spec.enabled else spec.model_copy(update={"enabled": True})
        return await self.store.rules.dry_run_rule(tried, limit=limit, kind=kind)

    # -- people -------------------------------------------------------------------------------

    async def log_in(self, username: str, password: str, *, address: str, max_age: int, previous: str | None) -> Login:
        """Check a password (throttled by account and address) and open a session; `previous` is closed."""
        attempt: LoginAttempt = await self.store.people.attempt_login(username, password, address=address)
        if attempt.user is None or attempt.retry_after is not None:
            return Login(user=None, retry_after=attempt.retry_after)
        if previous:
            await self.store.people.close_session(previous)
        session_id = await self.store.people.open_session(attempt.user.username, max_age=max_age)
        return Login(user=attempt.user, session_id=session_id)

    async def log_out(self, session_id: str) -> None:
        """Close a session: every copy of its cookie is logged out."""
        await self.store.people.close_session(session_id)

    async def set_user_groups(self, username: str, groups: Sequence[str], *, actor: Actor) -> User:
        """Set a user's groups exactly (admins): who may approve routed calls."""
        return await self.store.people.set_user_groups(username, groups, actor=actor)

    async def set_user_contact(self, username: str, *, actor: Actor, **changes: str | None) -> User:
        """Set a user's e-mail and Slack member id (`email`, `slack_user_id`; None removes one)."""
        return await self.store.people.set_user_contact(username, actor=actor, **changes)

    # -- sign-in with an identity provider, and its provisioning (SCIM) -----------------------

    async def provider_login(self, login: ProviderLogin, *, max_age: int, previous: str | None) -> tuple[User, str]:
        """A provider's verified sign-in: the user made or refreshed from its claims, and a session opened for them
        (`previous` closed); a `SignInRefused` when the claims map to no role or the user is disabled."""
        user = await self.store.people.provider_login(login)
        if previous:
            await self.store.people.close_session(previous)
        return user, await self.store.people.open_session(user.username, max_age=max_age)

    async def record_sign_in_failure(self, provider: str, issuer: str, reason: str) -> None:
        """Audit a sign-in the provider's answer did not complete (a replayed state, a bad token)."""
        await self.store.people.record_sign_in_failure(provider, issuer, reason)

    async def save_sign_in_state(self, key: str, value: str, expires_in: int) -> None:
        """Keep a sign-in's state, nonce and PKCE verifier until its callback, in the database (any process)."""
        await self.store.people.save_sign_in_state(key, value, expires_in)

    async def take_sign_in_state(self, key: str) -> str | None:
        """A sign-in's kept state, removed as it is read: a replayed callback finds nothing."""
        return await self.store.people.take_sign_in_state(key)

    async def drop_sign_in_state(self, key: str) -> bool:
        return await self.store.people.drop_sign_in_state(key)

    async def provision_user(self, wanted: ProvisionedUser, *, role: str, actor: Actor) -> User:
        return await self.store.people.provision_user(wanted, role=role, actor=actor)

    async def replace_user(self, user_id: int, wanted: ProvisionedUser, *, actor: Actor) -> User:
        """A provisioned user as the provider now says (deactivation takes away sessions, tokens, links, approvals)."""
        return await self.store.people.replace_user(user_id, wanted, actor=actor)

    async def delete_provisioned_user(self, user_id: int, *, actor: Actor) -> None:
        await self.store.people.delete_provisioned_user(user_id, actor=actor)

    async def provision_group(
        self, name: str, *, external_id: str | None, members: Iterable[int], actor: Actor
    ) -> ProvisionedGroup:
        return await self.store.people.provision_group(name, external_id=external_id, members=members, actor=actor)

    async def replace_group(
        self, group_id: int, name: str, *, external_id: str | None, members: Iterable[int], actor: Actor
    ) -> ProvisionedGroup:
        return await self.store.people.replace_group(
            group_id, name, external_id=external_id, members=members, actor=actor
        )

    async def delete_group(self, group_id: int, *, actor: Actor) -> None:
        await self.store.people.delete_group(group_id, actor=actor)

    async def record_scim_refusal(self, actor_id: str, endpoint: str, details: dict[str, Any]) -> None:
        """Audit a provisioning request refused as bad or not allowed: nothing else of it is written."""
        await self.store.people.record_scim_refusal(actor_id, endpoint, details)

    @staticmethod
    def args_digest(args: dict[str, Any]) -> str:
        """The digest a reviewer's client sends back to bind an approval to what it showed."""
        return digest(args)


_NO_FACTS = ReviewFacts(started_by=None, standing={})
"""A call's review facts when the store has none to add (no run starter, no standing approvals)."""


class LinkUsed(Conflict):
    """An e-mail link that was claimed already, or ran out, between its check and its use."""

    def __init__(self, problem: LinkProblem) -> None:
        super().__init__(f"The link cannot be used: {problem.name.lower()}")
        self.problem = problem


def _rule_names(calls: Sequence[Call]) -> set[str]:
    """The rules these calls name (that decided or routed them)."""
    return {call.rule_name for call in calls if call.rule_name}


async def _off_the_loop_if_slow(check: Callable[[*Ts], T], *args: *Ts) -> T:
    """`check(*args)` here if it takes at most a few milliseconds, else again in a worker thread.

    A caller's schema may take up to a second to check (`calls.bounded_jsonschema`), which must never be
    the event loop's; a thread hop costs ~200 µs, more than most checks take, so each is tried first
    where it is, within `QUICK_SECONDS`.
    """
    try:
        with quick_pass():
            return check(*args)
    except TooCostly:
        return await anyio.to_thread.run_sync(check, *args)
