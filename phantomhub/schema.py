"""The OpenAPI schema (drf-spectacular): every operation documents the errors it can answer.

Each answers in the one error shape (phantomhub.errors), and which statuses an operation can
give follows from how the API is built, so they are added here rather than on every view:
- 400: any operation (a NUL character in any query parameter, phantomhub.telemetry.parsers);
- 401: any operation that authenticates (an unknown or malformed token);
- 403: the same, unless it lets anyone read (permission refused, or a CSRF check failed);
- 404: any operation with path parameters (a value its URL does not take, or no such object);
- 413 and 415: any operation that reads a request body (too large; not JSON, or not gzip).
429 is declared by the views that limit a rate (ingest, sign-in). tests/test_fuzz_api.py holds
every answer of the running service to this schema.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import inline_serializer
from rest_framework import serializers
from rest_framework.permissions import SAFE_METHODS, AllowAny


class ErrorSerializer(serializers.Serializer[Any]):
    error = inline_serializer(
        "ErrorBody",
        {
            "code": serializers.CharField(),
            "message": serializers.CharField(),
            "fields": serializers.DictField(child=serializers.CharField()),
        },
    )


class ErrorResponsesAutoSchema(AutoSchema):
    def _error_statuses(self) -> list[str]:
        statuses = ["400"]
        if self.view.authentication_classes:
            statuses.append("401")
            open_read = self.method in SAFE_METHODS and all(p is AllowAny for p in self.view.permission_classes)
            if not open_read:
                statuses.append("403")
        if "{" in self.path:
            statuses.append("404")
        if self.method in ("POST", "PUT", "PATCH") and self.get_request_serializer() is not None:
            statuses += ["413", "415"]
        return statuses

    def _get_response_bodies(self, direction: Any = "response") -> dict[str, Any]:
        responses: dict[str, Any] = super()._get_response_bodies(direction)
        for status in self._error_statuses():
            if status not in responses:
                responses[status] = self._get_response_for_code(ErrorSerializer, status, direction=direction)
        return responses
