from django.apps import AppConfig


class PortalConfig(AppConfig):
    name = "phantomhub.portal"
    label = "portal"
