"""SCIM attribute values to checked Python values. Every refusal is a 400 whose detail starts
with the attribute at fault (`emails[0].value: not an email address`), so the identity provider's
provisioning log says what to fix; nothing is written before all of a request's values pass.

Lengths are those of the columns the values land in (auth.User's 150-character names, 254 for an
email, the directory tables' 255), refused rather than cut: a name cut silently would no longer
match the identity provider's.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ValidationError
from django.core.validators import EmailValidator
from django_scim.constants import SchemaURI

from phantomhub.accounts.scim.errors import bad

USERNAME_MAX = 150  # auth.User.username
NAME_MAX = 150  # auth.User.first_name, last_name
EMAIL_MAX = 254  # auth.User.email
EXTERNAL_ID_MAX = 255  # DirectoryAccount.external_id, DirectoryGroup.external_id
DISPLAY_NAME_MAX = 255  # DirectoryGroup.display_name
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def json_body(raw: bytes) -> dict[str, Any]:
    """A request body: one JSON object (400 invalidSyntax otherwise)."""
    try:
        body = json.loads(raw.decode("utf-8") or "null")
    except UnicodeDecodeError:
        raise bad("body: not UTF-8", "invalidSyntax") from None
    except RecursionError:
        raise bad("body: nested too deeply", "invalidSyntax") from None
    except ValueError as exc:
        raise bad(f"body: not valid JSON ({exc})", "invalidSyntax") from None
    if not isinstance(body, dict):
        raise bad("body: must be a JSON object", "invalidSyntax")
    return body


def schemas_check(body: dict[str, Any], urn: str) -> None:
    schemas = body.get("schemas")
    if not isinstance(schemas, list) or urn not in schemas:
        raise bad(f"schemas: must list {urn}", "invalidSyntax")


def text(value: Any, where: str, *, max_length: int, required: bool = False) -> str:
    """A string attribute; absent or null is "" unless `required`."""
    if value is None:
        if required:
            raise bad(f"{where}: required")
        return ""
    if not isinstance(value, str):
        raise bad(f"{where}: must be a string, not {type(value).__name__}")
    value = value.strip()
    if required and not value:
        raise bad(f"{where}: must not be empty")
    if _CONTROL.search(value):
        raise bad(f"{where}: control characters are not allowed")
    if len(value) > max_length:
        raise bad(f"{where}: at most {max_length} characters")
    return value


def boolean(value: Any, where: str) -> bool:
    """true or false; also the strings "True"/"False", which Entra ID sends in PATCH bodies."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise bad(f"{where}: must be true or false")


def email(value: Any, where: str) -> str:
    """One address from `emails` (the primary one, else the first) or from a plain string."""
    if value is None or value == []:
        return ""
    if isinstance(value, dict):  # one entry instead of a list (OneLogin)
        value = [value]
    if isinstance(value, str):
        address, at = value, where
    elif isinstance(value, list):
        for i, entry in enumerate(value):
            if not isinstance(entry, dict):
                raise bad(f"{where}[{i}]: must be an object with a value")
        index = next((i for i, entry in enumerate(value) if entry.get("primary") is True), 0)
        address, at = value[index].get("value"), f"{where}[{index}].value"
    else:
        raise bad(f"{where}: must be a list of {{value, type, primary}}")
    address = text(address, at, max_length=EMAIL_MAX)
    if address:
        try:
            EmailValidator()(address)
        except ValidationError:
            raise bad(f"{at}: not an email address") from None
    return address


def scim_uuid(value: Any, where: str) -> uuid.UUID:
    if not isinstance(value, str):
        raise bad(f"{where}: must be a string id")
    try:
        return uuid.UUID(value)
    except ValueError:
        raise bad(f"{where}: {value!r} is not an id PhantomHub issued") from None


def member_ids(value: Any, where: str) -> list[uuid.UUID]:
    """`members` values: [{"value": "<a User's id>"}, ...]."""
    if value is None:
        return []
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list):
        raise bad(f"{where}: must be a list of {{value}}")
    out = []
    for i, entry in enumerate(value):
        if not isinstance(entry, dict):
            raise bad(f"{where}[{i}]: must be an object with a value")
        out.append(scim_uuid(entry.get("value"), f"{where}[{i}].value"))
    return out


@dataclass
class UserFields:
    """What PhantomHub keeps of a SCIM User."""

    username: str
    external_id: str = ""
    given_name: str = ""
    family_name: str = ""
    email: str = ""
    active: bool | None = None  # None: not said (PUT without it keeps the current state)


def name_parts(value: Any, where: str = "name") -> dict[str, str]:
    """The sub-attributes of `name` that are given: {"given_name": ..., "family_name": ...}."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise bad(f"{where}: must be an object")
    out = {}
    for key, attr in (("givenName", "given_name"), ("familyName", "family_name")):
        if key in value:
            out[attr] = text(value[key], f"{where}.{key}", max_length=NAME_MAX)
    return out


def user_fields(body: dict[str, Any]) -> UserFields:
    """A whole User (POST, PUT). Attributes PhantomHub does not keep (displayName, title,
    phoneNumbers, the enterprise extension, a password) are accepted and not stored."""
    schemas_check(body, SchemaURI.USER)
    fields = UserFields(
        username=text(body.get("userName"), "userName", max_length=USERNAME_MAX, required=True),
        external_id=text(body.get("externalId"), "externalId", max_length=EXTERNAL_ID_MAX),
        email=email(body.get("emails"), "emails"),
        active=None if body.get("active") is None else boolean(body["active"], "active"),
    )
    for attr, value in name_parts(body.get("name")).items():
        setattr(fields, attr, value)
    return fields


@dataclass
class GroupFields:
    display_name: str
    external_id: str = ""
    members: list[uuid.UUID] = field(default_factory=list)


def group_fields(body: dict[str, Any]) -> GroupFields:
    """A whole Group (POST, PUT)."""
    schemas_check(body, SchemaURI.GROUP)
    return GroupFields(
        display_name=text(body.get("displayName"), "displayName", max_length=DISPLAY_NAME_MAX, required=True),
        external_id=text(body.get("externalId"), "externalId", max_length=EXTERNAL_ID_MAX),
        members=member_ids(body.get("members"), "members"),
    )
