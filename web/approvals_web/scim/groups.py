"""`/scim/v2/Groups`: a provider's groups, whose members are users (RFC 7644 §3); membership is each user's `groups`."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from scim2_filter_parser.lexer import SCIMLexer  # type: ignore[import-untyped]
from scim2_filter_parser.parser import SCIMParser, SCIMParserError  # type: ignore[import-untyped]
from scim2_filter_parser.transpilers.sql import Transpiler  # type: ignore[import-untyped]
from scim2_models import Context, Group, InvalidFilterException, InvalidValueException, ListResponse, PatchOp

from ..auth import ContextDep
from .access import ScimActor, read_json
from .errors import ScimRoute, scim_json
from .paging import base_url, page, returned, row_id
from .resources import group_resource

router = APIRouter(prefix="/scim/v2/Groups", route_class=ScimRoute, include_in_schema=False)

_GROUP_ATTRIBUTES = {("displayName", None, None): "display_name", ("externalId", None, None): "external_id"}


def _answer(group: Group, status: int = 200, request: Request | None = None) -> Response:
    headers = {"Location": str(group.meta.location)} if group.meta and group.meta.location else None
    shown = returned(request, Group) if request is not None else None
    dumped = group.model_dump(scim_ctx=Context.RESOURCE_QUERY_RESPONSE, response_parameters=shown)
    return scim_json(dumped, status, headers)


def _member_ids(group: Group) -> set[int]:
    ids = {str(member.value) for member in group.members or () if member.value is not None}
    bad = sorted(value for value in ids if not value.isdigit() or len(value) > 18)
    if bad:
        raise InvalidValueException(detail=f"No user {bad[0]!r} to make a member")
    return {int(value) for value in ids}


def _equality(text: str) -> dict[str, str]:
    """`displayName eq "x"` and/or `externalId eq "y"` (read by scim2-filter-parser): the group filters we answer."""
    try:
        transpiler = Transpiler(_GROUP_ATTRIBUTES)
        sql, params = transpiler.transpile(SCIMParser().parse(SCIMLexer().tokenize(text[:2000])))
    except (SCIMParserError, IndexError, ValueError, AttributeError, TypeError):
        raise InvalidFilterException(detail=f"Cannot read the filter {text!r}") from None
    paths = [tuple(path) for path in transpiler.attr_paths]
    if not sql or any(path not in _GROUP_ATTRIBUTES for path in paths) or " OR " in sql or "LIKE" in sql:
        raise InvalidFilterException(detail="Groups can be filtered by displayName eq and externalId eq alone")
    wanted: dict[str, str] = {}
    for path, key in zip(paths, sorted(params), strict=False):
        if f"{_GROUP_ATTRIBUTES[path]} = {{{key}}}" not in sql:
            raise InvalidFilterException(detail="Groups can be filtered by displayName eq and externalId eq alone")
        wanted[_GROUP_ATTRIBUTES[path]] = str(params[key])
    return wanted


@router.post("")
async def create_group(request: Request, context: ContextDep, actor: ScimActor) -> Response:
    group = Group.model_validate(await read_json(request), scim_ctx=Context.RESOURCE_CREATION_REQUEST)
    row = await context.service.provision_group(
        group.display_name or "", external_id=group.external_id, members=_member_ids(group), actor=actor
    )
    stored, members = await context.store.people.scim_group(row.id)
    return _answer(group_resource(stored, members, base_url(request)), 201)


@router.get("")
async def list_groups(request: Request, context: ContextDep, actor: ScimActor) -> Response:
    query = request.query_params
    wanted = _equality(query["filter"]) if query.get("filter") else {}
    found = await context.store.people.scim_groups(
        name=wanted.get("display_name"), external_id=wanted.get("external_id")
    )
    start, count = page(query)
    one_page = found[start - 1 : start - 1 + count]
    resources = [group_resource(row, members, base_url(request)) for row, members in one_page]
    listed = ListResponse[Group](
        total_results=len(found), start_index=start, items_per_page=len(resources), resources=resources
    )
    shown = returned(request, Group)
    return scim_json(listed.model_dump(scim_ctx=Context.SEARCH_RESPONSE, response_parameters=shown))


@router.get("/{group_id}")
async def get_group(group_id: str, request: Request, context: ContextDep, actor: ScimActor) -> Response:
    row, members = await context.store.people.scim_group(row_id(group_id, "Group"))
    return _answer(group_resource(row, members, base_url(request)), request=request)


@router.put("/{group_id}")
async def replace_group(group_id: str, request: Request, context: ContextDep, actor: ScimActor) -> Response:
    group = Group.model_validate(await read_json(request), scim_ctx=Context.RESOURCE_REPLACEMENT_REQUEST)
    number = row_id(group_id, "Group")
    await context.service.replace_group(
        number, group.display_name or "", external_id=group.external_id, members=_member_ids(group), actor=actor
    )
    row, members = await context.store.people.scim_group(number)
    return _answer(group_resource(row, members, base_url(request)))


@router.patch("/{group_id}")
async def patch_group(group_id: str, request: Request, context: ContextDep, actor: ScimActor) -> Response:
    """Members added or removed (or anything else a PATCH may say), applied by scim2-models to the group as stored."""
    patch = PatchOp[Group].model_validate(await read_json(request), scim_ctx=Context.RESOURCE_PATCH_REQUEST)
    number = row_id(group_id, "Group")
    row, members = await context.store.people.scim_group(number)
    group = group_resource(row, members, base_url(request))
    if patch.patch(group):
        await context.service.replace_group(
            number, group.display_name or "", external_id=group.external_id, members=_member_ids(group), actor=actor
        )
        row, members = await context.store.people.scim_group(number)
        group = group_resource(row, members, base_url(request))
    return _answer(group)


@router.delete("/{group_id}")
async def delete_group(group_id: str, context: ContextDep, actor: ScimActor) -> Response:
    await context.service.delete_group(row_id(group_id, "Group"), actor=actor)
    return Response(status_code=204)
