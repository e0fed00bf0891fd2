"""Users and Groups as SCIM documents: django-scim2's adapters, over Django's auth.User with its
`DirectoryAccount`, and over `DirectoryGroup` (docs/design-notes.md says why not its mixin models).

An adapter reads a whole resource (`validate_dict`, POST and PUT) or applies PATCH operations
(RFC 7644 section 3.5.2: add, replace, remove; with a path, a value filter in the path, or no
path and an object of attributes, as Entra ID and Okta send), checking every value before
`services.py` writes anything. Attributes PhantomHub does not keep (displayName of a person,
title, phone numbers, the enterprise extension) are accepted and not stored, so an identity
provider's default attribute mappings work; an attribute SCIM does not define is a 400.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urljoin

from django.db.models import Prefetch
from django.urls import reverse
from django_scim.adapters import SCIMGroup, SCIMUser
from django_scim.constants import SchemaURI

from phantomhub.accounts.models import DirectoryGroup
from phantomhub.accounts.scim import services
from phantomhub.accounts.scim.config import base_location
from phantomhub.accounts.scim.errors import bad
from phantomhub.accounts.scim.filters import GROUP_URN, USER_URN, GroupFilter, UserFilter
from phantomhub.accounts.scim.paths import Path, matches, path_parse
from phantomhub.accounts.scim.values import (
    DISPLAY_NAME_MAX,
    EXTERNAL_ID_MAX,
    NAME_MAX,
    USERNAME_MAX,
    GroupFields,
    UserFields,
    boolean,
    email,
    member_ids,
    name_parts,
    text,
    user_fields,
)
from phantomhub.accounts.scim.values import group_fields as group_fields_of

ENTERPRISE_URN = SchemaURI.ENTERPRISE_USER.lower()
# Attributes of the SCIM User schema (RFC 7643 section 4.1) that PhantomHub accepts and does not keep.
USER_NOT_KEPT = frozenset(
    {
        "displayname", "nickname", "profileurl", "title", "usertype", "preferredlanguage", "locale", "timezone",
        "password", "phonenumbers", "ims", "photos", "addresses", "entitlements", "roles", "x509certificates",
    }
)  # fmt: skip
NAME_NOT_KEPT = frozenset({"formatted", "middlename", "honorificprefix", "honorificsuffix"})
ENVELOPE = frozenset({"schemas", "meta"})  # sent back by some clients inside a PATCH value; ignored


def _resource_type(name: str, endpoint: str, schema: str, description: str) -> dict[str, Any]:
    return {
        "schemas": [SchemaURI.RESOURCE_TYPE],
        "id": name,
        "name": name,
        "endpoint": endpoint,
        "description": description,
        "schema": schema,
        "meta": {
            "location": urljoin(base_location(), reverse("scim-resource-type", kwargs={"uuid": name})),
            "resourceType": "ResourceType",
        },
    }


class _Operations:
    """Checks the shape of a PATCH body's operations and hands each (op, path, value) on."""

    def operations(self, operations: Any) -> list[tuple[str, Path, Any, str]]:
        if not isinstance(operations, list) or not operations:
            raise bad("Operations: must be a non-empty list", "invalidSyntax")
        out: list[tuple[str, Path, Any, str]] = []
        for i, operation in enumerate(operations):
            where = f"Operations[{i}]"
            if not isinstance(operation, dict):
                raise bad(f"{where}: must be an object with op, path and value", "invalidSyntax")
            op = operation.get("op")
            if not isinstance(op, str) or op.lower() not in ("add", "remove", "replace"):
                raise bad(f"{where}.op: must be add, remove or replace", "invalidSyntax")
            op = op.lower()
            raw_path, value = operation.get("path"), operation.get("value")
            if op != "remove" and "value" not in operation:
                raise bad(f"{where}.value: required for {op}", "invalidSyntax")
            if raw_path is None:
                if op == "remove":
                    raise bad(f"{where}.path: required for remove", "noTarget")
                if not isinstance(value, dict):
                    raise bad(f"{where}.value: must be an object of attributes when there is no path", "invalidSyntax")
                for key, item in value.items():
                    if key.lower().startswith(ENTERPRISE_URN) or key in ENVELOPE:
                        continue  # the enterprise extension's attributes: not kept
                    out.append((op, path_parse(key), item, f"{where}.value.{key}"))
            else:
                out.append((op, path_parse(raw_path), value, where))
        return out


def _urn_check(path: Path, urn: str) -> bool:
    """Whether the path is of this resource's core schema (True), of the enterprise extension
    (False: not kept), or else a 400."""
    if path.urn is None or path.urn.lower() == urn.lower():
        return True
    if path.urn.lower().startswith(ENTERPRISE_URN):
        return False
    raise bad(f"path: {path.text!r} is of a schema PhantomHub does not support", "invalidPath")


