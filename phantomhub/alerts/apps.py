from django.apps import AppConfig


class AlertsConfig(AppConfig):
    name = "phantomhub.alerts"
    label = "alerts"
