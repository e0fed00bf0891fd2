from django.apps import AppConfig


class PortalConfig(AppConfig):
    name = "phantomhub.portal"
    label = "portal"

    def ready(self) -> None:
        # A price change reaching into a closed month asks first (pricing/api.py); portal answers.
        from phantomhub.portal.finance import closed_months_reached
        from phantomhub.pricing.signals import price_span_closed

        price_span_closed.connect(closed_months_reached, dispatch_uid="portal-closed-months")

        # The read views step aside while migrations alter the tables under them (readviews.py).
        from django.db.models.signals import post_migrate, pre_migrate

        from phantomhub.portal.readviews import views_create, views_drop

        pre_migrate.connect(views_drop, sender=self, dispatch_uid="portal-views-drop")
        post_migrate.connect(views_create, sender=self, dispatch_uid="portal-views-create")
