"""What /scim/v2/ says about itself: ServiceProviderConfig (RFC 7643 section 5), and the base of
every `location` it writes (PHANTOMHUB_PUBLIC_URL: what people and the identity provider open
PhantomHub by, not the Host header a proxy passed on)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urljoin, urlsplit

from django.conf import settings
from django.urls import reverse
from django_scim.constants import SchemaURI
from django_scim.models import SCIMServiceProviderConfig
from django_scim.settings import scim_settings

MAX_RESULTS = 200  # resources in one page of a list (`count` above this is cut to it)


def base_location(request: Any = None, *args: Any, **kwargs: Any) -> str:
    """django-scim2's BASE_LOCATION_GETTER: scheme and host of PHANTOMHUB_PUBLIC_URL."""
    parts = urlsplit(settings.PUBLIC_URL)
    return f"{parts.scheme}://{parts.netloc}"


class ServiceProviderConfig(SCIMServiceProviderConfig):
    """What is supported: PATCH and filters yes; bulk, sort, ETags and password changes no."""

    @property
    def location(self) -> str:
        return urljoin(base_location(self.request), reverse("scim-service-provider-config"))

    def to_dict(self) -> dict[str, Any]:
        return {
            "schemas": [SchemaURI.SERVICE_PROVIDER_CONFIG],
            "patch": {"supported": True},
            "bulk": {"supported": False, "maxOperations": 0, "maxPayloadSize": 0},
            "filter": {"supported": True, "maxResults": MAX_RESULTS},
            "changePassword": {"supported": False},
            "sort": {"supported": False},
            "etag": {"supported": False},
            "authenticationSchemes": scim_settings.AUTHENTICATION_SCHEMES,
            "meta": self.meta,
        }
