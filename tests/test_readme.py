"""The README's agent example is real code: run it exactly as written."""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
from pathlib import Path

import pytest

from approvals.calls.verdicts import Approve
from approvals.engines.mcp.config import parse_config
from approvals.policy import load_rules
from approvals.store import SYSTEM, Actor
from approvals.store.migrate import upgrade
from approvals.worker.resumer import AgentRegistry

from .live_server import serving

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    text = README.read_text()
    block = re.search(r"<!-- example:start -->\s*```python\n(.*?)```\s*<!-- example:end -->", text, re.S)
    assert block is not None, "the README lost its example markers"
    exec(compile(block.group(1), "README.md example", "exec"), {"__name__": "readme_example"})
    printed = capsys.readouterr().out
    assert "refund was denied (Too much.)" in printed


def test_readme_pydantic_ai_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    text = README.read_text()
    block = re.search(
        r"<!-- pydantic-ai-example:start -->\s*```python\n(.*?)```\s*<!-- pydantic-ai-example:end -->", text, re.S
    )
    assert block is not None, "the README lost its pydantic-ai example markers"
    exec(compile(block.group(1), "README.md pydantic-ai example", "exec"), {"__name__": "readme_pydantic_ai_example"})
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("refund pending {")
    assert printed[-1] == "completed"


def test_readme_langgraph_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    text = README.read_text()
    block = re.search(
        r"<!-- langgraph-example:start -->\s*```python\n(.*?)```\s*<!-- langgraph-example:end -->", text, re.S
    )
    assert block is not None, "the README lost its LangGraph example markers"
    exec(compile(block.group(1), "README.md LangGraph example", "exec"), {"__name__": "readme_langgraph_example"})
    printed = capsys.readouterr().out.splitlines()
    assert printed == ["refund pending {'order_id': 'A-1', 'amount_cents': 500}", "completed"]


def test_readme_openai_agents_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    text = README.read_text()
    block = re.search(
        r"<!-- openai-agents-example:start -->\s*```python\n(.*?)```\s*<!-- openai-agents-example:end -->", text, re.S
    )
    assert block is not None, "the README lost its OpenAI Agents example markers"
    exec(
        compile(block.group(1), "README.md OpenAI Agents example", "exec"), {"__name__": "readme_openai_agents_example"}
    )
    printed = capsys.readouterr().out.splitlines()
    assert printed == ["refund pending {'order_id': 'A-1', 'amount_cents': 250}", "completed Refunded."]


def test_readme_llamaindex_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    text = README.read_text()
    block = re.search(
        r"<!-- llamaindex-example:start -->\s*```python\n(.*?)```\s*<!-- llamaindex-example:end -->", text, re.S
    )
    assert block is not None, "the README lost its LlamaIndex example markers"
    exec(compile(block.group(1), "README.md LlamaIndex example", "exec"), {"__name__": "readme_llamaindex_example"})
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("refund pending {")
    assert printed[-1] == "completed Done: refunded 500 cents on A-1"


def test_readme_call_lifecycle_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    text = README.read_text()
    block = re.search(
        r"<!-- call-lifecycle-example:start -->\s*```python\n(.*?)```\s*<!-- call-lifecycle-example:end -->", text, re.S
    )
    assert block is not None, "the README lost its call lifecycle example markers"
    exec(compile(block.group(1), "README.md call lifecycle example", "exec"), {"__name__": "readme_call_example"})
    assert capsys.readouterr().out.splitlines() == ["refund pending", "succeeded refunded 250"]


def test_readme_gate_curl_example_runs(tmp_path: Path) -> None:
    """The README's curl example against a real server, with a reviewer approving while it waits."""
    text = README.read_text()
    block = re.search(r"<!-- gate-curl:start -->\s*```bash\n(.*?)```\s*<!-- gate-curl:end -->", text, re.S)
    assert block is not None, "the README lost its gate curl example markers"
    database = f"sqlite:///{tmp_path}/gate.db"
    upgrade(database)
    with serving(database, tmp_path, AgentRegistry(), users=False) as server:
        token = server.call(
            server.store.people.create_token("billing", role="reviewer", actor=SYSTEM, scopes=["calls:ask"])
        )
        reviewer = Actor("rita", "reviewer")

        def approve_when_asked() -> None:
            deadline = time.monotonic() + 30
            while not (pending := server.call(server.store.calls.list_calls()).items):
                assert time.monotonic() < deadline
                time.sleep(0.1)
            server.call(server.store.calls.decide(pending[0].id, Approve(), actor=reviewer))

        approver = threading.Thread(target=approve_when_asked)
        approver.start()
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", block.group(1)],
            env={**os.environ, "APPROVALS_URL": server.url, "APPROVALS_TOKEN": token},
            capture_output=True,
            text=True,
            timeout=90,
        )
        approver.join(timeout=30)
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert lines[0].startswith(f"pending {server.url}/calls/")
        assert lines[1] == "approved True {'order_id': 'A-1', 'amount': 250}"
        [call] = server.call(server.store.calls.list_calls(status=None)).items
        assert call.status == "succeeded" and call.result == "refunded 250"


def test_every_setting_is_in_the_readmes_configuration_table() -> None:
    """A setting nobody can find is a setting nobody sets: each `Settings` field has its row."""
    from approvals_web.settings import Settings

    table = README.read_text().split("## Configuration", 1)[1].split("\n## ", 1)[0]
    missing = [name for name in Settings.model_fields if f"`APPROVALS_{name.upper()}`" not in table]
    assert missing == []


def test_the_mcp_gateways_examples_are_valid() -> None:
    """The README's upstreams file and Claude Code's `.mcp.json` read as the gateway reads them; its rules apply."""
    section = README.read_text().split("## MCP gateway", 1)[1].split("\n## ", 1)[0]
    upstreams, claude_code = (json.loads(block) for block in re.findall(r"```json\n(.*?)```", section, re.DOTALL))
    assert [server.name for server in parse_config(upstreams)] == ["fs", "git", "issues"]
    [gateway] = parse_config(claude_code)
    assert gateway.name == "approvals"
    [rules] = re.findall(r"```yaml\n(.*?)```", section, re.DOTALL)
    assert [rule.name for rule in load_rules(rules)] == ["mcp-read-only", "mcp-commits-need-two"]
