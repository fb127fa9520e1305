"""Authlib's Starlette OpenID client for each configured provider, with sign-in state in the database.

Authlib does the protocol: discovery, PKCE (S256), `state` and `nonce`, the code exchange, ID
token validation (signature against the JWKS, refetched once for an unknown `kid`; expiry, nonce;
issuer and audience as the callback states them) and the end-session URL. We add the database-backed state cache
(a replayed state finds nothing) and a check that discovery names the configured issuer.
"""

from __future__ import annotations

from typing import Any

import httpx
from authlib.integrations.starlette_client import OAuth, StarletteOAuth2App  # type: ignore[import-untyped]

from approvals.service import ApprovalService

from .config import OidcProvider

__all__ = ("SignInClients", "StateCache")

STATE_SECONDS = 600
"""How long a sign-in may take between the redirect and the callback."""
HTTP_TIMEOUT = 10.0
"""Seconds for any request to a provider: a stalled provider cannot hold a request for longer."""


class StateCache:
    """Authlib's cache interface over the service's sign-in states; `get` takes (reads and deletes)."""

    def __init__(self, service: ApprovalService) -> None:
        self.service = service

    async def get(self, key: str) -> str | None:
        return await self.service.take_sign_in_state(key)

    async def set(self, key: str, value: str, expires: int | None = None) -> None:
        await self.service.save_sign_in_state(key, value, expires or STATE_SECONDS)

    async def delete(self, key: str) -> None:
        await self.service.drop_sign_in_state(key)


class SignInClients:
    """One registered Authlib client per provider, made once per app."""

    def __init__(self, providers: list[OidcProvider], service: ApprovalService) -> None:
        self.providers = {provider.name: provider for provider in providers}
        self.oauth = OAuth(cache=StateCache(service))
        # Authlib makes an httpx client for every request to a provider; each would load the CA bundle
        # again (~20 ms of CPU on the event loop), so they share one context, loaded once.
        tls = httpx.create_ssl_context()
        for provider in providers:
            self.oauth.register(
                provider.name,
                client_id=provider.client_id,
                client_secret=provider.client_secret or None,
                server_metadata_url=provider.discovery_url,
                client_kwargs={
                    "scope": " ".join(provider.scopes),
                    "code_challenge_method": "S256",
                    "timeout": HTTP_TIMEOUT,
                    "verify": tls,
                },
            )

    def client(self, name: str) -> StarletteOAuth2App:
        app: StarletteOAuth2App = self.oauth.create_client(name)
        return app

    async def metadata(self, name: str) -> dict[str, Any]:
        """The provider's discovery document; refused when it names another issuer than configured."""
        metadata: dict[str, Any] = await self.client(name).load_server_metadata()
        configured = self.providers[name].issuer.rstrip("/")
        if str(metadata.get("issuer", "")).rstrip("/") != configured:
            raise ValueError(f"the provider's discovery names issuer {metadata.get('issuer')!r}, not {configured!r}")
        return metadata