class ScimUser(_Operations, SCIMUser):
    url_name = "scim-user"
    id_field = "directory__scim_id"
    ATTR_MAP = UserFilter.attr_map

    def __init__(self, obj: Any, request: Any = None) -> None:
        super().__init__(obj, request)
        self.obj: Any = obj
        self.fields: UserFields | None = None

    @staticmethod
    def queryset() -> Any:
        return services.people().select_related("directory").prefetch_related("directory_groups")

    @property
    def id(self) -> str:
        return str(self.obj.directory.scim_id)

    @property
    def path(self) -> str:
        return reverse(self.url_name, kwargs={"uuid": self.id})

    @property
    def display_name(self) -> str:
        full = f"{self.obj.first_name} {self.obj.last_name}".strip()
        return full or self.obj.username

    def to_dict(self) -> dict[str, Any]:
        user, account = self.obj, self.obj.directory
        doc: dict[str, Any] = {"schemas": [SchemaURI.USER], "id": self.id}
        if account.external_id:
            doc["externalId"] = account.external_id
        doc.update(
            {
                "userName": user.username,
                "name": {"givenName": user.first_name, "familyName": user.last_name, "formatted": self.display_name},
                "displayName": self.display_name,
                "emails": [{"value": user.email, "primary": True, "type": "work"}] if user.email else [],
                "active": user.is_active,
                "groups": [
                    {
                        "value": str(group.scim_id),
                        "$ref": urljoin(base_location(), reverse("scim-group", kwargs={"uuid": str(group.scim_id)})),
                        "display": group.display_name,
                        "type": "direct",
                    }
                    for group in user.directory_groups.all()
                ],
                "meta": {"resourceType": "User", "created": user.date_joined.isoformat(), "location": self.location},
            }
        )
        return doc

    def validate_dict(self, d: dict[str, Any]) -> None:
        self.fields = user_fields(d)

    def from_dict(self, d: dict[str, Any]) -> None:
        """Read by validate_dict already (all values checked before anything is written)."""

    def save(self) -> None:
        assert self.fields is not None
        if self.obj.pk is None:
            self.obj = services.user_create(self.fields)
        else:
            services.user_update(self.obj, self.fields)
        self.obj = self.queryset().get(pk=self.obj.pk)

    def delete(self) -> None:
        services.user_delete(self.obj)

    def handle_operations(self, operations: Any) -> None:
        user = self.obj
        self.fields = UserFields(
            username=user.username,
            external_id=user.directory.external_id,
            given_name=user.first_name,
            family_name=user.last_name,
            email=user.email,
        )
        for op, path, value, where in self.operations(operations):
            self._set(op, path, value, where)
        self.save()

    def _set(self, op: str, path: Path, value: Any, where: str) -> None:
        fields = self.fields
        assert fields is not None
        if not _urn_check(path, USER_URN):
            return
        remove, name = op == "remove", path.text
        if path.attr == "username":
            if remove:
                raise bad(f"{name}: required, it cannot be removed", "mutability")
            fields.username = text(value, name, max_length=USERNAME_MAX, required=True)
        elif path.attr == "externalid":
            fields.external_id = "" if remove else text(value, name, max_length=EXTERNAL_ID_MAX)
        elif path.attr == "active":
            if remove:
                raise bad(f"{name}: cannot be removed; replace it with false", "mutability")
            fields.active = boolean(value, name)
        elif path.attr == "name" and path.sub in ("givenname", "familyname"):
            given = "" if remove else text(value, name, max_length=NAME_MAX)
            setattr(fields, "given_name" if path.sub == "givenname" else "family_name", given)
        elif path.attr == "name" and path.sub is None:
            if remove:
                fields.given_name = fields.family_name = ""
            for attr, part in name_parts(value, name).items():
                setattr(fields, attr, part)
        elif path.attr == "name" and path.sub in NAME_NOT_KEPT:
            return
        elif path.attr == "emails" and path.sub in (None, "value"):
            # One address is kept: whatever entry the path selects, it becomes (or stops being) it.
            fields.email = "" if remove else email(value, name)
        elif path.attr in USER_NOT_KEPT or path.attr == "emails" or (path.attr == "id" and value == self.id):
            return  # not kept (another part of emails, a title, ...), or the id it already has
        elif path.attr in ("id", "groups", "meta"):
            raise bad(f"{name}: read-only (a person's groups change through the Group's members)", "mutability")
        else:
            raise bad(f"{where}: {name!r} is not an attribute of a SCIM User", "invalidPath")

    @classmethod
    def resource_type_dict(cls, request: Any = None) -> dict[str, Any]:
        return _resource_type("User", "/Users", SchemaURI.USER, "A person PhantomHub knows from the identity provider")


