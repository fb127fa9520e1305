"""Message histories round-trip through JSON exactly, and old or foreign data is refused clearly."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from approvals import UserError
from approvals.engines.native.messages import (
    MESSAGE_FORMAT_VERSION,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolDeniedPart,
    ToolReturnPart,
    Usage,
    UserPromptPart,
    dump_message,
    dump_messages,
    load_message,
    load_messages,
    load_stored_history,
    model_facing_content,
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=10,
)
timestamps = st.datetimes(timezones=st.just(dt.UTC))
ids = st.text(min_size=1, max_size=12)
names = st.from_regex(r"[a-z_]{1,12}", fullmatch=True)

request_parts = st.one_of(
    st.builds(SystemPromptPart, content=st.text(), timestamp=timestamps),
    st.builds(UserPromptPart, content=st.text(), timestamp=timestamps),
    st.builds(
        ToolReturnPart,
        tool_name=names,
        content=json_values,
        tool_call_id=ids,
        metadata=json_values,
        source=st.sampled_from(["tool", "reviewer", "not-run"]),
        args_override=st.none() | st.dictionaries(st.text(max_size=5), json_values, max_size=3),
        timestamp=timestamps,
    ),
    st.builds(
        RetryPromptPart,
        content=st.text(),
        tool_name=st.none() | names,
        tool_call_id=st.none() | ids,
        timestamp=timestamps,
    ),
    st.builds(ToolDeniedPart, tool_name=names, tool_call_id=ids, reason=st.text(), timestamp=timestamps),
)
response_parts = st.one_of(
    st.builds(TextPart, content=st.text()),
    st.builds(
        ToolCallPart,
        tool_name=names,
        args=st.none() | st.text() | st.dictionaries(st.text(max_size=5), json_values, max_size=3),
        tool_call_id=ids,
    ),
)
usages = st.builds(
    Usage,
    requests=st.integers(0, 9),
    input_tokens=st.integers(0, 10**6),
    output_tokens=st.integers(0, 10**6),
    tool_calls=st.integers(0, 9),
)
messages = st.one_of(
    st.builds(ModelRequest, parts=st.lists(request_parts, max_size=4), run_id=st.none() | ids),
    st.builds(
        ModelResponse,
        parts=st.lists(response_parts, max_size=4),
        usage=usages,
        model_name=st.none() | st.text(max_size=10),
        finish_reason=st.none() | st.sampled_from(["stop", "tool_calls"]),
        timestamp=timestamps,
        run_id=st.none() | ids,
    ),
)


@given(history=st.lists(messages, max_size=6))
def test_history_round_trips_exactly(history: list[Any]) -> None:
    assert load_messages(dump_messages(history)) == history


@given(history=st.lists(messages, max_size=6))
def test_stored_rows_load_in_one_pass_as_they_would_one_by_one(history: list[Any]) -> None:
    """A history read back as stored JSON texts (one parse for all of it) equals the messages written."""
    texts = [json.dumps(dump_message(message), ensure_ascii=False) for message in history]
    assert load_stored_history((text, MESSAGE_FORMAT_VERSION) for text in texts) == history
    parsed_by_the_driver = [(dump_message(message), MESSAGE_FORMAT_VERSION) for message in history]
    assert load_stored_history(parsed_by_the_driver) == history


def test_a_stored_history_with_a_broken_row_is_refused() -> None:
    good = json.dumps(dump_message(ModelRequest(parts=[UserPromptPart(content="hi")])))
    broken = '{"kind": "request", "parts": ['
    with pytest.raises(ValueError, match=r"(?i)json"):
        load_stored_history([(good, MESSAGE_FORMAT_VERSION), (broken, MESSAGE_FORMAT_VERSION)])


@given(message=messages)
def test_single_message_round_trips_exactly(message: Any) -> None:
    stored = json.dumps(dump_message(message))
    assert load_message(stored) == message


def test_dump_carries_the_format_version() -> None:
    dumped = json.loads(dump_messages([ModelRequest(parts=[UserPromptPart(content="hi")])]))
    assert dumped["format_version"] == MESSAGE_FORMAT_VERSION
    assert dumped["messages"][0]["parts"][0]["part_kind"] == "user-prompt"


def test_unknown_versions_and_foreign_data_are_refused() -> None:
    with pytest.raises(UserError, match="format version 99 is not supported"):
        load_messages({"format_version": 99, "messages": []})
    with pytest.raises(UserError, match="Not a stored message history"):
        load_messages(b"[]")
    with pytest.raises(UserError, match="malformed"):
        load_messages({"format_version": 1, "messages": [{"kind": "request", "parts": [{"part_kind": "bogus"}]}]})


def test_denial_reason_is_a_sentence_of_its_own() -> None:
    text = model_facing_content(ToolDeniedPart(tool_name="refund", tool_call_id="c", reason="too expensive"))
    assert "Reason: too expensive. The call was not executed." in text


def test_denial_wording_tells_the_model_not_to_retry() -> None:
    text = model_facing_content(ToolDeniedPart(tool_name="refund", tool_call_id="c", reason="Too much."))
    assert text.startswith("DENIED")
    assert "Reason: Too much." in text
    assert "Do not repeat the same call" in text


def test_metadata_never_reaches_the_model() -> None:
    part = ToolReturnPart(tool_name="t", content={"ok": True}, tool_call_id="c", metadata={"secret": "s3"})
    assert "s3" not in model_facing_content(part)
    assert model_facing_content(part) == '{"ok": true}'
