from django.apps import AppConfig


class PortalConfig(AppConfig):
    name = "phantomhub.portal"
    label = "portal"

    def ready(self) -> None:
        # A price change reaching into a closed month asks first (pricing/api.py); portal answers.
        from phantomhub.portal.finance import closed_months_reached
        from phantomhub.pricing.services import price_span_closed

        price_span_closed.connect(closed_months_reached, dispatch_uid="portal-closed-months")
