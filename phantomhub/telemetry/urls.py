from django.urls import path

from phantomhub.telemetry import api, exports
from phantomhub.waste import api as waste_api

urlpatterns = [
    path("health", api.HealthApi.as_view(), name="health"),
    path("runs", api.RunCreateApi.as_view(), name="run-create"),
    path("runs/<uuid:run_id>", api.RunDetailApi.as_view(), name="run-detail"),
    path("runs/<uuid:run_id>/steps", api.RunStepsApi.as_view(), name="run-steps"),
    path("runs/<uuid:run_id>/steps.parquet", exports.RunStepsParquetApi.as_view(), name="run-steps-parquet"),
    path("runs/<uuid:run_id>/samples", api.RunSamplesApi.as_view(), name="run-samples"),
    path("runs/<uuid:run_id>/events", api.RunEventsApi.as_view(), name="run-events"),
    path("runs/<uuid:run_id>/batch", api.RunBatchApi.as_view(), name="run-batch"),
    path("runs/<uuid:run_id>/batches", api.RunNodeBatchApi.as_view(), name="run-batches"),
    path("runs/<uuid:run_id>/analysis", waste_api.RunAnalysisApi.as_view(), name="run-analysis"),
    path("runs/<uuid:run_id>/series", waste_api.RunSeriesApi.as_view(), name="run-series"),
]
