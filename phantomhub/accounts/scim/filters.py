"""`filter=` queries (RFC 7644 section 3.4.2.2) to Django querysets.

django-scim2's own filter turns a query into raw SQL over one table; PhantomHub's attributes live
in two (auth_user and the directory account), so the query goes through scim2-filter-parser's
Django Q transpiler instead, with the attribute map below: the result is an ordinary queryset,
paged in the database. An attribute the map does not name is a 400 invalidFilter naming it, never
silently dropped (the transpiler would drop it and match everyone). Comparisons ignore case, as
userName's does in SCIM.
"""

from __future__ import annotations

from typing import Any, ClassVar

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db.models import Q
from django_scim.filters import FilterQuery
from scim2_filter_parser.transpilers.django_q_object import Transpiler as QTranspiler
from scim2_filter_parser.transpilers.sql import Transpiler as SQLTranspiler

from phantomhub.accounts.models import DirectoryGroup
from phantomhub.accounts.scim.errors import bad
from phantomhub.accounts.scim.paths import filter_parse

AttrMap = dict[tuple[str, str | None, str | None], str]
USER_URN = "urn:ietf:params:scim:schemas:core:2.0:User"
GROUP_URN = "urn:ietf:params:scim:schemas:core:2.0:Group"


def _with_urn(attrs: AttrMap, urn: str) -> AttrMap:
    """Each attribute also under its schema's URN (`urn:...:User:userName`)."""
    return {**attrs, **{(a, s, urn): field for (a, s, _), field in attrs.items()}}


class ScimFilter(FilterQuery):
    """A filter parser for one resource type: django-scim2's FilterQuery (whose `attr_map` its
    adapters read), answering querysets."""

    attr_map: ClassVar[AttrMap] = {}

    @classmethod
    def query(cls, text: str) -> Q:
        tree = filter_parse(text, "filter")
        known = {(a.lower(), s.lower() if s else None, u.lower() if u else None) for a, s, u in cls.attr_map}
        seen = SQLTranspiler({})
        seen.transpile(tree)
        for attr, sub, urn in seen.attr_paths:
            if (attr.lower(), sub.lower() if sub else None, urn.lower() if urn else None) not in known:
                name = f"{attr}.{sub}" if sub else attr
                raise bad(f"filter: {name!r} is not an attribute PhantomHub filters on", "invalidFilter")
        try:
            query = QTranspiler(cls.attr_map).transpile(filter_parse(text, "filter"))
        except (ValueError, NotImplementedError) as exc:
            raise bad(f"filter: {exc}", "invalidFilter") from None
        if query is None:
            raise bad("filter: names no attribute", "invalidFilter")
        return query

    @classmethod
    def search(cls, filter_query: str, request: Any = None) -> Any:
        try:
            return cls.model_getter().objects.filter(cls.query(filter_query)).distinct()
        except ValidationError as exc:  # a value of the wrong kind, e.g. an id that is no UUID
            raise bad(f"filter: {' '.join(exc.messages)}", "invalidFilter") from None


class UserFilter(ScimFilter):
    model_getter = get_user_model
    attr_map: ClassVar[AttrMap] = _with_urn(
        {
            ("id", None, None): "directory__scim_id",
            ("userName", None, None): "username",
            ("externalId", None, None): "directory__external_id",
            ("active", None, None): "is_active",
            ("name", "givenName", None): "first_name",
            ("name", "familyName", None): "last_name",
            ("emails", None, None): "email",
            ("emails", "value", None): "email",
        },
        USER_URN,
    )


class GroupFilter(ScimFilter):
    model_getter = staticmethod(lambda: DirectoryGroup)
    attr_map: ClassVar[AttrMap] = _with_urn(
        {
            ("id", None, None): "scim_id",
            ("displayName", None, None): "display_name",
            ("externalId", None, None): "external_id",
            ("members", None, None): "members__directory__scim_id",
            ("members", "value", None): "members__directory__scim_id",
        },
        GROUP_URN,
    )
