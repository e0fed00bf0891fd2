from django.contrib import admin
from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from phantomhub.portal.metrics import metrics
from phantomhub.portal.views import spa

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", include("phantomhub.telemetry.urls")),
    path("api/v1/", include("phantomhub.waste.urls")),
    path("api/v1/pricing/", include("phantomhub.pricing.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("api/v1/portal/", include("phantomhub.portal.urls")),
    path("api/v1/auth/", include("phantomhub.accounts.oidc_urls")),
    path("api/v1/alerts/", include("phantomhub.alerts.urls")),
    path("api/v1/reports/", include("phantomhub.reports.urls")),
    path("api/v1/planning/", include("phantomhub.planning.urls")),
    path("api/v1/", include("phantomhub.fleet.urls")),
    path("api/v1/", include("phantomhub.audit.urls")),
    path("metrics", metrics, name="metrics"),
    path("scim/v2/", include("phantomhub.accounts.scim.urls")),  # the identity provider's (SCIM token only)
    # Everything else is a client-side route of the web UI.
    re_path(r"^(?!api/|admin/|static/|assets/|metrics$|scim/).*$", spa, name="spa"),
]

# Under /api/, a URL that matches no route answers in the API's error shape (phantomhub/errors.py).
handler404 = "phantomhub.errors.not_found"
