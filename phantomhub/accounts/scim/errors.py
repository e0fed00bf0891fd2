"""The SCIM error answer (RFC 7644 section 3.12): `schemas`, `status` (a string), `detail` and, for
a 400 or 409, a `scimType`. Every refusal under /scim/v2/ answers this shape, never the API's."""

from __future__ import annotations

import json

from django.http import HttpResponse
from django_scim import constants
from django_scim.exceptions import BadRequestError, IntegrityError, SCIMException

SCIM_CONTENT_TYPE = constants.SCIM_CONTENT_TYPE


def scim_response(doc: object, status: int = 200) -> HttpResponse:
    return HttpResponse(json.dumps(doc), content_type=SCIM_CONTENT_TYPE, status=status)


def error_response(exc: SCIMException, headers: dict[str, str] | None = None) -> HttpResponse:
    doc: dict[str, object] = {"schemas": [constants.SchemaURI.ERROR], "status": str(exc.status), "detail": exc.detail}
    if exc.scim_type:
        doc["scimType"] = exc.scim_type
    response = scim_response(doc, status=int(exc.status))
    for name, value in (headers or {}).items():
        response[name] = value
    return response


def bad(detail: str, scim_type: str = "invalidValue") -> BadRequestError:
    """A 400 whose detail starts with the attribute at fault (`emails[0].value: not an email`)."""
    return BadRequestError(detail, scim_type=scim_type)


def conflict(detail: str) -> IntegrityError:
    return IntegrityError(detail, scim_type="uniqueness")


def refusal(status: int, detail: str) -> SCIMException:
    return SCIMException(detail, status=status)
