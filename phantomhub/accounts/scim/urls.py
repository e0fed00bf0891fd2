"""/scim/v2/ (the project's urls.py includes it there). Names are `scim-*`, one per route, so
the access matrix (tests/test_access_matrix.py) covers each; a list route takes GET and POST, a
resource route GET, PUT, PATCH and DELETE."""

from django.urls import path

from phantomhub.accounts.scim import views

LIST = ["get", "post"]
RESOURCE = ["get", "put", "patch", "delete"]

urlpatterns = [
    path("Users", views.UsersView.as_view(http_method_names=LIST), name="scim-users"),
    path("Users/<str:uuid>", views.UsersView.as_view(http_method_names=RESOURCE), name="scim-user"),
    path("Groups", views.GroupsView.as_view(http_method_names=LIST), name="scim-groups"),
    path("Groups/<str:uuid>", views.GroupsView.as_view(http_method_names=RESOURCE), name="scim-group"),
    path("ServiceProviderConfig", views.ServiceProviderConfigView.as_view(), name="scim-service-provider-config"),
    path("ResourceTypes", views.ResourceTypesView.as_view(), name="scim-resource-types"),
    path("ResourceTypes/<str:uuid>", views.ResourceTypesView.as_view(), name="scim-resource-type"),
    path("Schemas", views.SchemasView.as_view(), name="scim-schemas"),
    path("Schemas/<str:uuid>", views.SchemasView.as_view(), name="scim-schema"),
]
