"""A gate caller's schema cannot stall the server: costly validation is bounded and runs off the event loop.

Real HTTP through the app, on SQLite and PostgreSQL. Before, a `calls:ask` token sending
`"pattern": "^(a+)+$"` and 40 characters stalled every request of the process for years.
"""

from __future__ import annotations

import anyio
import pytest

from ..calls.test_bounded_schemas import exponential_schema, nested
from .conftest import WebApp
from .test_gate import asking_client, gate_call

pytestmark = pytest.mark.anyio


async def test_a_backtracking_pattern_is_an_ordinary_refusal(web: WebApp) -> None:
    schema = {"type": "object", "properties": {"x": {"type": "string", "pattern": "^(a+)+$"}}}
    async with await asking_client(web) as agent:
        refused = await agent.post("/api/gate/calls", json=gate_call(json_schema=schema, args={"x": "a" * 60 + "b"}))
        assert refused.status_code == 422, refused.text
        assert "does not match" in refused.text
        lookaround = {"type": "object", "properties": {"x": {"type": "string", "pattern": "(?=a)a"}}}
        unusable = await agent.post("/api/gate/calls", json=gate_call(json_schema=lookaround, args={"x": "a"}))
        assert unusable.status_code in (400, 422) and "linear time" in unusable.text, unusable.text
    assert (await web.store.calls.list_calls(status=None)).items == []


async def test_the_server_answers_others_while_a_costly_schema_is_checked(web: WebApp) -> None:
    """The costly request ends in a 422 after its budget; /healthz answered meanwhile, before it ended."""
    finished: list[str] = []
    async with await asking_client(web) as agent, web.client() as probe:

        async def costly() -> None:
            body = gate_call(json_schema=exponential_schema(), args={"x": nested(40)})
            response = await agent.post("/api/gate/calls", json=body)
            assert response.status_code == 422, response.text
            assert "takes longer than" in response.text
            finished.append("costly")

        async def health() -> None:
            await anyio.sleep(0.05)  # the costly request is being checked by now
            assert (await probe.get("/healthz")).status_code == 200
            finished.append("health")

        async with anyio.create_task_group() as group:
            group.start_soon(costly)
            group.start_soon(health)
    assert finished == ["health", "costly"]
    assert (await web.store.calls.list_calls(status=None)).items == []
