from django.apps import AppConfig


class PricingConfig(AppConfig):
    name = "phantomhub.pricing"
    label = "pricing"
