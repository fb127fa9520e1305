"""Proof that travels, on the web: the audit signing key at a well-known URL, a decision's receipt, the checkpointer.

The public key needs no login (whoever checks a receipt or a bundle needs it and nothing else).
A receipt needs a viewer's login, like the call page it is linked from; when no checkpoint covers
the decision yet, one is signed on the spot, as the periodic task would have a little later.
"""

from __future__ import annotations

import json

import anyio
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response

from approvals.audit.checkpoint_files import DirectorySink
from approvals.audit.checkpoints import Checkpointer, CheckpointHealth, CheckpointSink, run_checkpoints
from approvals.audit.receipt import make_receipt
from approvals.audit.signing import WELL_KNOWN_PATH, SigningKey
from approvals.audit.stream_checkpoints import open_checkpoint_sinks
from approvals.exceptions import NotFound
from approvals.store import Database
from approvals.worker.supervise import Supervisor

from .auth import ContextDep, ViewerPage
from .settings import Settings

__all__ = ("DECISION_ACTIONS", "router", "start_checkpoints")

router = APIRouter(include_in_schema=False)

DECISION_ACTIONS = ("call.approved", "call.denied", "call.edited", "call.answered")
"""The events a call's receipt is for, by default its latest of these."""


def start_checkpoints(
    app: FastAPI, settings: Settings, db: Database, key: SigningKey | None, supervisor: Supervisor, stop: anyio.Event
) -> None:
    """Run the checkpointer in this process when signing is on (`app.state.checkpointer`; None when off)."""
    app.state.checkpointer = None
    if key is None:
        return
    config = settings.audit_checkpoint_config()
    sinks: list[CheckpointSink] = [DirectorySink(config.directory)] if config.directory else []
    sinks += open_checkpoint_sinks(app.state.context.store, settings.audit_sinks())  # syslog and webhook copies
    checkpointer = app.state.checkpointer = Checkpointer(db, key, config, sinks, CheckpointHealth())
    supervisor.start("audit-checkpoints", lambda: run_checkpoints(checkpointer, stop))


@router.get(WELL_KNOWN_PATH)
async def audit_public_key(request: Request, format: str | None = None) -> Response:
    """The public key checkpoints are signed with: JWK-like JSON with its key id, or PEM (`?format=pem`)."""
    key: SigningKey | None = getattr(request.app.state, "audit_signing_key", None)
    if key is None:
        raise NotFound("Audit signing is not turned on on this server")
    wants_pem = format == "pem" or "application/x-pem-file" in request.headers.get("accept", "")
    if wants_pem:
        return Response(key.public.pem(), media_type="application/x-pem-file")
    return JSONResponse(key.public.jwk(), headers={"Cache-Control": "public, max-age=300"})


@router.get("/calls/{call_id}/receipt")
async def call_receipt(
    request: Request, actor: ViewerPage, context: ContextDep, call_id: str, event: int | None = None
) -> Response:
    """The receipt of the call's decision (its latest, or the audit event `event` of this call), as a JSON download."""
    page = await context.store.audit.audit_events(subject_id=call_id, limit=1000, newest_first=True)
    events = [e for e in page.items if e.subject_type == "call"]
    if event is not None:
        chosen = next((e for e in events if e.id == event), None)
    else:
        chosen = next((e for e in events if e.action in DECISION_ACTIONS), None)
    if chosen is None:
        raise NotFound(f"No decision of call {call_id!r} in the audit log")
    receipt = await make_receipt(context.db, chosen.id, getattr(request.app.state, "checkpointer", None))
    body = json.dumps(receipt, ensure_ascii=False, indent=1)
    filename = f"receipt-{call_id}-{chosen.id}.json"
    return Response(
        body, media_type="application/json", headers={"Content-Disposition": f'attachment; filename="{filename}"'}
    )
