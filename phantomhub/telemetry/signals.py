"""What ingest announces (docs/architecture.md, "Signals"). Telemetry never imports the apps that
read its rows; they connect here (waste/receivers.py, from waste/apps.py ready())."""

from __future__ import annotations

from django.dispatch import Signal

# A run's rows changed: sent once the ingest transaction commits (receivers see the rows), with
# ``run_id`` (a UUID). Waste schedules the run's analysis.
run_changed = Signal()