class ScimGroup(_Operations, SCIMGroup):
    url_name = "scim-group"
    id_field = "scim_id"
    ATTR_MAP = GroupFilter.attr_map

    def __init__(self, obj: Any, request: Any = None) -> None:
        super().__init__(obj, request)
        self.obj: Any = obj
        self.fields: GroupFields | None = None
        self.pending_members: list[Any] | None = None

    @staticmethod
    def queryset() -> Any:
        people = services.people().select_related("directory").order_by("username")
        return DirectoryGroup.objects.prefetch_related(Prefetch("members", queryset=people))

    @property
    def id(self) -> str:
        return str(self.obj.scim_id)

    @property
    def path(self) -> str:
        return reverse(self.url_name, kwargs={"uuid": self.id})

    @property
    def display_name(self) -> str:
        return str(self.obj.display_name)

    def _members(self) -> list[Any]:
        return [user for user in self.obj.members.all() if hasattr(user, "directory")]

    def to_dict(self) -> dict[str, Any]:
        group = self.obj
        doc: dict[str, Any] = {"schemas": [SchemaURI.GROUP], "id": self.id, "displayName": group.display_name}
        if group.external_id:
            doc["externalId"] = group.external_id
        doc["members"] = [
            {
                "value": str(user.directory.scim_id),
                "$ref": urljoin(base_location(), reverse("scim-user", kwargs={"uuid": str(user.directory.scim_id)})),
                "display": user.username,
                "type": "User",
            }
            for user in self._members()
        ]
        doc["meta"] = {"resourceType": "Group", "created": group.created_at.isoformat(), "location": self.location}
        return doc

    def validate_dict(self, d: dict[str, Any]) -> None:
        self.fields = group_fields_of(d)

    def from_dict(self, d: dict[str, Any]) -> None:
        """Read by validate_dict already."""

    def save(self) -> None:
        assert self.fields is not None
        if self.obj.pk is None:
            self.obj = services.group_create(self.fields)
        else:
            members = self.pending_members if self.pending_members is not None else services.members_resolve(self.fields.members)
            services.group_update(self.obj, self.fields, members)
        self.obj = self.queryset().get(pk=self.obj.pk)

    def delete(self) -> None:
        services.group_delete(self.obj)

    def handle_operations(self, operations: Any) -> None:
        group = self.obj
        self.fields = GroupFields(display_name=group.display_name, external_id=group.external_id)
        self.pending_members = self._members()
        for op, path, value, where in self.operations(operations):
            self._set(op, path, value, where)
        self.save()

    def _set(self, op: str, path: Path, value: Any, where: str) -> None:
        fields, members = self.fields, self.pending_members
        assert fields is not None and members is not None
        if not _urn_check(path, GROUP_URN):
            return
        remove, name = op == "remove", path.text
        if path.attr == "displayname":
            if remove:
                raise bad(f"{name}: required, it cannot be removed", "mutability")
            fields.display_name = text(value, name, max_length=DISPLAY_NAME_MAX, required=True)
        elif path.attr == "externalid":
            fields.external_id = "" if remove else text(value, name, max_length=EXTERNAL_ID_MAX)
        elif path.attr == "members":
            self.pending_members = self._members_changed(op, path, value, members)
        elif path.attr == "id" and value == self.id:
            return
        elif path.attr in ("id", "meta"):
            raise bad(f"{name}: read-only", "mutability")
        else:
            raise bad(f"{where}: {name!r} is not an attribute of a SCIM Group", "invalidPath")

    @staticmethod
    def _members_changed(op: str, path: Path, value: Any, members: list[Any]) -> list[Any]:
        name = path.text
        if path.filter is not None or path.sub is not None:
            if op != "remove" or path.sub is not None:
                raise bad(f"{name}: only remove takes a filtered members path (add and replace take a list)", "invalidPath")
            kept = []
            for user in members:
                entry = {"value": str(user.directory.scim_id), "display": user.username, "type": "User"}
                if not matches(path.filter, entry):
                    kept.append(user)
            return kept
        if op == "remove":
            if value is None:
                return []  # "remove all members" (RFC 7644 section 3.5.2.2)
            gone = set(member_ids(value, name))
            return [user for user in members if user.directory.scim_id not in gone]
        given = services.members_resolve(member_ids(value, name), name)
        if op == "replace":
            return given
        present = {user.pk for user in members}
        return members + [user for user in given if user.pk not in present]

    @classmethod
    def resource_type_dict(cls, request: Any = None) -> dict[str, Any]:
        return _resource_type("Group", "/Groups", SchemaURI.GROUP, "A group of the identity provider")
