from django.apps import AppConfig


class PlanningConfig(AppConfig):
    name = "phantomhub.planning"
    label = "planning"
