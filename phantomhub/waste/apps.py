from django.apps import AppConfig


class WasteConfig(AppConfig):
    name = "phantomhub.waste"
    label = "waste"

    def ready(self) -> None:
        # Ingest and pricing announce; waste listens (docs/architecture.md, "Signals").
        from phantomhub.pricing import signals as pricing_signals
        from phantomhub.telemetry import signals as telemetry_signals
        from phantomhub.waste import receivers

        telemetry_signals.run_changed.connect(receivers.run_changed, dispatch_uid="waste-run-changed")
        pricing_signals.prices_changed.connect(receivers.prices_changed, dispatch_uid="waste-prices-changed")
