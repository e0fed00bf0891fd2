from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "phantomhub.audit"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The models of every app are recorded from here (docs/architecture.md, Layers: audit sits
        # above them all), by django-auditlog's model signals.
        from phantomhub.audit import receivers, registration

        registration.register_all()
        receivers.connect()
