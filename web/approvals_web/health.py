"""Health for load balancers and orchestrators: `/healthz` (the process answers) and `/readyz` (it can work).

Both need no login and say nothing secret: states and times, never error texts (those go
to the log). `/readyz` answers 503 while the database cannot be reached or the in-process
worker has not reached it lately, so a load balancer sends traffic elsewhere meanwhile.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from sqlalchemy import text

from approvals.worker import DelivererHealth
from approvals.worker.follow_ups import FollowUpHealth

from .auth import ContextDep

router = APIRouter(include_in_schema=False)

DATABASE_TIMEOUT = 2.0
"""Seconds the readiness check waits for `SELECT 1`."""
WORKER_SILENCE = 45.0
"""The worker reaches the database at least every 15 s (expiry); longer silence means it is stuck."""


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is up and serving requests."""
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(context: ContextDep, request: Request) -> JSONResponse:
    """The database answers, and the worker (when this process runs one) is alive and reaching it.

    Outbound delivery (webhooks, Slack, e-mail) and the reminders' scanner are reported but do
    not make the app unready: a receiver that is down is no reason to send reviewers elsewhere.
    """
    database_ok = True
    try:
        with anyio.fail_after(DATABASE_TIMEOUT):
            async with context.db.read() as session:
                await session.execute(text("SELECT 1"))
    except Exception:
        database_ok = False
    body: dict[str, Any] = {"database": {"reachable": database_ok}}
    ready = database_ok
    worker = context.supervisor.tasks.get("worker")
    if worker is not None:
        health = context.worker_health
        contact = health.last_contact
        recent = contact is not None and (dt.datetime.now(dt.UTC) - contact).total_seconds() < WORKER_SILENCE
        alive = worker.state == "running" and recent and not health.outage
        body["worker"] = {
            "alive": alive,
            "state": worker.state,
            "restarts": worker.restarts,
            "last_contact": _iso(contact),
            "last_claim": _iso(health.last_claim),
        }
        ready = ready and alive
    deliverer = getattr(request.app.state, "deliverer_health", None)
    if isinstance(deliverer, DelivererHealth):
        body["deliverer"] = deliverer.summary()
    audit_stream = getattr(request.app.state, "audit_stream_health", None)  # issue 39 C: the audit log's sinks
    if audit_stream is not None and hasattr(audit_stream, "sinks"):
        body["audit_sinks"] = audit_stream.sinks()  # reported, never unready: a SIEM that is down catches up later
    checkpointer = getattr(request.app.state, "checkpointer", None)  # issue 39 B: signed checkpoints, when signing
    if checkpointer is not None:
        body["audit_checkpoints"] = checkpointer.health.summary()  # reported: the chain is kept either way
    follow_ups = getattr(request.app.state, "follow_up_health", None)
    if isinstance(follow_ups, FollowUpHealth):
        body["follow_ups"] = follow_ups.summary()
    body["background"] = {
        name: {"state": task.state, "restarts": task.restarts, "last_failure_at": _iso(task.last_failure_at)}
        for name, task in context.supervisor.tasks.items()
    }
    body["status"] = "ready" if ready else "not ready"
    return JSONResponse(body, status_code=200 if ready else 503)


def _iso(moment: dt.datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None
