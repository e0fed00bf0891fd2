"""The /scim/v2/ endpoints: django-scim2's views, each behind `access.ScimAccess`, with what
PhantomHub needs on top:

- every write runs in one transaction: a refusal part-way (a bad member in the third PATCH
  operation) writes nothing;
- every error answers the SCIM error shape (errors.py) with a 4xx naming the attribute; an id
  that is not one PhantomHub issued is a 404, never a database error;
- lists are paged in the database (`startIndex`, `count`; at most config.MAX_RESULTS a page) and
  filtered by filters.py; `attributes` / `excludedAttributes` shape what comes back (Entra ID asks
  for groups without their members).
"""

from __future__ import annotations

import logging
import uuid
from typing import Any, cast

from django import db
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.utils.decorators import method_decorator
from django.views.decorators.csrf import csrf_exempt
from django.views.generic import View
from django_scim import views as scim_views
from django_scim.constants import SchemaURI
from django_scim.exceptions import NotFoundError, SCIMException

from phantomhub.accounts.scim.access import ScimAccess
from phantomhub.accounts.scim.config import MAX_RESULTS
from phantomhub.accounts.scim.errors import bad, conflict, error_response, refusal, scim_response
from phantomhub.accounts.scim.values import json_body, schemas_check
from phantomhub.errors import DB_RETRY_AFTER_S

log = logging.getLogger(__name__)
WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
PAGE_BOUND = 2**31 - 1
ALWAYS_RETURNED = frozenset({"id", "schemas"})  # RFC 7643 section 7: "returned": "always"


def _page_number(request: HttpRequest, name: str, default: int) -> int:
    raw = request.GET.get(name)
    if raw in (None, ""):
        return default
    try:
        value = int(str(raw))
    except ValueError:
        raise bad(f"{name}: must be an integer") from None
    return max(-PAGE_BOUND, min(PAGE_BOUND, value))  # an offset past any table, not past the database's integers


def _names(request: HttpRequest, param: str) -> set[str]:
    raw = request.GET.get(param) or ""
    return {name.strip().rsplit(":", 1)[-1].split(".")[0].lower() for name in raw.split(",") if name.strip()}


def shaped(doc: dict[str, Any], request: HttpRequest) -> dict[str, Any]:
    """`attributes=a,b` keeps those (with id and schemas); `excludedAttributes=members` drops them."""
    wanted, unwanted = _names(request, "attributes"), _names(request, "excludedAttributes")
    if wanted:
        return {k: v for k, v in doc.items() if k.lower() in wanted or k in ALWAYS_RETURNED or k == "meta"}
    return {k: v for k, v in doc.items() if k.lower() not in unwanted or k in ALWAYS_RETURNED}


