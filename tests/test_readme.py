"""The README's agent example is real code: run it exactly as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

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


def test_readme_call_lifecycle_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    text = README.read_text()
    block = re.search(
        r"<!-- call-lifecycle-example:start -->\s*```python\n(.*?)```\s*<!-- call-lifecycle-example:end -->", text, re.S
    )
    assert block is not None, "the README lost its call lifecycle example markers"
    exec(compile(block.group(1), "README.md call lifecycle example", "exec"), {"__name__": "readme_call_example"})
    assert capsys.readouterr().out.splitlines() == ["refund pending", "succeeded refunded 250"]
