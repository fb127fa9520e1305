"""One SMTP connection kept open between mails: connecting, STARTTLS and logging in happen once, not per mail.

The e-mail channel mails one reviewer at a time, and the deliverer hands it one event at a
time, so one connection serves it. A connection idle for longer than `IDLE_SECONDS` is
closed and opened afresh (servers drop idle clients after a few minutes); one that the
server dropped anyway is noticed on the next mail, which is sent again once over a new
connection. An attempt cut short (the deliverer's timeout, a stop) closes the connection,
since the server's state mid-command is unknown.

What each SMTP answer means for the channel is in `approvals.channels.email`'s docstring;
this module sorts them: `SendOutcome` for a refused recipient or message, `DeliveryFailed`
for an outage or our own configuration. aiosmtplib resets the envelope after a refusal, so
the connection stays usable.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .base import DeliveryFailed
from .settings import SmtpSettings

if TYPE_CHECKING:
    from email.message import EmailMessage

    import aiosmtplib

__all__ = ("IDLE_SECONDS", "Mailer", "SendOutcome")

IDLE_SECONDS = 60.0


@dataclass(frozen=True)
class SendOutcome:
    """What one message's sending came to."""

    sent: bool
    """The server took it."""
    temporary: bool = False
    """Not sent, and a later try may succeed (4xx); False with `sent` False: refused for good (5xx)."""
    problem: str = ""


class Mailer:
    """Sends messages over one kept-open connection; `close` it when done (`open_email_channel` does)."""

    def __init__(self, smtp: SmtpSettings) -> None:
        self.smtp = smtp
        self._client: aiosmtplib.SMTP | None = None
        self._last_used = 0.0

    async def send(self, message: EmailMessage, recipient: str) -> SendOutcome:
        """Send one message to one recipient; raise `DeliveryFailed` for an outage or a refused sender or login."""
        import aiosmtplib

        if self._client is not None and time.monotonic() - self._last_used > IDLE_SECONDS:
            await self.close()
        reused = self._client is not None
        try:
            client = await self._connected()
            try:
                await client.send_message(message, sender=self.smtp.sender, recipients=[recipient])
            except aiosmtplib.SMTPServerDisconnected:
                await self.close()
                if not reused:
                    raise
                client = await self._connected()  # the server dropped a kept connection: once more on a new one
                await client.send_message(message, sender=self.smtp.sender, recipients=[recipient])
        except aiosmtplib.SMTPRecipientsRefused as exc:
            codes = [refused.code for refused in exc.recipients]
            problem = "; ".join(f"{refused.code} {refused.message}" for refused in exc.recipients)
            return SendOutcome(sent=False, temporary=any(code < 500 for code in codes), problem=problem)
        except aiosmtplib.SMTPDataError as exc:
            return SendOutcome(sent=False, temporary=exc.code < 500, problem=f"{exc.code} {exc.message}")
        except aiosmtplib.SMTPSenderRefused as exc:
            problem = f"the SMTP server refused the sender {self.smtp.sender}: {exc.code} {exc.message}"
            raise DeliveryFailed(problem) from None
        except DeliveryFailed:
            raise
        except (aiosmtplib.SMTPException, OSError) as exc:  # connect, timeout, disconnect, TLS, other answers
            await self.close()
            raise DeliveryFailed(f"SMTP {self.smtp.host}:{self.smtp.port}: {type(exc).__name__}: {exc}") from None
        except BaseException:  # cancelled mid-command: the server's state is unknown
            await self.close()
            raise
        finally:
            self._last_used = time.monotonic()
        return SendOutcome(sent=True)

    async def close(self) -> None:
        """Say QUIT if the connection still answers, and forget it."""
        client, self._client = self._client, None
        if client is None:
            return
        try:
            if client.is_connected:
                await client.quit(timeout=min(self.smtp.timeout, 2.0))
        except Exception:  # closing a broken connection: nothing to save
            client.close()

    async def _connected(self) -> aiosmtplib.SMTP:
        import aiosmtplib

        if self._client is not None and self._client.is_connected:
            return self._client
        smtp = self.smtp
        options: dict[str, Any] = {
            "hostname": smtp.host,
            "port": smtp.port,
            "timeout": smtp.timeout,
            "use_tls": smtp.security == "tls",
            "start_tls": smtp.security == "starttls",
        }
        if smtp.username:
            options |= {"username": smtp.username, "password": smtp.password or ""}
        client = aiosmtplib.SMTP(**options)
        try:
            await client.connect()
        except aiosmtplib.SMTPAuthenticationError as exc:
            client.close()
            raise DeliveryFailed(f"the SMTP server refused our credentials: {exc.code} {exc.message}") from None
        except BaseException:
            client.close()
            raise
        self._client = client
        return client
