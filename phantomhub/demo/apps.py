from django.apps import AppConfig


class DemoConfig(AppConfig):
    """The demo organization (`manage.py seeddemo`): generated runs, real CPU training, GPU nodes.
    It sits above every other app (docs/architecture.md, "Layers") and has no models."""

    name = "phantomhub.demo"
    label = "demo"
