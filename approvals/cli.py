"""The `approvals` command: serve the app, run workers, migrate, manage users, tokens and rules, seed a demo.

Settings come from command-line options, then APPROVALS_* environment variables, then a
config file (`--config approvals.env`, KEY=value lines). Errors are one clear line, never
a traceback: a wrong database URL, an agent path that does not import, a port in use.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from collections.abc import Awaitable, Callable
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import typer

from .calls import clock
from .calls.actors import TOKEN_SCOPES

if TYPE_CHECKING:
    from .policy import InvalidRule, Outcome, RuleSpec, StoredRule
    from .store import DryRun, Store
    from .worker.resumer import AgentRegistry

# Start-up (issue 36): a command imports the store, the worker, the policy and the web app inside
# itself, when it runs, so `--help` and the quick commands do not pay for what they never use
# (tests/test_cli_help.py checks that importing this module brings none of them). The few values
# the options need before a command runs are copied here; the same test checks they still match.
DEFAULT_LEASE_SECONDS = 15.0
"""`approvals.worker.resumer.DEFAULT_LEASE_SECONDS`, the default of `worker --lease-seconds`."""
DEFAULT_POLL_INTERVAL = 30.0
"""`approvals.worker.resumer.DEFAULT_POLL_INTERVAL`, the default of `worker --poll-interval`."""
DEFAULT_WORKER_CONCURRENCY = 4
"""`approvals.worker.resumer.DEFAULT_WORKER_CONCURRENCY`, the default of `worker --concurrency`."""


class RuleKind(StrEnum):
    """`approvals.policy.Kind`, the choices of `rules list --kind`."""

    STANDING = "standing"
    REMEMBERED = "remembered"


T = TypeVar("T")
GRACEFUL_SHUTDOWN_SECONDS = 10
"""How long `serve` lets open requests finish when stopped: long polls of the gate would hold it up to their wait."""

# Plain help, without rich: rendering it with rich costs more than the rest of a `--help` (issue 36).
app = typer.Typer(
    help="Human-in-the-loop approvals for LLM agents' tool calls.", no_args_is_help=True, rich_markup_mode=None
)
db_app = typer.Typer(help="Database schema.", no_args_is_help=True, rich_markup_mode=None)
users_app = typer.Typer(help="Reviewer accounts.", no_args_is_help=True, rich_markup_mode=None)
tokens_app = typer.Typer(help="API tokens for services.", no_args_is_help=True, rich_markup_mode=None)
runs_app = typer.Typer(help="Agent runs.", no_args_is_help=True, rich_markup_mode=None)
audit_app = typer.Typer(help="The audit log.", no_args_is_help=True, rich_markup_mode=None)
rules_app = typer.Typer(
    help=(
        "Standing rules: which calls are allowed, denied or routed to whom without asking each time. "
        "`approvals rules apply rules.yaml` makes them a file's (run it in CI; `--check` detects drift)."
    ),
    no_args_is_help=True,
    rich_markup_mode=None,
)
hook_app = typer.Typer(
    help=(
        "Coding agents' pre-tool hooks. `approvals hook claude-code|codex|gemini|cursor [--wait S] [--grace S] "
        "[--fallback F] [--url U]` is the hook itself (`approvals hook claude-code --help`): it reads the CLI's "
        "hook JSON on stdin, asks the server (at --url, else APPROVALS_URL; token in APPROVALS_TOKEN) and prints "
        "the CLI's answer, or blocks the tool (exit 2) when it gets none."
    ),
    no_args_is_help=True,
    rich_markup_mode=None,
)
for sub, name in (
    (db_app, "db"),
    (users_app, "users"),
    (tokens_app, "tokens"),
    (runs_app, "runs"),
    (audit_app, "audit"),
    (rules_app, "rules"),
    (hook_app, "hook"),
):
    app.add_typer(sub, name=name)

ConfigOption = Annotated[
    Path | None, typer.Option("--config", help="A KEY=value file of APPROVALS_* settings.", exists=True, dir_okay=False)
]
DatabaseOption = Annotated[
    str | None,
    typer.Option("--database-url", envvar="APPROVALS_DATABASE_URL", help="SQLite file or PostgreSQL URL."),
]
AgentOption = Annotated[
    list[str] | None, typer.Option("--agent", help="Import path of an agent, e.g. myapp.agents:support_agent.")
]
Role = Annotated[str, typer.Option("--role", help="viewer, reviewer or admin")]
BAD_INPUT = 2
"""The exit code for input the command cannot use (a rules file with errors), as click's usage errors;
`rules apply --check` exits 1 for drift, so CI tells the two apart."""


def settings_for(config: Path | None, database_url: str | None = None, agents: list[str] | None = None) -> Any:
    """The web app's settings, with command-line values taking precedence."""
    from approvals_web.settings import Settings  # the CLI is the one place the core meets the web layer

    overrides: dict[str, Any] = {}
    if database_url:
        overrides["database_url"] = database_url
    if agents:
        overrides["agents"] = agents
    settings = Settings(_env_file=config, **overrides)  # type: ignore[call-arg]
    from .policy.sandbox import set_condition_budget  # for the rules' conditions this process evaluates

    set_condition_budget(settings.condition_budget)
    return settings


def show_logs(log_format: str = "text") -> None:
    """Print the library's INFO lines (runs paused, completed, failed) as timestamped text or JSON (`log_format`)."""
    from approvals_web.logging_setup import configure_logging  # the CLI is the one place the core meets the web layer

    configure_logging("json" if log_format == "json" else "text")


def fail(message: str) -> None:
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(1)


