"""The syslog message format and framing, and the sinks' settings, without a network."""

from __future__ import annotations

import datetime as dt

import pytest

from approvals.audit.sinks import AuditSinkSettings, SinkChannel, SinkDocument, SyslogSinkSettings
from approvals.audit.sinks_syslog import SyslogSink, format_message, frame
from approvals.audit.stream import open_sinks

AT = dt.datetime(2026, 11, 29, 1, 2, 3, 456789, tzinfo=dt.UTC)


def document(**params: str) -> SinkDocument:
    return SinkDocument(kind="event", id=7, action="call.approved", at=AT, params=params, body={"note": "Grüße"})


def test_a_message_is_rfc_5424_with_structured_data_escaped_and_the_json_as_its_message() -> None:
    settings = SyslogSinkSettings(host="siem", hostname="web 1")
    message = format_message(document(id="7", actor='a"b]c\\d'), settings, "web 1")
    header, rest = message.split(b" [", 1)
    pri_version, timestamp, host, app, _procid, msgid = header.decode().split(" ")
    assert pri_version == "<110>1"  # facility 13 (log audit) * 8 + 6 (informational), version 1
    assert timestamp == "2026-11-29T01:02:03.456789Z"
    assert (host, app, msgid) == ("web_1", "approvals", "call.approved")  # a header field has no spaces
    assert rest.startswith(b'approvals@32473 id="7" actor="a\\"b\\]c\\\\d"] ')
    assert rest.endswith(b"\xef\xbb\xbf" + '{"note":"Grüße"}'.encode())


def test_octet_counting_frames_count_bytes_not_characters() -> None:
    body = "Grüße".encode()
    assert frame(body) == b"7 " + body


def test_sink_names_are_checked_and_kept_apart() -> None:
    with pytest.raises(ValueError, match="sink name"):
        SinkChannel(SyslogSink(SyslogSinkSettings(host="siem", name="Not Allowed", tls=False)))
    twice = AuditSinkSettings(syslog=(SyslogSinkSettings(host="a", tls=False), SyslogSinkSettings(host="b", tls=False)))
    with pytest.raises(ValueError, match="distinct names"):
        open_sinks(twice)
    assert SinkChannel(SyslogSink(SyslogSinkSettings(host="siem", tls=False))).destination_id == "audit-sink:syslog"


def test_the_web_settings_make_the_sinks_and_refuse_an_unsigned_webhook(monkeypatch: pytest.MonkeyPatch) -> None:
    from approvals_web.settings import Settings

    monkeypatch.setenv("APPROVALS_AUDIT_SYSLOG_HOST", "siem.example")
    monkeypatch.setenv("APPROVALS_AUDIT_WEBHOOK_URL", "https://siem.example/in")
    with pytest.raises(ValueError, match="AUDIT_WEBHOOK_SECRET"):
        Settings()
    monkeypatch.setenv("APPROVALS_AUDIT_WEBHOOK_SECRET", "s3cret")
    sinks = Settings().audit_sinks()
    assert [s.host for s in sinks.syslog] == ["siem.example"] and sinks.syslog[0].tls
    assert [w.url for w in sinks.webhooks] == ["https://siem.example/in"] and sinks.start == "beginning"
