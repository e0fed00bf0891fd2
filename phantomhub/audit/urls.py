from django.urls import path

from phantomhub.audit import api

urlpatterns = [
    path("audit", api.AuditListApi.as_view(), name="audit"),
    path("audit.csv", api.AuditCsvApi.as_view(), name="audit-csv"),
]
