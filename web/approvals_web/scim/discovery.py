"""What a provider reads before it provisions: `ServiceProviderConfig`, `ResourceTypes`, `Schemas` (RFC 7644 §4).

All of it is made from scim2-models' own descriptions of `User` and `Group`, so what we
announce is what we validate against.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from scim2_models import (
    AuthenticationScheme,
    Bulk,
    ChangePassword,
    Context,
    ETag,
    Filter,
    Group,
    ListResponse,
    Meta,
    NotFoundException,
    NotImplementedException,
    Patch,
    Resource,
    ResourceType,
    Schema,
    ServiceProviderConfig,
    Sort,
    User,
)

from .access import ScimActor
from .errors import ScimRoute, scim_error, scim_json
from .paging import MAX_PAGE, base_url

router = APIRouter(prefix="/scim/v2", route_class=ScimRoute, include_in_schema=False)

_RESOURCES: tuple[type[Resource[Any]], ...] = (User, Group)
_ENDPOINTS = frozenset({"ServiceProviderConfig", "ResourceTypes", "Schemas", "Users", "Groups"})


def _config(base: str) -> ServiceProviderConfig:
    return ServiceProviderConfig(
        patch=Patch(supported=True),
        bulk=Bulk(supported=False, max_operations=0, max_payload_size=0),
        filter=Filter(supported=True, max_results=MAX_PAGE),
        change_password=ChangePassword(supported=False),
        sort=Sort(supported=False),
        etag=ETag(supported=False),
        authentication_schemes=[
            AuthenticationScheme(
                type=AuthenticationScheme.Type.oauthbearertoken,
                name="Bearer token",
                description="An approvals API token with the 'scim' scope (approvals tokens create --scope scim)",
                primary=True,
            )
        ],
        meta=Meta(resource_type="ServiceProviderConfig", location=f"{base}/scim/v2/ServiceProviderConfig"),
    )


def _resource_type(model: type[Resource[Any]], base: str) -> ResourceType:
    kind = ResourceType.from_resource(model)
    kind.meta = Meta(resource_type="ResourceType", location=f"{base}/scim/v2/ResourceTypes/{kind.id}")
    return kind


def _schema(model: type[Resource[Any]], base: str) -> Schema:
    schema = model.to_schema()
    schema.meta = Meta(resource_type="Schema", location=f"{base}/scim/v2/Schemas/{schema.id}")
    return schema


def _listed(kind: type[ResourceType] | type[Schema], items: list[Any]) -> Response:
    listed = ListResponse[kind](  # type: ignore[valid-type]
        total_results=len(items), start_index=1, items_per_page=len(items), resources=items
    )
    return scim_json(listed.model_dump(scim_ctx=Context.SEARCH_RESPONSE))


@router.get("/ServiceProviderConfig")
async def service_provider_config(request: Request, actor: ScimActor) -> Response:
    return scim_json(_config(base_url(request)).model_dump(scim_ctx=Context.RESOURCE_QUERY_RESPONSE))


@router.get("/ResourceTypes")
async def resource_types(request: Request, actor: ScimActor) -> Response:
    return _listed(ResourceType, [_resource_type(model, base_url(request)) for model in _RESOURCES])


@router.get("/ResourceTypes/{name}")
async def resource_type(name: str, request: Request, actor: ScimActor) -> Response:
    for model in _RESOURCES:
        kind = _resource_type(model, base_url(request))
        if kind.id == name:
            return scim_json(kind.model_dump(scim_ctx=Context.RESOURCE_QUERY_RESPONSE))
    raise NotFoundException(detail=f"No resource type {name!r}")


@router.get("/Schemas")
async def schemas(request: Request, actor: ScimActor) -> Response:
    return _listed(Schema, [_schema(model, base_url(request)) for model in _RESOURCES])


@router.get("/Schemas/{urn}")
async def schema(urn: str, request: Request, actor: ScimActor) -> Response:
    for model in _RESOURCES:
        found = _schema(model, base_url(request))
        if found.id == urn:
            return scim_json(found.model_dump(scim_ctx=Context.RESOURCE_QUERY_RESPONSE))
    raise NotFoundException(detail=f"No schema {urn!r}")


@router.api_route("/{anything:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"])
async def unknown(anything: str, request: Request, actor: ScimActor) -> Response:
    """Anything else under `/scim/v2` is a SCIM Error, not a page: 405 for an endpoint's wrong method, 501 for
    searching every resource type at once (`/.search`, not offered), else 404."""
    endpoint = anything.strip("/").split("/", 1)[0]
    if endpoint == ".search":
        raise NotImplementedException(detail="Searching every resource type at once is not offered")
    if endpoint in _ENDPOINTS:
        return scim_error(405, f"{request.method} is not allowed on /scim/v2/{anything}")
    raise NotFoundException(detail=f"No SCIM endpoint /scim/v2/{anything}")
