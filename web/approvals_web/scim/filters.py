"""SCIM filters (`userName eq "bjensen"`) to SQL conditions, by scim2-filter-parser: no filter grammar of our own.

The transpiler writes a condition with named placeholders and hands the values apart, so
they are bound, never spliced into the SQL; the attributes it may name are those of
`USER_ATTRIBUTES` alone, anything else is an `invalidFilter`.
"""

from __future__ import annotations

from typing import Any

from scim2_filter_parser.lexer import SCIMLexer  # type: ignore[import-untyped]
from scim2_filter_parser.parser import SCIMParser, SCIMParserError  # type: ignore[import-untyped]
from scim2_filter_parser.transpilers.sql import Transpiler  # type: ignore[import-untyped]
from scim2_models import InvalidFilterException

from approvals.store.people.provisioning import UserFilter

__all__ = ("USER_ATTRIBUTES", "user_filter")

USER_ATTRIBUTES: dict[tuple[str, str | None, str | None], str] = {
    ("userName", None, None): "users.username",
    ("externalId", None, None): "users.external_id",
    ("id", None, None): "CAST(users.id AS VARCHAR(20))",
    ("emails", None, None): "users.email",
    ("emails", "value", None): "users.email",
}
"""SCIM attribute path (name, sub-attribute, schema) -> the SQL it means."""

_LONGEST_FILTER = 2000


_CANONICAL = {name.lower(): name for name, _, _ in USER_ATTRIBUTES} | {
    sub.lower(): sub for _, sub, _ in USER_ATTRIBUTES if sub is not None
}
"""Attribute names are case-insensitive (RFC 7643 §2.1): each spelling to ours, which the transpiler knows."""


class _Transpiler(Transpiler):  # type: ignore[misc]
    """The parser's SQL transpiler, reading attribute names case-insensitively (`userName` compared as SCIM says)."""

    def visit_AttrPath(self, node: Any) -> Any:  # noqa: N802 - the parser's visitor naming
        node.attr_name = _CANONICAL.get(str(node.attr_name).lower(), node.attr_name)
        if node.sub_attr is not None:
            node.sub_attr.value = _CANONICAL.get(str(node.sub_attr.value).lower(), node.sub_attr.value)
        return super().visit_AttrPath(node)


def user_filter(text: str) -> UserFilter:
    """The condition a SCIM filter on users stands for; `InvalidFilterException` for one we cannot read or answer."""
    if len(text) > _LONGEST_FILTER:
        raise InvalidFilterException(detail=f"A filter may be at most {_LONGEST_FILTER} characters")
    try:
        tree = SCIMParser().parse(SCIMLexer().tokenize(text))
        transpiler = _Transpiler(USER_ATTRIBUTES)
        sql, params = transpiler.transpile(tree)
    except (SCIMParserError, IndexError, ValueError, AttributeError, TypeError) as exc:
        raise InvalidFilterException(detail=f"Cannot read the filter {text!r}: {exc or 'malformed'}") from None
    if not sql or any(tuple(path) not in USER_ATTRIBUTES for path in transpiler.attr_paths):
        raise InvalidFilterException(
            detail=f"The filter {text!r} names an attribute that cannot be filtered on: use userName, externalId, "
            "id or emails"
        )
    names = {key: f"scim_{key}" for key in params}
    bound = sql.format(**{key: f":{name}" for key, name in names.items()})
    return UserFilter(bound, {names[key]: value for key, value in params.items()})
