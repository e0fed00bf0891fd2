from django.apps import AppConfig


class ReportsConfig(AppConfig):
    name = "phantomhub.reports"
    label = "reports"
