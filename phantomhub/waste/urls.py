from django.urls import path

from phantomhub.waste import api

urlpatterns = [
    path("runs/<uuid:run_id>/analysis", api.RunAnalysisApi.as_view(), name="run-analysis"),
    path("runs/<uuid:run_id>/series", api.RunSeriesApi.as_view(), name="run-series"),
]
