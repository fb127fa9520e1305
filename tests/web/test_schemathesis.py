"""Schemathesis against the API's own OpenAPI schema, over real HTTP: no 5xx, no answer the schema does not document.

The app runs under uvicorn (SQLite file, its lifespan on) and every request carries an
admin's own token, so each operation is reached past authentication; each operation gets
a bounded number of generated examples, the same ones every run (derandomized), so CI is repeatable.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
import uvicorn
from hypothesis import HealthCheck, settings
from schemathesis.config import SchemathesisConfig

from approvals.store import SYSTEM
from approvals.store.migrate import upgrade
from approvals.worker.resumer import AgentRegistry
from approvals_web.app import create_app
from approvals_web.settings import Settings

from ..processes import free_port
from ..store.agents import email_agent, shop_agent

EXAMPLES = 25
EXCLUDED = [
    # Page cursors are opaque: a string the schema allows can still be no cursor we made (400).
    schemathesis.checks.positive_data_acceptance,
    # Starlette answers 405 with the methods of the first route on a path, not of all of them.
    schemathesis.checks.allow_header_conformance,
]
REJECTIONS = [400, 401, 403, 404, 405, 406, 409, 413, 415, 422, 428, 429, "5xx"]
"""Answers that refuse invalid data: schemathesis's own list, plus 413 for a body over the size limit."""
schema = schemathesis.openapi.from_dict(
    create_app(Settings(secret_key="schema")).openapi(),
    config=SchemathesisConfig.from_dict({"checks": {"negative_data_rejection": {"expected-statuses": REJECTIONS}}}),
)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    path: Path = tmp_path_factory.mktemp("schemathesis") / "approvals.db"
    url = f"sqlite:///{path}"
    upgrade(url)
    app = create_app(
        Settings(database_url=url, worker=False, secret_key="schemathesis", gate_max_wait=0.2),
        registry=AgentRegistry([shop_agent, email_agent]),
    )
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(server.serve(),), daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the app did not start"
        time.sleep(0.05)
    token = asyncio.run_coroutine_threadsafe(_admin_token(app.state.context.store), loop).result(timeout=30)
    try:
        yield f"http://127.0.0.1:{port}", {"Authorization": f"Bearer {token}"}
    finally:
        server.should_exit = True
        thread.join(timeout=20)
        loop.close()


async def _admin_token(store: Any) -> str:
    await store.people.create_user("schema-admin", "schema-password-1", role="admin", actor=SYSTEM)
    await store.runs.start_run("mailer", "mail", actor=SYSTEM, deps={"log": "/dev/null"})
    token: str = await store.people.create_token("schemathesis", role="admin", actor=SYSTEM, user="schema-admin")
    return token


@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
def test_the_api_answers_as_its_schema_says(case: Any, served: tuple[str, dict[str, str]]) -> None:
    base_url, headers = served
    case.call_and_validate(base_url=base_url, headers=headers, excluded_checks=EXCLUDED)