def run_async(function: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine, turning known failures into one-line errors."""
    import anyio
    from sqlalchemy.exc import DBAPIError, OperationalError

    from .exceptions import ApprovalsError

    try:
        return anyio.run(function)
    except ApprovalsError as exc:
        fail(str(exc))
    except (OperationalError, DBAPIError) as exc:
        from .first_run import schema_hint

        problem = str(exc.orig or exc).splitlines()[0]
        fail(f"cannot use the database: {problem}{schema_hint(problem)}")
    raise AssertionError("unreachable")


def with_store(database_url: str, action: Callable[[Store], Awaitable[T]]) -> T:
    from .first_run import missing_database
    from .store import Database, Store

    if (missing := missing_database(database_url)) is not None:  # a missing SQLite file is not created here
        fail(missing)

    async def main() -> T:
        database = Database(database_url)
        try:
            return await action(Store(database))
        finally:
            await database.dispose()

    return run_async(main)


def migrate(database_url: str) -> None:
    from sqlalchemy.exc import DBAPIError, OperationalError

    from .exceptions import ApprovalsError
    from .first_run import prepare_database
    from .store.migrate import upgrade

    try:
        prepare_database(database_url)  # the per-user data directory, on first use
        upgrade(database_url)
    except OSError as exc:
        fail(f"cannot create the database: {exc}")
    except ApprovalsError as exc:
        fail(str(exc))
    except (OperationalError, DBAPIError) as exc:
        fail(f"cannot migrate the database: {str(exc.orig or exc).splitlines()[0]}")


def load_agents(paths: list[str], *, demo: bool = False) -> AgentRegistry:
    from .exceptions import ApprovalsError
    from .worker.resumer import AgentRegistry

    registry = AgentRegistry()
    try:
        for path in paths:
            registry.load(path)
    except ApprovalsError as exc:
        fail(str(exc))
    if demo:
        from .demo import demo_agent

        registry.register(demo_agent)
    return registry


def ensure_port_free(host: str, port: int) -> None:
    import socket

    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            fail(f"cannot listen on {host}:{port}: {exc.strerror} (is another server running? use --port)")


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    database_url: DatabaseOption = None,
    agent: AgentOption = None,
    worker: Annotated[bool | None, typer.Option("--worker/--no-worker", help="Resume runs in this process.")] = None,
    demo: Annotated[bool, typer.Option("--demo/--no-demo", help="Load the demo agent and seed demo runs.")] = False,
    config: ConfigOption = None,
) -> None:
    """Start the web app (and, by default, an in-process resumer)."""
    import uvicorn

    from approvals_web.app import create_app

    settings = settings_for(config, database_url, agent)
    if worker is not None:
        settings.worker = worker
    audit_signing_key(settings)  # issue 39 B: a configured key that cannot be used stops the start, in one line
    ensure_port_free(host, port)
    migrate(settings.database_url)
    registry = load_agents(settings.agents, demo=demo)
    if demo:  # queued, not run here: the worker runs them while the app already serves
        with_store(settings.database_url, lambda store: seed_demo(store, registry, runs=len(_demo_prompts())))
        if not settings.worker:
            typer.echo("demo runs are queued; start `approvals worker --demo` to run them")
    show_logs(settings.log_format)
    from .first_run import shown_url

    typer.echo(f"Database: {shown_url(settings.database_url)}")
    with_store(settings.database_url, lambda store: tell_first_admin(store, database_url, config))
    typer.echo(f"approvals: serving http://{host}:{port}")
    uvicorn.run(
        create_app(settings, registry=registry),
        host=host,
        port=port,
        log_level="info",
        log_config=None if settings.log_format == "json" else uvicorn.config.LOGGING_CONFIG,  # JSON: uvicorn's too
        access_log=False,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,  # gate long polls and hooks ask again after a restart
    )


@app.command()
def worker(
    database_url: DatabaseOption = None,
    agent: AgentOption = None,
    lease_seconds: Annotated[
        float,
        typer.Option(
            min=1, help="Seconds a claimed run stays leased between renewals; a dead worker's run waits this long."
        ),
    ] = DEFAULT_LEASE_SECONDS,
    poll_interval: Annotated[
        float, typer.Option(min=0.1, help="Longest wait between looks for ready runs when no wake-up comes.")
    ] = DEFAULT_POLL_INTERVAL,
    concurrency: Annotated[
        int, typer.Option(min=1, help="Runs continued at once (each mostly waits for its model).")
    ] = DEFAULT_WORKER_CONCURRENCY,
    demo: Annotated[bool, typer.Option("--demo/--no-demo", help="Also serve the demo agent.")] = False,
    config: ConfigOption = None,
) -> None:
    """Resume ready runs until stopped (SIGTERM lets the runs in progress finish first)."""
    import functools

    import anyio

    from .channels.outbound import deliver_outbound
    from .worker.follow_ups import run_follow_ups
    from .worker.resumer import run_worker
    from .worker.supervise import Supervisor

    settings = settings_for(config, database_url, agent)
    registry = load_agents(settings.agents, demo=demo)
    if not registry.names:
        fail("no agents to serve: pass --agent package.module:agent (or --demo)")
    migrate(settings.database_url)  # like serve: creates a missing database, brings an old one up to date
    agents = ", ".join(registry.names)
    show_logs(settings.log_format)
    from approvals_web.telemetry import configure_tracing  # the CLI is the one place the core meets the web layer

    configure_tracing("approvals-worker")
    typer.echo(f"approvals worker: agents {agents}; up to {concurrency} runs at once; waiting for ready runs")
    outbound = settings.outbound()
    channels = [
        name
        for name, on in (
            (f"webhooks to {len(outbound.webhook_urls)} URL(s)", outbound.webhook_urls),
            ("Slack", outbound.slack),
            ("e-mail", outbound.smtp),
        )
        if on
    ]
    if channels:
        typer.echo(f"approvals worker: delivering {', '.join(channels)}, shared with any other process")

    async def work(store: Store) -> None:
        stop = anyio.Event()  # set on SIGTERM/SIGINT by run_worker: the deliverer stops with it
        resume = functools.partial(
            run_worker,
            store,
            registry,
            concurrency=concurrency,
            lease_seconds=lease_seconds,
            poll_interval=poll_interval,
            stop=stop,
            handle_signals=True,
        )
        error: Exception | None = None
        async with anyio.create_task_group() as group:  # one lease per destination: safe beside `serve` and workers
            supervisor = Supervisor(group, stop)
            if outbound.any_channel:
                supervisor.start("outbound", lambda: deliver_outbound(store, outbound, stop))
            audit_sinks = settings.audit_sinks()
            if audit_sinks.any:  # the audit log's copies in syslog and webhooks: one sender per sink, by lease
                from .audit.stream import stream_audit

                supervisor.start("audit-stream", lambda: stream_audit(store, audit_sinks, stop))
            supervisor.start(  # reminders and escalation: once per call and step, whichever process finds it
                "follow-ups",
                lambda: run_follow_ups(store, outbound.follow_ups, stop, interval=settings.follow_up_interval),
            )
            try:
                await resume()
            except Exception as exc:  # raised below as itself (one clear line), not in an exception group
                error = exc
            finally:
                stop.set()  # the deliverer hands its destinations back, then the group ends
        if error is not None:
            raise error

    with_store(settings.database_url, work)


@db_app.command("upgrade")
def db_upgrade(database_url: DatabaseOption = None, config: ConfigOption = None) -> None:
    """Create or update the tables to the latest schema."""
    from .store.migrate import current_revision

    settings = settings_for(config, database_url)
    migrate(settings.database_url)
    typer.echo(f"database at revision {current_revision(settings.database_url)}")


@db_app.command("current")
def db_current(database_url: DatabaseOption = None, config: ConfigOption = None) -> None:
    """Show the schema revision of the database and the latest one."""
    from sqlalchemy.exc import DBAPIError, OperationalError

    from .exceptions import ApprovalsError
    from .first_run import missing_database
    from .store.migrate import current_revision, head_revision

    settings = settings_for(config, database_url)
    if (missing := missing_database(settings.database_url, tables=False)) is not None:
        fail(missing)
    try:
        current = current_revision(settings.database_url)
    except ApprovalsError as exc:
        fail(str(exc))
    except (OperationalError, DBAPIError) as exc:
        fail(f"cannot use the database: {str(exc.orig or exc).splitlines()[0]}")
    head = head_revision()
    typer.echo(
        f"current: {current or 'empty'}  latest: {head}" + ("" if current == head else "  (run: approvals db upgrade)")
    )


@users_app.command("add")
def users_add(
    username: str,
    role: Role = "reviewer",
    password: Annotated[str | None, typer.Option(help="Omit to generate one (printed once).")] = None,
    sso_only: Annotated[bool, typer.Option(help="No password: the user signs in through the SSO proxy.")] = False,
    group: Annotated[
        list[str] | None,
        typer.Option("--group", help="A group the user is in (repeatable): calls a rule routes to it ask its members."),
    ] = None,
    email: Annotated[
        str | None, typer.Option(help="Where calls routed to the user are mailed (with e-mail turned on).")
    ] = None,
    database_url: DatabaseOption = None,
    config: ConfigOption = None,
) -> None:
    """Add a reviewer account."""
    from .exceptions import UserError
    from .security import new_password
    from .store import SYSTEM
    from .store.reviewer_identity import check_email

    settings = settings_for(config, database_url)
    secret = None if sso_only else (password or new_password())
    if email is not None:
        try:
            email = check_email(email)  # refused before the user is added, so a bad address adds nothing
        except UserError as exc:
            raise typer.BadParameter(str(exc), param_hint="--email") from None

    async def add(store: Store) -> Any:
        user = await store.people.create_user(username, secret, role=role, actor=SYSTEM, groups=group or None)
        if email is not None:
            user = await store.people.set_user_contact(username, actor=SYSTEM, email=email)
        return user

    user = with_store(settings.database_url, add)
    groups = f", groups {', '.join(user.groups)}" if user.groups else ""
    mail = f", {user.email}" if user.email else ""
    typer.echo(
        f"added {username} ({role}{groups}{mail})" + (f"; password: {secret}" if secret and not password else "")
    )


@users_app.command("list")
def users_list(database_url: DatabaseOption = None, config: ConfigOption = None) -> None:
    """List accounts, with their groups."""
    settings = settings_for(config, database_url)
    for user in with_store(settings.database_url, lambda store: store.people.list_users()):
        state = "disabled" if user.disabled else "active"
        groups = ",".join(user.groups or ()) or "-"
        typer.echo(f"{user.username:<24} {user.role:<9} {state:<9} {groups:<24} {user.email or '-'}")


@users_app.command("contact")
def users_contact(
    username: str,
    email: Annotated[
        str | None,
        typer.Option(help="The user's e-mail address ('' to remove): calls routed to them are mailed there."),
    ] = None,
    slack_id: Annotated[
        str | None,
        typer.Option(
            help="The user's Slack member id, e.g. U024BE7LH ('' to unlink): their clicks in Slack are theirs."
        ),
    ] = None,
    database_url: DatabaseOption = None,
    config: ConfigOption = None,
) -> None:
    """Show a user's e-mail and Slack link, or set them."""
    from .store import SYSTEM

    settings = settings_for(config, database_url)
    changes: dict[str, Any] = {}
    if email is not None:
        changes["email"] = email or None
    if slack_id is not None:
        changes["slack_user_id"] = slack_id or None

    async def contact(store: Store) -> Any:
        if not changes:
            return await store.people.get_user(username)
        return await store.people.set_user_contact(username, actor=SYSTEM, **changes)

    user = with_store(settings.database_url, contact)
    typer.echo(f"{username}: e-mail {user.email or 'none'}; Slack {user.slack_user_id or 'not linked'}")


@users_app.command("groups")
def users_groups(
    username: str,
    set_: Annotated[
        str | None, typer.Option("--set", help="Exactly these groups, comma-separated ('' for none).")
    ] = None,
    add: Annotated[list[str] | None, typer.Option("--add", help="Add the user to a group (repeatable).")] = None,
    remove: Annotated[
        list[str] | None, typer.Option("--remove", help="Take the user out of a group (repeatable).")
    ] = None,
    database_url: DatabaseOption = None,
    config: ConfigOption = None,
) -> None:
    """Show a user's groups, or change them; a rule that routes calls to a group asks its members."""
    if set_ is not None and (add or remove):
        raise typer.BadParameter("--set gives every group: use it without --add and --remove", param_hint="--set")
    from .exceptions import UserError
    from .store import SYSTEM

    settings = settings_for(config, database_url)

    async def groups(store: Store) -> list[str]:
        current = sorted((await store.people.get_user(username)).groups or ())
        if set_ is None and not add and not remove:
            return current
        if set_ is not None:
            wanted = set_.split(",")
        else:
            absent = [group for group in remove or () if group not in current]
            if absent:
                raise UserError(f"{username} is not in {absent[0]!r}; their groups: {', '.join(current) or 'none'}")
            wanted = [group for group in current if group not in (remove or ())] + list(add or ())
        return sorted((await store.people.set_user_groups(username, wanted, actor=SYSTEM)).groups or ())

    found = with_store(settings.database_url, groups)
    typer.echo(f"{username}: {', '.join(found) if found else 'no groups'}")


@users_app.command("disable")
def users_disable(username: str, database_url: DatabaseOption = None, config: ConfigOption = None) -> None:
    """Disable an account; its sessions end at their next request."""
    from .store import SYSTEM

    settings = settings_for(config, database_url)
    with_store(settings.database_url, lambda store: store.people.update_user(username, disabled=True, actor=SYSTEM))
    typer.echo(f"disabled {username}")


@users_app.command("password")
def users_password(
    username: str,
    password: Annotated[str | None, typer.Option(help="Omit to generate one (printed once).")] = None,
    database_url: DatabaseOption = None,
    config: ConfigOption = None,
) -> None:
    """Set a new password."""
    from .security import new_password
    from .store import SYSTEM

    settings = settings_for(config, database_url)
    secret = password or new_password()
    with_store(settings.database_url, lambda store: store.people.update_user(username, password=secret, actor=SYSTEM))
    typer.echo(f"password of {username} changed" + (f": {secret}" if not password else ""))


@tokens_app.command("create")
def tokens_create(
    name: str,
    role: Role = "reviewer",
    user: Annotated[
        str | None,
        typer.Option("--user", help="The person the token acts as; without it, a service token that may not approve."),
    ] = None,
    scope: Annotated[
        list[str] | None,
        typer.Option("--scope", help="Limit the token (repeatable): " + ", ".join(TOKEN_SCOPES) + "."),
    ] = None,
    database_url: DatabaseOption = None,
    config: ConfigOption = None,
) -> None:
    """Create an API token; it is printed once and only its hash is kept."""
    from .store import SYSTEM

    settings = settings_for(config, database_url)
    token = with_store(
        settings.database_url,
        lambda store: store.people.create_token(name, role=role, actor=SYSTEM, scopes=scope or None, user=user),
    )
    typer.echo(token)


@tokens_app.command("list")
def tokens_list(database_url: DatabaseOption = None, config: ConfigOption = None) -> None:
    """List tokens (never their values)."""
    settings = settings_for(config, database_url)
    for token in with_store(settings.database_url, lambda store: store.people.list_tokens()):
        state = "revoked" if token.revoked_at else "active"
        owner = token.username or "(service)"
        scopes = ",".join(token.scopes) if token.scopes else "all"
        typer.echo(f"{token.id:<5} {token.name:<24} {token.role:<9} {owner:<16} {scopes:<24} {state}")


@tokens_app.command("revoke")
def tokens_revoke(token_id: int, database_url: DatabaseOption = None, config: ConfigOption = None) -> None:
    """Revoke a token by its id (see `tokens list`)."""
    from .store import SYSTEM

    settings = settings_for(config, database_url)
    with_store(settings.database_url, lambda store: store.people.revoke_token(token_id, actor=SYSTEM))
    typer.echo(f"revoked token {token_id}")


@runs_app.command("start")
def runs_start(
    agent_name: Annotated[str, typer.Argument(metavar="AGENT")],
    prompt: str,
    deps: Annotated[str | None, typer.Option(help="Run dependencies as JSON.")] = None,
    agent: AgentOption = None,
    demo: Annotated[bool, typer.Option("--demo/--no-demo", help="Use the demo agent.")] = False,
    database_url: DatabaseOption = None,
    config: ConfigOption = None,
) -> None:
    """Start a run and take it to its end or first pause."""
    from .service import ApprovalService
    from .store import SYSTEM

    settings = settings_for(config, database_url, agent)
    registry = load_agents(settings.agents, demo=demo)
    try:
        deps_data = json.loads(deps) if deps else None
    except ValueError as exc:
        fail(f"--deps is not valid JSON: {exc}")

    async def start(store: Store) -> tuple[str, str]:
        service = ApprovalService(store, registry)
        run_id = await service.start_run(agent_name, prompt, actor=SYSTEM, deps=deps_data)
        run = await service.resume_now(run_id, wait=120)
        return run_id, run.status

    run_id, status = with_store(settings.database_url, start)
    typer.echo(f"run {run_id}: {status}")


@audit_app.command("verify")
def audit_verify(
    database_url: DatabaseOption = None,
    config: ConfigOption = None,
    checkpoints: CheckpointsOption = None,
    public_key: PublicKeyOption = None,
    bundle: Annotated[Path | None, typer.Option("--bundle", help="Check this bundle offline.", dir_okay=False)] = None,
    receipt: Annotated[
        Path | None, typer.Option("--receipt", help="Check this receipt offline.", dir_okay=False)
    ] = None,
) -> None:
    """Check the audit log's hash chain (and signed checkpoints, a bundle or a receipt); exits 1 when broken."""
    if bundle or receipt or checkpoints:
        verify_with_checkpoints(bundle, receipt, checkpoints, public_key, database_url, config)  # issue 39 B
        return
    settings = settings_for(config, database_url)
    result = verify_from_cut(settings, public_key)  # issue 39 D: from the signed checkpoint at an archive's cut
    if result.ok:
        typer.echo(f"audit log intact: {result.checked} events, head {result.head_hash}")
        return
    fail(f"audit log broken at event {result.first_bad_id}: {result.problem}")


@audit_app.command("export")
def audit_export(
    output: Annotated[Path | None, typer.Option("--output", "-o", help="File to write.")] = None,
    fmt: Annotated[str, typer.Option("--format", help="jsonl or csv")] = "jsonl",
    database_url: DatabaseOption = None,
    config: ConfigOption = None,
    bundle: Annotated[
        Path | None, typer.Option("--bundle", help="Write a bundle: events and the signed checkpoints covering them.")
    ] = None,
    from_id: Annotated[int | None, typer.Option("--from-id", help="Bundle: the first event wanted.")] = None,
    to_id: Annotated[int | None, typer.Option("--to-id", help="Bundle: the last event wanted.")] = None,
    since: Annotated[str | None, typer.Option("--since", help="Bundle: events from this time (ISO 8601).")] = None,
    until: Annotated[str | None, typer.Option("--until", help="Bundle: events before this time (ISO 8601).")] = None,
    checkpoints: CheckpointsOption = None,
) -> None:
    """Export the whole audit log, oldest first, with progress (CSV cells are spreadsheet-safe); or a bundle."""
    import csv

    from .audit.reading import tell
    from .audit_csv import CSV_COLUMNS, csv_row

    if bundle is not None:
        export_bundle(bundle, (from_id, to_id, since, until), checkpoints, database_url, config)  # issue 39 B
        return
    if output is None:
        fail("--output (or --bundle) is required")
        return
    settings = settings_for(config, database_url)
    if fmt not in ("jsonl", "csv"):
        fail("--format must be jsonl or csv")
    columns = ["id", "at", "actor", "action", "subject_type", "subject_id", "run_id", "agent_name", "tool_name",
               "details", "prev_hash", "hash"]  # fmt: skip

    async def export(store: Store) -> int:
        written = 0
        with output.open("w", newline="") as handle, typer.progressbar(length=0, label="exporting") as bar:
            writer = csv.writer(handle) if fmt == "csv" else None
            if writer:
                writer.writerow(CSV_COLUMNS)
            cursor: str | None = None
            while True:
                page = await store.audit.audit_events(after=cursor, limit=5000, newest_first=False)
                for told in await tell(store.audit, page.items):  # each with its sentence (issue 39 A)
                    event = told.event
                    if writer:
                        writer.writerow(csv_row(event, told.sentence))
                    else:
                        row = {c: getattr(event, c) for c in columns}
                        row["at"] = event.at.isoformat()
                        row["summary"] = told.sentence
                        handle.write(json.dumps(row, default=str) + "\n")
                written += len(page.items)
                bar.update(len(page.items))
                if page.next_cursor is None:
                    return written
                cursor = page.next_cursor

    count = with_store(settings.database_url, export)
    typer.echo(f"wrote {count} events to {output}")


# --- audit search (issue 39, part A: questions asked of the log) ---------------------------


def _opt(help: str) -> Any:
    return typer.Option(help=help)


@audit_app.command("search")
def audit_search(
    actor: Annotated[str | None, _opt("A person's username, or rule:<name>, token:<name>.")] = None,
    by: Annotated[str | None, _opt("Who acted: person, service, rule or system.")] = None,
    action: Annotated[str | None, _opt("An action (call.approved), or several with commas.")] = None,
    verdict: Annotated[str | None, _opt("approved (with edits), edited, denied, answered or expired.")] = None,
    agent: Annotated[str | None, _opt("An agent (or a gate's source).")] = None,
    tool: Annotated[str | None, _opt("A tool.")] = None,
    engine: Annotated[str | None, _opt("An engine (native, gate, ...).")] = None,
    rule: Annotated[str | None, _opt("A rule's name: what it decided, what names it.")] = None,
    channel: Annotated[str | None, _opt("Where a decision was made: web, api, slack, email.")] = None,
    run: Annotated[str | None, _opt("A run id.")] = None,
    since: Annotated[str | None, _opt("From: 2026-01-31, 2026-01-31T14:00 or a span back from now (7d).")] = None,
    until: Annotated[str | None, _opt("Before: a date, a time or a span back from now.")] = None,
    text: Annotated[str | None, _opt("Text in the details or the call's arguments.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=10_000, help="Events per page.")] = 50,
    after: Annotated[str | None, _opt("The cursor a previous page printed: the page after it.")] = None,
    fmt: Annotated[str, typer.Option("--format", help="table or jsonl")] = "table",
    database_url: DatabaseOption = None,
    config: ConfigOption = None,
) -> None:
    """Ask the audit log a question: events matching every filter, newest first, each as a sentence."""
    from .audit.reading import tell
    from .audit.search import parse_query
    from .exceptions import UserError

    if fmt not in ("table", "jsonl"):
        fail("--format must be table or jsonl")
    filters = {"actor": actor, "by": by, "action": action, "verdict": verdict, "agent": agent, "tool": tool}
    filters |= {"engine": engine, "rule": rule, "channel": channel, "run": run, "since": since, "until": until}
    try:
        query = parse_query({**filters, "text": text})
    except UserError as exc:
        fail(str(exc))
    settings = settings_for(config, database_url)

    async def search(store: Store) -> str | None:
        page = await store.audit.audit_events(query=query, after=after, limit=limit)
        for told in await tell(store.audit, page.items):
            event = told.event
            if fmt == "table":
                typer.echo(f"{event.id:>8}  {event.at:%Y-%m-%d %H:%M:%S}  {told.sentence}")
                continue
            row = {c: getattr(event, c) for c in ("id", "actor", "action", "subject_type", "subject_id", "run_id")}
            row |= {"at": event.at.isoformat(), "agent": event.agent_name, "tool": event.tool_name}
            row |= {"details": event.details, "prev_hash": event.prev_hash, "hash": event.hash}
            typer.echo(json.dumps({**row, "summary": told.sentence}, ensure_ascii=False, default=str))
        return page.next_cursor

    cursor = with_store(settings.database_url, search)
    if cursor is not None:
        typer.secho(f"more: --after {cursor}", err=True)


# --- audit keys, checkpoints, bundles and receipts (issue 39, part B: proof that travels) -----

CheckpointsOption = Annotated[
    Path | None,
    typer.Option("--checkpoints", help="A directory of signed checkpoint files (the directory sink).", file_okay=False),
]
PublicKeyOption = Annotated[
    Path | None,
    typer.Option("--public-key", help="The audit public key: PEM or JSON (as /.well-known/approvals-audit-key serves).",
                 dir_okay=False),
]  # fmt: skip


def audit_fail(message: str) -> NoReturn:
    """`fail`, typed as never returning."""
    fail(message)
    raise typer.Exit(1)


def audit_signing_key(settings: Any) -> Any:
    """The configured signing key (None: signing off); a configured key that cannot be used is a one-line error."""
    from .audit.signing import SigningKeyError, load_signing_key

    try:
        return load_signing_key(settings.audit_signing_config())
    except SigningKeyError as exc:
        audit_fail(str(exc))


def _public_key(path: Path | None) -> Any:
    from .audit.signing import SigningKeyError, load_public_key

    if path is None:
        audit_fail("--public-key is required to check signed checkpoints (`approvals audit public-key` prints it)")
    try:
        return load_public_key(path)
    except SigningKeyError as exc:
        audit_fail(str(exc))


def verify_with_checkpoints(
    bundle: Path | None,
    receipt: Path | None,
    checkpoints: Path | None,
    public_key: Path | None,
    database_url: str | None,
    config: Path | None,
) -> None:
    """`audit verify --bundle`, `--receipt` (offline, no database) or `--checkpoints` (the database against them)."""
    public = _public_key(public_key)
    if receipt is not None:
        from .audit.receipt import verify_receipt

        try:
            document = json.loads(receipt.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            audit_fail(f"cannot read the receipt {receipt}: {exc}")
        check = verify_receipt(document, public)
        if not check.ok:
            audit_fail(f"receipt invalid: {check.message}")
        typer.echo(check.message)
        return
    if bundle is not None:
        from .audit.bundle import verify_bundle

        try:
            report = verify_bundle(bundle, public)
        except (OSError, ValueError) as exc:
            audit_fail(f"cannot read the bundle {bundle}: {exc}")
        label = f"bundle {bundle}"
    else:
        from .audit.checkpoint_files import read_checkpoint_directory
        from .audit.checkpoints_verify import verify_database

        assert checkpoints is not None
        try:
            signed = read_checkpoint_directory(checkpoints)
        except ValueError as exc:
            audit_fail(str(exc))
        settings = settings_for(config, database_url)
        report = with_store(settings.database_url, lambda store: verify_database(store.db, public, signed))
        label = "audit log"
    if not report.ok:
        audit_fail(f"{label} {report.describe()}")
    typer.echo(f"{label} {report.describe()}")
    for note in report.notes:
        typer.echo(f"note: {note}")


def export_bundle(
    path: Path,
    bounds: tuple[int | None, int | None, str | None, str | None],
    checkpoints: Path | None,
    database_url: str | None,
    config: Path | None,
) -> None:
    """`audit export --bundle FILE`: the events wanted, widened to the signed checkpoints that cover them."""
    from .audit.bundle import write_bundle
    from .audit.checkpoint_files import read_checkpoint_directory

    from_id, to_id, since, until = bounds
    times: list[dt.datetime | None] = []
    for name, value in (("--since", since), ("--until", until)):
        try:
            parsed = dt.datetime.fromisoformat(value) if value else None
        except ValueError:
            audit_fail(f"{name} is not an ISO 8601 time: {value!r}")
        times.append(parsed.replace(tzinfo=parsed.tzinfo or dt.UTC) if parsed else None)
    signed = None
    if checkpoints is not None:
        try:
            signed = read_checkpoint_directory(checkpoints)
        except ValueError as exc:
            audit_fail(str(exc))
    settings = settings_for(config, database_url)
    written = with_store(
        settings.database_url,
        lambda store: write_bundle(
            store.db, path, from_id=from_id, to_id=to_id, since=times[0], until=times[1], checkpoints=signed
        ),
    )
    covered = f"signed up to event {written.covered_up_to}" if written.covered_up_to else "no signed checkpoint"
    typer.echo(f"wrote {written.events} events ({written.first}..) and {written.checkpoints} checkpoint(s), "
               f"{covered}, to {path}")  # fmt: skip


@audit_app.command("keygen")
def audit_keygen(
    out: Annotated[Path, typer.Option("--out", help="Where to write the private key (created 0600, never replaced).")],
) -> None:
    """Make an Ed25519 key to sign audit checkpoints; prints its public key (keep the file out of the database)."""
    from .audit.signing import SigningKeyError, generate_key_file

    try:
        key = generate_key_file(out)
    except SigningKeyError as exc:
        audit_fail(str(exc))
    typer.echo(f"wrote the private key to {out} (key id {key.key_id}); set APPROVALS_AUDIT_SIGNING_KEY_FILE={out}")
    typer.echo(key.public.pem(), nl=False)


@audit_app.command("public-key")
def audit_public_key(
    fmt: Annotated[str, typer.Option("--format", help="pem or json")] = "pem",
    config: ConfigOption = None,
) -> None:
    """Print the public key audit checkpoints are signed with (the one verifiers need)."""
    if fmt not in ("pem", "json"):
        audit_fail("--format must be pem or json")
    key = audit_signing_key(settings_for(config))
    if key is None:
        audit_fail("audit signing is off: set APPROVALS_AUDIT_SIGNING_KEY_FILE (or APPROVALS_AUDIT_SIGNING_KEY)")
    typer.echo(key.public.pem() if fmt == "pem" else json.dumps(key.public.jwk(), indent=1), nl=fmt != "pem")


@audit_app.command("checkpoint")
def audit_checkpoint(database_url: DatabaseOption = None, config: ConfigOption = None) -> None:
    """Sign a checkpoint of the audit log now (and write it to the checkpoint directory, when one is set)."""
    from .audit.checkpoint_files import DirectorySink
    from .audit.checkpoints import Checkpointer, CheckpointSink

    settings = settings_for(config, database_url)
    key = audit_signing_key(settings)
    if key is None:
        audit_fail("audit signing is off: set APPROVALS_AUDIT_SIGNING_KEY_FILE (or APPROVALS_AUDIT_SIGNING_KEY)")
    checkpoint_config = settings.audit_checkpoint_config()
    sinks: list[CheckpointSink] = [DirectorySink(checkpoint_config.directory)] if checkpoint_config.directory else []
    made = with_store(
        settings.database_url, lambda store: Checkpointer(store.db, key, checkpoint_config, sinks).make(force=True)
    )
    if not made:
        typer.echo("no new events since the last checkpoint: none made")
    for checkpoint in made:
        typer.echo(f"checkpoint {checkpoint.seq}: events up to {checkpoint.event_id}, head {checkpoint.event_hash}")


# --- audit retention (issue 39, part D: archive old events to a bundle, verify what remains from the cut) ---


def verify_from_cut(settings: Any, public_key: Path | None) -> Any:
    """The chain verified from the genesis, or from the signed checkpoint at the newest archive cut.

    The cut's signature is checked with `--public-key`, else with the configured signing key's public half.
    """
    from .store.audit import verify_audit_chain
    from .store.audit_retention import AuditRetention

    public = _public_key(public_key) if public_key else getattr(audit_signing_key(settings), "public", None)

    async def verify(store: Store) -> Any:
        async with store.db.read() as session:
            result = await verify_audit_chain(session, public.verify if public is not None else None)
        cut = await AuditRetention(store.db).last_cut()
        if cut is not None and result.ok:
            signed = "its signature checked" if public is not None else "its signature not checked: no public key"
            typer.echo(f"note: events {cut.first_event_id}..{cut.event_id} were archived to {cut.bundle} on "
                       f"{cut.at:%Y-%m-%d %H:%M} UTC; the chain starts at signed checkpoint {cut.checkpoint_seq} "
                       f"({signed})")  # fmt: skip
        return result

    return with_store(settings.database_url, verify)


@audit_app.command("archive")
def audit_archive(
    before: Annotated[str, typer.Option("--before", help="Archive events before this date or time (ISO 8601, UTC).")],
    bundle: Annotated[
        Path, typer.Option("--bundle", help="The bundle file to write (never replaced).", dir_okay=False)
    ],
    public_key: PublicKeyOption = None,
    checkpoints: CheckpointsOption = None,
    actor: Annotated[str, typer.Option("--actor", help="Who archives, as the audit log names them.")] = "system",
    database_url: DatabaseOption = None,
    config: ConfigOption = None,
) -> None:
    """Write the events before a date to a bundle, then delete them, up to the newest signed checkpoint before it.

    The bundle is written, fsynced and read back (and verified, with the public key) before anything is
    deleted; verification of what remains then starts from the signed checkpoint at the cut.
    """
    from .audit.checkpoint_files import read_checkpoint_directory
    from .audit.retention import archive_events

    try:
        cut_date = dt.datetime.fromisoformat(before)
    except ValueError:
        audit_fail(f"--before is not an ISO 8601 date or time: {before!r}")
    settings = settings_for(config, database_url)
    public = _public_key(public_key) if public_key else getattr(audit_signing_key(settings), "public", None)
    signed = None
    if checkpoints is not None:
        try:
            signed = read_checkpoint_directory(checkpoints)
        except ValueError as exc:
            audit_fail(str(exc))
    archived = with_store(
        settings.database_url,
        lambda store: archive_events(
            store.db, before=cut_date, bundle=bundle, actor=actor, public=public, checkpoints=signed
        ),
    )
    typer.echo(archived.describe())
    if not archived.verified:
        typer.echo("note: the bundle was read back and its chain checked, but not verified with a public key")


RulesFile = Annotated[
    Path, typer.Argument(help="A rules file (YAML); '-' reads standard input.", dir_okay=False, allow_dash=True)
]


def read_rules_file(path: Path) -> list[RuleSpec]:
    """The rules of a file, or every problem in it printed and exit code 2: nothing is applied from a bad file."""
    from .policy import InvalidRule, load_rules

    try:
        text = sys.stdin.read() if str(path) == "-" else path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        typer.secho(f"error: cannot read {path}: {exc}", fg=typer.colors.RED, err=True)
        raise typer.Exit(BAD_INPUT) from None
    source = "standard input" if str(path) == "-" else str(path)
    try:
        return load_rules(text, source=source)
    except InvalidRule as exc:
        invalid_rules(exc, source)


def invalid_rules(exc: InvalidRule, source: str) -> NoReturn:
    """Every problem on a line of its own, then exit 2."""
    typer.secho(f"error: {source} has errors, so nothing was changed:", fg=typer.colors.RED, err=True)
    for problem in exc.problems:
        typer.secho(f"  - {problem}", fg=typer.colors.RED, err=True)
    raise typer.Exit(BAD_INPUT)


@rules_app.command("apply")
def rules_apply(
    file: RulesFile,
    prune: Annotated[
        bool, typer.Option("--prune", help="Also remove the standing rules the file does not hold.")
    ] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print what would change, and change nothing.")] = False,
    check: Annotated[
        bool, typer.Option("--check", help="Change nothing; exit 1 when the database differs from the file (CI).")
    ] = False,
    database_url: DatabaseOption = None,
    config: ConfigOption = None,
) -> None:
    """Make the standing rules those of a file, in one transaction, and print the diff (+ new, ~ changed, - removed).

    Applying the same file again changes nothing. Remembered rules are left alone. A file with
    any error changes nothing: every problem is printed with its rule, and the exit code is 2.
    """
    from .policy import InvalidRule
    from .store import SYSTEM

    settings = settings_for(config, database_url)
    specs = read_rules_file(file)
    try:
        diff = with_store(
            settings.database_url,
            lambda store: store.rules.apply_rules(specs, actor=SYSTEM, prune=prune, dry_run=dry_run or check),
        )
    except InvalidRule as exc:
        invalid_rules(exc, str(file))
    for line in diff.lines():
        typer.echo(line)
    if check and not diff.empty:
        typer.secho(f"the standing rules differ from {file}", fg=typer.colors.RED, err=True)
        raise typer.Exit(1)
    if dry_run and not diff.empty:
        typer.echo("(dry run: nothing was changed)")


@rules_app.command("list")
def rules_list(
    kind: Annotated[RuleKind | None, typer.Option(help="Only standing or only remembered rules.")] = None,
    database_url: DatabaseOption = None,
    config: ConfigOption = None,
) -> None:
    """The rules in the database, each with its current version and flags (never matches, shadowed, ...)."""
    from .policy import rule_flags

    settings = settings_for(config, database_url)

    async def listed(store: Store) -> tuple[list[StoredRule], dict[str, list[str]]]:
        rules = await store.rules.list_rules()
        flags = rule_flags(rules, now=clock.now(), groups_with_members=await store.people.group_names())
        return [rule for rule in rules if kind is None or rule.kind.value == kind.value], flags

    rules, flags = with_store(settings.database_url, listed)
    if not rules:
        typer.echo("no rules")
        return
    headers = ["name", "effect", "tool", "condition", "version", "enabled", "kind", "author", "expires", "flags"]
    rows = [
        [
            rule.name,
            _effect_text(rule.spec),
            ",".join(rule.spec.tool),
            _short(" ".join(rule.spec.when.split()) or "always", 60),
            str(rule.version),
            "yes" if rule.spec.enabled else "no",
            rule.kind.value,
            rule.author,
            _moment(rule.spec.expires_at) if rule.spec.expires_at else "-",
            "; ".join(flags.get(rule.name, ())) or "-",
        ]
        for rule in rules
    ]
    _print_table(headers, rows)


@rules_app.command("export")
def rules_export(
    file: Annotated[
        Path | None, typer.Argument(help="Where to write; omit for standard output.", dir_okay=False)
    ] = None,
    database_url: DatabaseOption = None,
    config: ConfigOption = None,
) -> None:
    """The standing rules as a rules file: `approvals rules apply` reads it back with no changes."""
    from .policy import Kind, dump_rules

    settings = settings_for(config, database_url)
    rules = with_store(settings.database_url, lambda store: store.rules.list_rules(kind=Kind.STANDING))
    text = dump_rules(rule.spec for rule in rules)
    if file is None:
        typer.echo(text, nl=False)
        return
    file.write_text(text, encoding="utf-8")
    typer.echo(f"wrote {len(rules)} rules to {file}", err=True)


@rules_app.command("history")
def rules_history(name: str, database_url: DatabaseOption = None, config: ConfigOption = None) -> None:
    """Every version of a rule, newest first: when, who, and what changed."""
    settings = settings_for(config, database_url)
    versions = with_store(settings.database_url, lambda store: store.rules.rule_versions(name))
    for newer, older in zip(versions, [*versions[1:], None], strict=True):
        typer.echo(f"v{newer.version:<4} {_moment(newer.created_at)}  {newer.author:<16} {_change(newer, older)}")


def _change(newer: StoredRule, older: StoredRule | None) -> str:
    """What a version did, against the one before it."""
    if newer.deleted:
        return "deleted"
    if older is None or older.deleted:
        definition = ", ".join(f"{key}: {value!r}" for key, value in newer.spec.definition().items() if key != "name")
        return f"created ({newer.kind.value}): {definition}"
    before, after = older.spec.model_dump(mode="json"), newer.spec.model_dump(mode="json")
    changed = {key: (before[key], after[key]) for key in after if before[key] != after[key]}
    if set(changed) == {"enabled"}:
        return "enabled" if newer.spec.enabled else "disabled"
    return "changed " + "; ".join(f"{key}: {old!r} -> {new!r}" for key, (old, new) in changed.items())


@rules_app.command("enable")
def rules_enable(name: str, database_url: DatabaseOption = None, config: ConfigOption = None) -> None:
    """Enable a rule (a new version)."""
    from .store import SYSTEM

    settings = settings_for(config, database_url)
    rule = with_store(settings.database_url, lambda store: store.rules.set_rule_enabled(name, True, actor=SYSTEM))
    typer.echo(f"enabled {name} (version {rule.version})")


@rules_app.command("disable")
def rules_disable(name: str, database_url: DatabaseOption = None, config: ConfigOption = None) -> None:
    """Disable a rule (a new version): it decides nothing until enabled again."""
    from .store import SYSTEM

    settings = settings_for(config, database_url)
    rule = with_store(settings.database_url, lambda store: store.rules.set_rule_enabled(name, False, actor=SYSTEM))
    typer.echo(f"disabled {name} (version {rule.version})")


@rules_app.command("delete")
def rules_delete(name: str, database_url: DatabaseOption = None, config: ConfigOption = None) -> None:
    """Remove a rule; its versions stay in its history and the audit log."""
    from .store import SYSTEM

    settings = settings_for(config, database_url)
    rule = with_store(settings.database_url, lambda store: store.rules.delete_rule(name, actor=SYSTEM))
    typer.echo(f"deleted {name} (version {rule.version})")


@rules_app.command("dry-run")
def rules_dry_run(
    rule: Annotated[
        str,
        typer.Argument(metavar="FILE_OR_NAME", help="A rules file ('-': standard input), else a stored rule's name."),
    ],
    limit: Annotated[int, typer.Option(min=1, max=1000, help="How many of the latest calls to look at.")] = 100,
    database_url: DatabaseOption = None,
    config: ConfigOption = None,
) -> None:
    """What a rule would have decided for the latest calls, beside what happened to them; nothing is saved.

    `rule alone`: the rule's own outcome (- when it does not match); `with the rules`: the
    outcome with the rules in force, the rule in place of its current version. A stored rule
    that is disabled is tried as if enabled.
    """
    settings = settings_for(config, database_url)
    path = Path(rule)
    from_file = read_rules_file(path) if path.is_file() or rule == "-" else None

    async def tried(store: Store) -> list[tuple[RuleSpec, DryRun]]:
        if from_file is not None:
            specs = from_file
        else:
            specs = [(await store.rules.get_rule(rule)).spec.model_copy(update={"enabled": True})]
        return [(spec, await store.rules.dry_run_rule(spec, limit=limit)) for spec in specs]

    for spec, dry in with_store(settings.database_url, tried):
        typer.echo(f"{spec.name}: {len(dry.rows)} calls, {dry.matched} matched, {dry.failed} could not be evaluated")
        if not dry.rows:
            continue
        headers = ["when", "call", "agent", "tool", "args", "happened", "rule alone", "with the rules"]
        rows = [
            [
                _moment(row.created_at),
                row.call_id[:12],
                row.agent,
                row.tool,
                _short(json.dumps(row.args, ensure_ascii=False, default=str), 40),
                row.status + (f" by {row.decided_by}" if row.decided_by else ""),
                _outcome_text(row.rule, named=False),
                _outcome_text(row.policy, named=True),
            ]
            for row in dry.rows
        ]
        _print_table(headers, rows)


def _outcome_text(outcome: Outcome, *, named: bool) -> str:
    from .policy import Effect

    if outcome.effect is None:
        return "asks as its tool says" if named else "-"
    text = outcome.effect.value
    if outcome.effect is Effect.ASK:
        text += (f" {outcome.approvals}" if outcome.approvals > 1 else "") + (
            f" from {','.join(outcome.groups)}" if outcome.groups else ""
        )
    if outcome.failures and outcome.rule in {failure.rule for failure in outcome.failures}:
        text += " (cannot evaluate)"
    return f"{text} by {outcome.rule}" if named else text


def _effect_text(spec: RuleSpec) -> str:
    """An ask with its quorum, groups, time and follow-ups (`ask 2 finance 4h remind 30m escalate 1h oncall`)."""
    from .policy import Effect

    if spec.effect is not Effect.ASK:
        return spec.effect.value
    parts = ["ask"]
    if spec.approvals != 1 or spec.groups:
        parts.append(str(spec.approvals))
    if spec.groups:
        parts.append(",".join(spec.groups))
    if spec.ttl is not None:
        parts.append(_duration(spec.ttl))
    if spec.remind_before is not None:
        parts.append(f"remind {_duration(spec.remind_before)}" if spec.remind_before else "no-reminder")
    if spec.escalate_after is not None:
        parts.append(f"escalate {_duration(spec.escalate_after)}" if spec.escalate_after else "no-escalation")
    if spec.escalate_to:
        parts.append(("escalate " if spec.escalate_after is None else "") + ",".join(spec.escalate_to))
    return " ".join(parts)


def _duration(seconds: float) -> str:
    for unit, size in (("w", 604800), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


def _moment(at: dt.datetime) -> str:
    return at.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _short(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _print_table(headers: list[str], rows: list[list[str]]) -> None:
    """Columns padded to their widest cell; the last one is not padded."""
    widths = [max(len(cell) for cell in column) for column in zip(headers, *rows, strict=True)]
    for cells in (headers, *rows):
        line = "  ".join(cell.ljust(width) for cell, width in zip(cells[:-1], widths, strict=False))
        typer.echo(f"{line}  {cells[-1]}".rstrip())


@app.command()
def demo(
    runs: Annotated[int, typer.Option(help="How many demo runs to start.")] = 5,
    database_url: DatabaseOption = None,
    config: ConfigOption = None,
) -> None:
    """Seed the demo: an admin account and runs of the demo agent that wait for approval."""
    settings = settings_for(config, database_url)
    migrate(settings.database_url)
    registry = load_agents([], demo=True)
    with_store(settings.database_url, lambda store: seed_demo(store, registry, runs=runs, force=True, wait=60.0))


def _demo_prompts() -> list[str]:
    from .demo import DEMO_PROMPTS

    return DEMO_PROMPTS


async def seed_demo(
    store: Store, registry: AgentRegistry, *, runs: int, force: bool = False, wait: float | None = None
) -> None:
    """An admin (password from APPROVALS_ADMIN_PASSWORD or printed once) and demo runs for review.

    The runs are queued for a worker; with `wait`, each is also run here, up to `wait` seconds.
    """
    import os

    from .security import new_password
    from .service import ApprovalService
    from .store import SYSTEM

    if not await store.people.list_users():
        password = os.environ.get("APPROVALS_ADMIN_PASSWORD") or new_password()
        await store.people.create_user("admin", password, role="admin", actor=SYSTEM)
        for name in ("alice", "bob"):
            await store.people.create_user(name, password, role="reviewer", actor=SYSTEM)
        shown = "(from APPROVALS_ADMIN_PASSWORD)" if os.environ.get("APPROVALS_ADMIN_PASSWORD") else password
        typer.secho(
            f"Created users admin (admin), alice and bob (reviewers); their password is {shown}. It is shown only now.",
            fg=typer.colors.YELLOW,
        )
    if not force and (await store.runs.list_runs(agent_name="shop-assistant", limit=1)).items:
        return
    service = ApprovalService(store, registry, worker_id="demo-seed")
    prompts = _demo_prompts()
    if wait is None:
        for index in range(runs):
            await service.start_run("shop-assistant", prompts[index % len(prompts)], actor=SYSTEM)
        typer.echo(f"queued {runs} demo runs of shop-assistant ({_demo_model_name(registry)})")
        return
    with typer.progressbar(range(runs), label="starting demo runs") as progress:
        for index in progress:
            run_id = await service.start_run("shop-assistant", prompts[index % len(prompts)], actor=SYSTEM)
            await service.resume_now(run_id, wait=wait)


def _demo_model_name(registry: AgentRegistry) -> str:
    model = getattr(registry.get("shop-assistant").agent, "model", None)
    return f"model {model.model_name}" if model is not None else "no model"


async def tell_first_admin(store: Store, database_url: str | None, config: Path | None) -> None:
    """On a database without users, how to add the first admin (whose password `users add` prints once)."""
    from .first_run import first_admin_command

    if await store.people.list_users():
        return
    typer.secho(
        "No users yet. Create yourself as the first admin (it prints your password once), then log in:\n"
        f"    {first_admin_command(database_url, config)}",
        fg=typer.colors.YELLOW,
    )


def main() -> None:
    """Run the command (the `approvals` console script comes here through `approvals.__main__`)."""
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)


@hook_app.command("install")
def install_hook_command(
    cli: Annotated[str, typer.Argument(help="claude-code, codex, gemini or cursor.")],
    url: Annotated[str, typer.Option(help="Where the approvals server is, as the CLI reaches it.")] = (
        "http://127.0.0.1:8000"
    ),
    wait: Annotated[float, typer.Option(help="Seconds a hook waits for a person before the fallback.", min=0)] = 55,
    fallback: Annotated[
        str | None, typer.Option(help="When nobody decided in time: deny (all), ask (Claude Code, Cursor), defer.")
    ] = None,
    project: Annotated[Path | None, typer.Option(help="The project folder (default: here).", file_okay=False)] = None,
    user: Annotated[bool, typer.Option("--user", help="The user's settings instead of the project's.")] = False,
    command: Annotated[
        bool, typer.Option("--command", help="Claude Code: the fail-closed command hook instead of the HTTP hook.")
    ] = False,
    matcher: Annotated[
        str | None,
        typer.Option(help="The tools to ask about, a regular expression (default: the shell tool), e.g. 'Bash|Write'."),
    ] = None,
) -> None:
    """Merge the approvals hook into a coding CLI's settings, keeping everything else there."""
    from .engines.gate.hooks import FORMATS, Fallback
    from .hook_install import InstallError, install_hook

    if cli not in FORMATS:
        fail(f"No hook for {cli!r}; known: {', '.join(FORMATS)}")
    if fallback is not None and fallback not in {f.value for f in FORMATS[cli].fallbacks}:
        allowed = ", ".join(f.value for f in FORMATS[cli].fallbacks)
        fail(f"{cli} hooks fall back to {allowed}, not {fallback!r}")
    try:
        installed = install_hook(
            cli,
            url=url,
            wait=wait,
            fallback=Fallback(fallback).value if fallback else None,
            project=project,
            user=user,
            http=not command,
            matcher=matcher,
        )
    except InstallError as exc:
        fail(str(exc))
    verb = "Replaced the approvals hook in" if installed.replaced else "Added the approvals hook to"
    typer.echo(f"{verb} {installed.path}")
    for step in installed.next_steps:
        typer.echo(f"- {step}")


@app.command("mcp")
def mcp_gateway(
    config: Annotated[Path, typer.Option("--config", help='The upstream servers: {"mcpServers": {...}} JSON.')],
    transport: Annotated[str, typer.Option(help="How clients reach the gateway: stdio or http.")] = "stdio",
    host: Annotated[str, typer.Option(help="Address to listen on (--transport http).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on (--transport http).")] = 8765,
    source: Annotated[str | None, typer.Option(help="Agent name when the client gives none.")] = None,
    session: Annotated[str | None, typer.Option(help="Session for every call (default: client + directory).")] = None,
    wait: Annotated[float, typer.Option(help="Seconds a call waits for a person before a tool error.", min=0)] = 300,
    progress_every: Annotated[
        float, typer.Option(help="Seconds between progress notifications while a call waits.", min=0.1)
    ] = 10,
    url: Annotated[str | None, typer.Option(envvar="APPROVALS_URL", help="The approvals server.")] = None,
    token: Annotated[str | None, typer.Option(envvar="APPROVALS_TOKEN", help="A calls:ask token.")] = None,
    outbox: Annotated[
        Path | None,
        typer.Option(
            envvar="APPROVALS_MCP_OUTBOX",
            help="Folder for outcome reports not sent yet (default: per server, in the data directory).",
        ),
    ] = None,
) -> None:
    """The MCP gateway: proxy MCP servers' tools, asking approvals before every tool call."""
    from .engines.mcp import ConfigError, run

    try:
        run(
            config,
            url=url,
            token=token,
            transport=transport,
            host=host,
            port=port,
            source=source,
            session=session,
            wait=wait,
            progress_every=progress_every,
            outbox=outbox,
        )
    except (ConfigError, ValueError) as exc:
        fail(str(exc))


if __name__ == "__main__":  # `python -m approvals.cli`: after every command is defined
    main()
