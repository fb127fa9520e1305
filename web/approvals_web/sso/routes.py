"""The sign-in routes: redirect to the provider, come back with a code, leave through the provider.

`/sso/<name>/login` starts the flow (Authlib: PKCE, state, nonce); `/sso/<name>/callback`
validates the answer and the ID token, makes or refreshes the user (`provider_login`) and opens
a session like a password login. Every failure is a page saying why, audited; nothing is written
for a sign-in that proved nothing but its `login.failed` event.
"""

from __future__ import annotations

from typing import Any

from authlib.common.errors import AuthlibBaseError  # type: ignore[import-untyped]
from authlib.integrations.base_client.errors import OAuthError  # type: ignore[import-untyped]
from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import RedirectResponse, Response
from httpx import HTTPError
from joserfc.errors import JoseError

from approvals.store.people.identities import SignInRefused

from ..auth import SESSION_ID, SESSION_SSO, ContextDep, app_context, csrf_token
from ..local_redirect import safe_next
from ..templating import render
from .client import SignInClients
from .config import OidcProvider, provider_login

router = APIRouter(include_in_schema=False)

SESSION_NEXT = "sso_next"
LEEWAY = 30
"""Seconds of clock skew allowed on the ID token's `exp`, `iat` and `nbf`."""


def sign_in_clients(request: Request) -> SignInClients:
    """The app's clients, made on first use from the settings."""
    clients: SignInClients | None = getattr(request.app.state, "sso_clients", None)
    if clients is None:
        context = app_context(request)
        clients = SignInClients(context.settings.oidc_providers, context.service)
        request.app.state.sso_clients = clients
    return clients


def _provider(request: Request, name: str) -> OidcProvider:
    provider = sign_in_clients(request).providers.get(name)
    if provider is None:
        raise HTTPException(404, f"No sign-in provider named {name!r}")
    return provider


def _refused(request: Request, provider: OidcProvider, message: str, status: int) -> Response:
    return render(request, "sso_refused.html", {"provider": provider.label, "message": message}, status=status)


@router.get("/sso/{name}/login")
async def sso_login(request: Request, name: str, next: str | None = None) -> Response:
    provider = _provider(request, name)
    clients = sign_in_clients(request)
    try:
        await clients.metadata(name)
        request.session[SESSION_NEXT] = safe_next(next)
        redirect_uri = str(request.url_for("sso_callback", name=name))
        response: Response = await clients.client(name).authorize_redirect(request, redirect_uri)
    except (HTTPError, ValueError, AuthlibBaseError) as error:
        return _refused(request, provider, f"{provider.label} cannot be reached or is misconfigured: {error}", 502)
    return response


@router.get("/sso/{name}/callback")
async def sso_callback(request: Request, name: str, context: ContextDep) -> Response:
    provider = _provider(request, name)
    clients = sign_in_clients(request)
    try:
        metadata = await clients.metadata(name)
        # OIDC Core 3.1.3.7: `aud` must name us. Authlib checks it only through `azp` unless told, and options
        # given replace its default issuer check, so both are stated here.
        claims_options = {
            "iss": {"essential": True, "values": [str(metadata["issuer"])]},
            "aud": {"essential": True, "values": [provider.client_id]},
        }
        token: dict[str, Any] = await clients.client(name).authorize_access_token(
            request, leeway=LEEWAY, claims_options=claims_options
        )
        claims = dict(token.get("userinfo") or {})
        if not claims:
            raise OAuthError(error="no_id_token", description="the provider sent no ID token")
        if provider.username_claim not in claims or provider.groups_claim not in claims:
            extra = await clients.client(name).userinfo(token=token)
            if extra.get("sub") == claims["sub"]:
                claims = {**extra, **claims}
    except (OAuthError, AuthlibBaseError, JoseError, HTTPError, ValueError, KeyError, TypeError) as error:
        reason = f"{type(error).__name__}: {error}"
        await context.service.record_sign_in_failure(name, provider.issuer, reason)
        return _refused(request, provider, f"The sign-in could not be verified ({reason}). Please start again.", 400)
    login = provider_login(provider, str(metadata["issuer"]), claims)
    previous = request.session.get(SESSION_ID)
    try:
        _, session_id = await context.service.provider_login(
            login, max_age=context.settings.session_max_age, previous=str(previous) if previous else None
        )
    except SignInRefused as refusal:
        return _refused(request, provider, str(refusal), 403)
    target = str(request.session.get(SESSION_NEXT) or "/")
    request.session.clear()
    request.session[SESSION_ID] = session_id
    request.session[SESSION_SSO] = {
        "provider": name,
        "id_token": token.get("id_token"),
        "issuer": login.issuer,
        "subject": login.subject,
    }
    csrf_token(request)
    return RedirectResponse(target, status_code=303)


async def provider_logout(request: Request, sso: Any) -> Response | None:
    """The redirect to the provider's end-session endpoint for an SSO session, when it has one."""
    if not isinstance(sso, dict) or sso.get("provider") not in sign_in_clients(request).providers:
        return None
    client = sign_in_clients(request).client(str(sso["provider"]))
    try:
        metadata = await client.load_server_metadata()
        if not metadata.get("end_session_endpoint"):
            return None
        after = str(request.url_for("login_page"))
        result = await client.create_logout_url(
            post_logout_redirect_uri=after, id_token_hint=sso.get("id_token"), client_id=client.client_id
        )
    except (HTTPError, AuthlibBaseError, RuntimeError):
        return None  # logged out here; the provider's session stays, as with a provider without logout
    return RedirectResponse(str(result["url"]), status_code=303)
