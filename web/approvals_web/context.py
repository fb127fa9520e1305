"""What the app shares across requests: settings, store, agents, and the service over them."""

from __future__ import annotations

from dataclasses import dataclass

from approvals.service import ApprovalService
from approvals.store import Database, Store
from approvals.worker.resumer import AgentRegistry, WorkerHealth
from approvals.worker.supervise import Supervisor

from .settings import Settings


@dataclass
class AppContext:
    """Built once at startup by the lifespan; routes reach it through `approvals_web.auth.app_context`."""

    settings: Settings
    db: Database
    store: Store
    registry: AgentRegistry
    service: ApprovalService
    supervisor: Supervisor
    """The background tasks (worker, webhook delivery) and how they are doing."""
    worker_health: WorkerHealth
