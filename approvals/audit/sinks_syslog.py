"""The syslog sink: each audit document as one RFC 5424 message over TCP (RFC 6587 octet counting), TLS optional.

Why a small writer of our own: `logging.handlers.SysLogHandler` writes BSD-style (RFC 3164)
messages without structured data and has neither TLS nor octet-counting framing; the RFC
5424 packages on PyPI are `logging` handlers too (`rfc5424-logging-handler`, last released
in 2019): they write from the logging thread, blocking, and swallow errors, so the
deliverer could not tell a message that left from one that did not, and retry it. The
format is a few lines (`format_message`); the connection is asyncio's, with `ssl`.

TCP syslog has no acknowledgements: a message written into a connection the receiver is
closing can vanish in its buffers. So the sink keeps the frames of the last
`replay_seconds` it wrote on the current connection; when that connection turns out to be
dead (the receiver closed it, a write failed), the next connection starts by sending them
again, in order. Repeats are possible (at least once); receivers drop them by the `id` in
the structured data.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import os
import socket
import ssl
import time
from collections import deque

from ..channels.base import DeliveryFailed
from .sinks import SinkDocument, SyslogSinkSettings

__all__ = ("SyslogSink", "format_message", "frame", "tls_context")

_SEVERITY = {"event": 6, "checkpoint": 5}
"""informational for events, notice for checkpoints."""


def _header_field(value: str, limit: int) -> str:
    """A header field: printable US-ASCII without spaces, at most `limit` characters, `-` when empty."""
    cleaned = "".join(c if 33 <= ord(c) <= 126 else "_" for c in value)[:limit]
    return cleaned or "-"


def _param_name(name: str) -> str:
    return "".join(c for c in name if 33 <= ord(c) <= 126 and c not in '= ]"')[:32] or "x"


def _param_value(value: str) -> str:
    """RFC 5424, 6.3.3: `"`, `\\` and `]` are escaped with a backslash; any other UTF-8 is allowed."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("]", "\\]")


def _timestamp(at: dt.datetime) -> str:
    return at.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def format_message(document: SinkDocument, settings: SyslogSinkSettings, hostname: str) -> bytes:
    """`<PRI>1 TIMESTAMP HOSTNAME APP-NAME PROCID MSGID [SD] BOM MSG`: the JSON document is the MSG."""
    pri = settings.facility * 8 + _SEVERITY[document.kind]
    params = " ".join(f'{_param_name(k)}="{_param_value(v)}"' for k, v in document.params.items())
    header = " ".join(
        (
            f"<{pri}>1",
            _timestamp(document.at),
            _header_field(hostname, 255),
            _header_field(settings.app_name, 48),
            str(os.getpid()),
            _header_field(document.action, 32),
        )
    )
    sd = f"[{_header_field(settings.sd_id, 32)} {params}]"
    return f"{header} {sd} ".encode() + b"\xef\xbb\xbf" + document.json()


def frame(message: bytes) -> bytes:
    """RFC 6587 octet counting: the message's length in bytes, a space, the message."""
    return str(len(message)).encode() + b" " + message


def tls_context(settings: SyslogSinkSettings) -> ssl.SSLContext:
    """Checks the receiver's certificate and name (against `ca_file`, else the system's CAs); a client cert if set."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=settings.ca_file)
    if settings.cert_file:
        context.load_cert_chain(settings.cert_file, settings.key_file)
    return context


class SyslogSink:
    """One syslog receiver over one connection, opened when first needed and again after it breaks."""

    def __init__(self, settings: SyslogSinkSettings, *, replay_seconds: float = 10.0) -> None:
        self.settings = settings
        self.name = settings.name
        scheme = "syslog+tls" if settings.tls else "syslog+tcp"
        self.site = f"{scheme}://{settings.host}:{settings.port}"
        self.hostname = settings.hostname or socket.gethostname()
        self.replay_seconds = replay_seconds
        self._context = tls_context(settings) if settings.tls else None
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._sent: deque[tuple[float, bytes]] = deque()
        """Frames written on this connection in the last `replay_seconds`: sent again if it turns out dead."""

    async def send(self, document: SinkDocument) -> None:
        data = frame(format_message(document, self.settings, self.hostname))
        try:
            writer = await self._connection()
            writer.write(data)
            await writer.drain()
        except (OSError, ssl.SSLError, EOFError) as exc:
            await self._drop()
            raise DeliveryFailed(f"{self.site}: {type(exc).__name__}: {exc}") from exc
        now = time.monotonic()
        self._sent.append((now, data))
        while self._sent and self._sent[0][0] < now - self.replay_seconds:
            self._sent.popleft()

    async def aclose(self) -> None:
        await self._drop()
        self._sent.clear()

    def _alive(self) -> bool:
        """The receiver has not closed the connection (it never sends, so anything read is an end)."""
        reader, writer = self._reader, self._writer
        return reader is not None and writer is not None and not writer.is_closing() and not reader.at_eof()

    async def _connection(self) -> asyncio.StreamWriter:
        if self._alive():
            assert self._writer is not None
            return self._writer
        await self._drop()
        settings = self.settings
        self._reader, self._writer = await asyncio.open_connection(
            settings.host,
            settings.port,
            ssl=self._context,
            server_hostname=settings.host if self._context is not None else None,
        )
        replay = [data for _, data in self._sent]
        self._sent.clear()
        for data in replay:  # what the dead connection may have lost, before anything newer
            self._writer.write(data)
        await self._writer.drain()
        now = time.monotonic()
        self._sent.extend((now, data) for data in replay)
        return self._writer

    async def _drop(self) -> None:
        writer, self._reader, self._writer = self._writer, None, None
        if writer is None:
            return
        writer.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(writer.wait_closed(), 1.0)
