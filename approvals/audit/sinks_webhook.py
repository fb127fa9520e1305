"""The webhook sink: each audit document POSTed as JSON to one URL, signed like every webhook of approvals.

The POST is the reviewer webhooks' own (`approvals.channels.webhooks.send_event`): the
headers `X-Approvals-Event` (the document's type), `X-Approvals-Delivery` (the audit
event's id, the same for every retry: drop repeats by it), `X-Approvals-Timestamp` and
`X-Approvals-Signature` (check them with `approvals.channels.webhook_signature.verify_webhook`).
Unlike a reviewer webhook, no answer is final: a 4xx is tried again like a 5xx, since an
audit copy with a hole in it is worse than a late one. Redirects are not followed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..channels.base import DeliveryFailed
from ..channels.webhooks import SendResult, WebhookEvent, send_event, webhook_site
from .sinks import SinkDocument, WebhookSinkSettings

if TYPE_CHECKING:
    import httpx

__all__ = ("WebhookSink",)


class WebhookSink:
    """One URL; its HTTP client is made on first use (httpx is the `server` extra's)."""

    def __init__(self, settings: WebhookSinkSettings) -> None:
        self.settings = settings
        self.name = settings.name
        self.site = webhook_site(settings.url)
        self._client: httpx.AsyncClient | None = None

    async def send(self, document: SinkDocument) -> None:
        if self._client is None:
            import httpx

            self._client = httpx.AsyncClient(follow_redirects=False, timeout=self.settings.timeout)
        event = WebhookEvent(id=document.id, name=str(document.body["type"]), body=document.json())
        result, problem = await send_event(self._client, self.settings.url, event, self.settings.secret)
        if result is not SendResult.ACCEPTED:
            raise DeliveryFailed(f"{self.site}: {problem}")

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()
