from django.apps import AppConfig


class WasteConfig(AppConfig):
    name = "phantomhub.waste"
    label = "waste"
