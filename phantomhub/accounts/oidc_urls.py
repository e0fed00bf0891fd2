"""The sign-in routes of accounts (under /api/v1/auth/): single sign-on and the break-glass link.
They answer browsers with redirects, not JSON (accounts/oidc_views.py)."""

from django.urls import path

from phantomhub.accounts import oidc_views

urlpatterns = [
    path("oidc/start", oidc_views.OidcStartView.as_view(), name="oidc-start"),
    path("oidc/callback", oidc_views.OidcCallbackView.as_view(), name="oidc-callback"),
    path("breakglass", oidc_views.BreakGlassView.as_view(), name="auth-breakglass"),
]
