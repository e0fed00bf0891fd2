from django.urls import path, re_path

from phantomhub.fleet import api

urlpatterns = [
    path("nodes/samples", api.NodeSamplesApi.as_view(), name="node-samples"),
    path("fleet/summary", api.FleetSummaryApi.as_view(), name="fleet-summary"),
    re_path(r"^fleet/(?P<table>[a-z]+)\.csv$", api.FleetCsvApi.as_view(), name="fleet-csv"),
    path("fleet/rules", api.AttributionRulesApi.as_view(), name="fleet-rules"),
    path("fleet/rules/preview", api.AttributionPreviewApi.as_view(), name="fleet-rules-preview"),
    path("fleet/rules/jobs/<int:job_id>", api.AttributionJobApi.as_view(), name="fleet-rules-job"),
    path("fleet/invoices", api.InvoiceImportApi.as_view(), name="fleet-invoices"),
]
