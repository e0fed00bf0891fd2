from django.apps import AppConfig


class TelemetryConfig(AppConfig):
    name = "phantomhub.telemetry"
    label = "telemetry"
