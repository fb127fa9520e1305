"""The FastAPI application: `create_app(settings)` wires the core, auth, pages and API together."""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from sqlalchemy.exc import SQLAlchemyError
from starlette.exceptions import HTTPException
from starlette.middleware.sessions import SessionMiddleware

from approvals.audit.signing import load_signing_key
from approvals.exceptions import ApprovalsError
from approvals.policy.sandbox import set_condition_budget
from approvals.service import ApprovalService
from approvals.store import PENDING_CHANNEL, RUNS_CHANNEL, Database, Store
from approvals.store.errors import describe
from approvals.worker import DelivererHealth
from approvals.worker.follow_ups import FollowUpHealth, run_follow_ups
from approvals.worker.resumer import AgentRegistry, WorkerHealth, run_worker
from approvals.worker.supervise import Supervisor

from . import audit_proof, health, metrics
from .api import docs, problems
from .api import routes as api
from .api import users as users_api
from .audit_proof import start_checkpoints
from .auth import LoginRequired
from .context import AppContext
from .email_links import routes as email_links
from .gate import routes as gate
from .hardening import SecurityMiddleware, reject_nul_in_url
from .pages import audit, inbox, login, users
from .parking import ParkingMiddleware
from .rules import api as rules_api
from .rules import pages as rules_pages
from .scim import router as scim_router
from .settings import Settings
from .slack import routes as slack
from .sso import routes as sso_routes
from .telemetry import configure_tracing
from .templating import render

logger = logging.getLogger("approvals.web")
STATIC = Path(__file__).parent / "static"


def create_app(settings: Settings | None = None, *, registry: AgentRegistry | None = None) -> FastAPI:
    """The app for `settings`; agents come from `registry` or are imported from `settings.agents`."""
    settings = settings or Settings()
    set_condition_budget(settings.condition_budget)
    configure_tracing()  # OTLP export only when the OTEL_* variables ask for it
    audit_key = load_signing_key(settings.audit_signing_config())  # issue 39 B: a configured key that fails stops here

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        db = Database(settings.database_url)
        store = Store(db)
        agents = registry or AgentRegistry()
        for path in settings.agents:
            agents.load(path)
        stop = anyio.Event()
        try:
            async with anyio.create_task_group() as group:
                supervisor = Supervisor(group, stop)
                # waiting callers (the gate's long polls, hooks, live pages) share one LISTEN connection per channel
                await group.start(functools.partial(store.notifier.relay, (PENDING_CHANNEL, RUNS_CHANNEL), until=stop))
                health = WorkerHealth()
                service = ApprovalService(store, agents, background=group)
                context = AppContext(
                    settings=settings,
                    db=db,
                    store=store,
                    registry=agents,
                    service=service,
                    supervisor=supervisor,
                    worker_health=health,
                )
                app.state.context = context
                if settings.worker:
                    supervisor.start(
                        "worker",
                        lambda: run_worker(
                            store,
                            agents,
                            concurrency=settings.worker_concurrency,
                            lease_seconds=settings.worker_lease_seconds,
                            poll_interval=settings.worker_poll_interval,
                            stop=stop,
                            health=health,
                        ),
                    )
                app.state.deliverer_health = None
                if settings.outbound().any_channel:  # the core's durable deliverer; `approvals worker` runs it too
                    from .webhooks import deliver_webhooks

                    deliverer_health = app.state.deliverer_health = DelivererHealth()
                    supervisor.start("webhooks", lambda: deliver_webhooks(context, stop, health=deliverer_health))
                follow_up_defaults = settings.outbound().follow_ups
                follow_up_health = app.state.follow_up_health = FollowUpHealth()
                supervisor.start(  # reminders and escalation: once per call and step, whichever process finds it
                    "follow-ups",
                    lambda: run_follow_ups(
                        store,
                        follow_up_defaults,
                        stop,
                        interval=settings.follow_up_interval,
                        health=follow_up_health,
                    ),
                )
                # issue 39 C: every audit event to syslog and a webhook, one cursor and lease per sink (any process)
                app.state.audit_stream_health = None
                if settings.audit_sinks().any:
                    from approvals.audit.stream import AuditStreamHealth, stream_audit

                    audit_stream_health = app.state.audit_stream_health = AuditStreamHealth()
                    audit_sinks = settings.audit_sinks()
                    supervisor.start(
                        "audit-stream", lambda: stream_audit(store, audit_sinks, stop, health=audit_stream_health)
                    )
                start_checkpoints(app, settings, db, audit_key, supervisor, stop)  # issue 39 B: signed checkpoints
                yield
                stop.set()
        finally:
            await db.dispose()

    app = FastAPI(
        title="approvals",
        summary="Human-in-the-loop approval of LLM agents' tool calls",
        lifespan=lifespan,
        docs_url=None,  # approvals_web.api.docs serves it from vendored files
        redoc_url=None,
        openapi_url="/api/openapi.json",
        dependencies=[Depends(reject_nul_in_url)],
    )
    app.add_middleware(
        SessionMiddleware,
        secret_key=settings.secret_key,
        session_cookie="approvals_session",
        max_age=settings.session_max_age,
        same_site="lax",
        https_only=settings.cookie_secure,
    )
    app.add_middleware(ParkingMiddleware)  # inside the security headers, outside the session
    app.add_middleware(SecurityMiddleware, max_body_bytes=settings.max_request_bytes)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    app.include_router(health.router)
    app.include_router(metrics.router)
    app.include_router(docs.router)
    app.include_router(login.router)
    app.include_router(sso_routes.router)
    app.include_router(scim_router)
    app.include_router(api.router)
    app.include_router(gate.router)
    app.include_router(gate.hooks_router)
    app.include_router(rules_api.router)
    app.include_router(rules_pages.router)
    app.include_router(users.router)
    app.include_router(users_api.router)
    app.include_router(slack.router)
    app.include_router(email_links.router)
    app.include_router(audit.router)
    app.include_router(audit_proof.router)
    app.state.audit_signing_key = audit_key
    app.include_router(inbox.router)
    _install_error_handlers(app)
    return app


