"""`/scim/v2/Users`: create, read, list with a filter, replace, patch and delete users (RFC 7644 §3)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from scim2_models import Context, ListResponse, PatchOp, User

from ..auth import ContextDep
from .access import ScimActor, read_json
from .errors import ScimRoute, scim_json
from .filters import user_filter
from .paging import base_url, page, returned, row_id
from .resources import provisioned, user_resource

router = APIRouter(prefix="/scim/v2/Users", route_class=ScimRoute, include_in_schema=False)


def _answer(user: User[Any], status: int = 200, request: Request | None = None) -> Response:
    headers = {"Location": str(user.meta.location)} if user.meta and user.meta.location else None
    shown = returned(request, User) if request is not None else None
    dumped = user.model_dump(scim_ctx=Context.RESOURCE_QUERY_RESPONSE, response_parameters=shown)
    return scim_json(dumped, status, headers)


@router.post("")
async def create_user(request: Request, context: ContextDep, actor: ScimActor) -> Response:
    user: User[Any] = User.model_validate(await read_json(request), scim_ctx=Context.RESOURCE_CREATION_REQUEST)
    role = context.settings.scim_default_role
    row = await context.service.provision_user(provisioned(user), role=role, actor=actor)
    return _answer(user_resource(row, base_url(request)), 201)


@router.get("")
async def list_users(request: Request, context: ContextDep, actor: ScimActor) -> Response:
    query = request.query_params
    where = user_filter(query["filter"]) if query.get("filter") else None
    start, count = page(query)
    total, rows = await context.store.people.scim_users(where, offset=start - 1, limit=count)
    resources = [user_resource(row, base_url(request)) for row in rows]
    listed = ListResponse[User[Any]](
        total_results=total, start_index=start, items_per_page=len(resources), resources=resources
    )
    shown = returned(request, User)
    return scim_json(listed.model_dump(scim_ctx=Context.SEARCH_RESPONSE, response_parameters=shown))


@router.get("/{user_id}")
async def get_user(user_id: str, request: Request, context: ContextDep, actor: ScimActor) -> Response:
    row = await context.store.people.scim_user(row_id(user_id, "User"))
    return _answer(user_resource(row, base_url(request)), request=request)


@router.put("/{user_id}")
async def replace_user(user_id: str, request: Request, context: ContextDep, actor: ScimActor) -> Response:
    wanted: User[Any] = User.model_validate(await read_json(request), scim_ctx=Context.RESOURCE_REPLACEMENT_REQUEST)
    row = await context.service.replace_user(row_id(user_id, "User"), provisioned(wanted), actor=actor)
    return _answer(user_resource(row, base_url(request)))


@router.patch("/{user_id}")
async def patch_user(user_id: str, request: Request, context: ContextDep, actor: ScimActor) -> Response:
    """Apply the operations (scim2-models) to the user as stored, then store the result as a replacement would."""
    patch = PatchOp[User[Any]].model_validate(await read_json(request), scim_ctx=Context.RESOURCE_PATCH_REQUEST)
    number = row_id(user_id, "User")
    user = user_resource(await context.store.people.scim_user(number), base_url(request))
    if patch.patch(user):
        stored = await context.service.replace_user(number, provisioned(user), actor=actor)
        return _answer(user_resource(stored, base_url(request)))
    return _answer(user)


@router.delete("/{user_id}")
async def delete_user(user_id: str, context: ContextDep, actor: ScimActor) -> Response:
    await context.service.delete_provisioned_user(row_id(user_id, "User"), actor=actor)
    return Response(status_code=204)


__all__ = ("router",)
