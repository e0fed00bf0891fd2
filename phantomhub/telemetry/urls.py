from django.urls import path

from phantomhub.telemetry import api, exports

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
]