def _wants_problem_json(request: Request) -> bool:
    return request.url.path.startswith("/api/")


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(LoginRequired)
    async def to_login(request: Request, exc: LoginRequired) -> Response:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        if request.headers.get("hx-request"):
            return Response(status_code=204, headers={"HX-Redirect": f"/login?next={target}"})
        return RedirectResponse(f"/login?next={target}", status_code=303)

    @app.exception_handler(ApprovalsError)
    async def approvals_error(request: Request, exc: ApprovalsError) -> Response:
        if _wants_problem_json(request):
            return problems.approvals_error_problem(exc)
        status, title = problems.status_for(exc)
        return _error_page(request, status, title, str(exc))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> Response:
        if _wants_problem_json(request):
            return await problems.http_exception_problem(request, exc)
        return _error_page(request, exc.status_code, "Error", str(exc.detail))

    @app.exception_handler(SQLAlchemyError)
    async def database_error(request: Request, exc: SQLAlchemyError) -> Response:
        # a database that is down for now is 503 with Retry-After; anything else is our bug: 500
        failure = problems.database_failure(exc)
        if failure.transient:
            logger.warning("%s %s: database unavailable: %s", request.method, request.url.path, describe(exc))
        else:
            logger.error("%s %s: database error", request.method, request.url.path, exc_info=exc)
        if _wants_problem_json(request):
            return problems.database_problem(failure)
        response = _error_page(request, failure.status, failure.title, failure.detail)
        if failure.transient:
            response.headers["Retry-After"] = str(problems.RETRY_AFTER_SECONDS)
        return response

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> Response:
        if _wants_problem_json(request):
            return await problems.validation_problem(request, exc)
        return _error_page(request, 422, "Invalid request", "; ".join(str(e["msg"]) for e in exc.errors()))


def _error_page(request: Request, status: int, title: str, detail: str) -> Response:
    return render(request, "error.html", {"status": status, "title": title, "detail": detail}, status=status)