class ScimView(scim_views.SCIMView):
    """django-scim2's SCIMView with PhantomHub's access check, transaction and error answers."""

    @method_decorator(csrf_exempt)
    @method_decorator(ScimAccess)
    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            if request.method in WRITES:
                with transaction.atomic():
                    return cast(HttpResponse, View.dispatch(self, request, *args, **kwargs))
            return cast(HttpResponse, View.dispatch(self, request, *args, **kwargs))
        except SCIMException as exc:
            return error_response(exc)
        except db.IntegrityError:  # a concurrent write took the same userName or displayName
            return error_response(conflict("userName or displayName: already taken (a concurrent request)"))
        except (db.OperationalError, db.InterfaceError) as exc:  # the database is away: retry, as the API says
            log.warning("SCIM: database unavailable: %s", exc)
            detail = "the database is unavailable; retry shortly"
            return error_response(refusal(503, detail), headers={"Retry-After": str(DB_RETRY_AFTER_S)})
        except Exception:  # a bug: logged, answered in SCIM's shape (as django-scim2 does)
            log.exception("SCIM request failed: %s %s", request.method, request.path)
            return error_response(refusal(500, "the request could not be completed; the server log has the cause"))

    def http_method_not_allowed(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        allowed = ", ".join(m.upper() for m in self._allowed_methods() if m != "options")
        response = error_response(refusal(405, f"{request.method} is not allowed here (allowed: {allowed})"))
        response["Allow"] = allowed
        return response

    def load_body(self, body: bytes) -> dict[str, Any]:
        return json_body(body)


class ResourceView(scim_views.FilterMixin, scim_views.GetView, scim_views.PostView, scim_views.PutView,
                   scim_views.PatchView, scim_views.DeleteView, ScimView):  # fmt: skip
    """Users or Groups: the adapter (settings.SCIM_SERVICE_PROVIDER) says which."""

    def get_object(self) -> Any:
        raw = self.kwargs.get(self.lookup_url_kwarg) or ""
        try:
            scim_id = uuid.UUID(raw)
        except ValueError:
            raise NotFoundError(raw) from None
        obj = self.scim_adapter.queryset().filter(**{self.lookup_field: scim_id}).first()
        if obj is None:
            raise NotFoundError(raw)
        return obj

    def get_single(self, request: HttpRequest) -> HttpResponse:
        adapter = self.scim_adapter(self.get_object(), request=request)
        response = scim_response(shaped(adapter.to_dict(), request))
        response["Location"] = adapter.location
        return response

    def get_many(self, request: HttpRequest) -> HttpResponse:
        queryset = self.scim_adapter.queryset()
        text = request.GET.get("filter")
        if text:
            queryset = queryset.filter(pk__in=self.__class__.parser_getter().search(text, request).values("pk"))
        return self._build_response(request, queryset, *self._page(request))

    def _page(self, request: HttpRequest) -> tuple[int, int]:
        """RFC 7644 section 3.4.2.4: startIndex below 1 is 1, a negative count is 0."""
        start = max(1, _page_number(request, "startIndex", 1))
        count = min(MAX_RESULTS, max(0, _page_number(request, "count", MAX_RESULTS)))
        return start, count

    def _build_response(self, request: HttpRequest, qs: Any, start: int, count: int) -> HttpResponse:
        page = list(qs.order_by("pk")[start - 1 : start - 1 + count]) if count else []
        resources = [shaped(self.scim_adapter(obj, request=request).to_dict(), request) for obj in page]
        return scim_response(
            {
                "schemas": [SchemaURI.LIST_RESPONSE],
                "totalResults": qs.count(),
                "itemsPerPage": len(resources),
                "startIndex": start,
                "Resources": resources,
            }
        )

    def _written(self, adapter: Any, status: int) -> HttpResponse:
        adapter.validate_dict(self.load_body(self.request.body))  # every value checked, then one write
        adapter.save()
        response = scim_response(adapter.to_dict(), status=status)
        response["Location"] = adapter.location
        return response

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        """As django-scim2's, but an empty object is refused naming what it lacks (`schemas`)."""
        return self._written(self.scim_adapter(self.model_cls(), request=request), 201)

    def put(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        return self._written(self.scim_adapter(self.get_object(), request=request), 200)

    def patch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        body = self.load_body(request.body)
        schemas_check(body, SchemaURI.PATCH_OP)
        if not isinstance(body.get("Operations"), list) or not body["Operations"]:
            raise bad("Operations: must be a non-empty list", "invalidSyntax")
        return super().patch(request, *args, **kwargs)

    def delete(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        self.scim_adapter(self.get_object(), request=request).delete()
        return HttpResponse(status=204)


class UsersView(ResourceView):
    scim_adapter_getter = scim_views.get_user_adapter
    model_cls_getter = scim_views.get_user_model
    parser_getter = scim_views.get_user_filter_parser


class GroupsView(ResourceView):
    scim_adapter_getter = scim_views.get_group_adapter
    model_cls_getter = scim_views.get_group_model
    parser_getter = scim_views.get_group_filter_parser


class ServiceProviderConfigView(ScimView, scim_views.ServiceProviderConfigView):
    pass


class ResourceTypesView(ScimView, scim_views.ResourceTypesView):
    def get(self, request: HttpRequest, uuid: str | None = None, *args: Any, **kwargs: Any) -> HttpResponse:
        if uuid and uuid not in self.type_dict_by_type_id(request):
            raise NotFoundError(uuid)
        return super().get(request, uuid, *args, **kwargs)


class SchemasView(ScimView, scim_views.SchemasView):
    def get(self, request: HttpRequest, uuid: str | None = None, *args: Any, **kwargs: Any) -> HttpResponse:
        if uuid and uuid not in self.schemas_by_uri:
            raise NotFoundError(uuid)
        return super().get(request, uuid, *args, **kwargs)
