"""Seed the shipped example prices (flagged is_example) into an empty price book."""

import json
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from statistics import median

from django.db import migrations

START = datetime.fromisoformat("2025-01-01T00:00:00+00:00")


def seed(apps, schema_editor):
    PriceEntry = apps.get_model("pricing", "PriceEntry")
    PriceAudit = apps.get_model("pricing", "PriceAudit")
    if PriceEntry.objects.exists():
        return
    data = json.loads((Path(__file__).resolve().parent.parent / "example_prices.json").read_text())
    by_gpu = {}
    rows = []
    for row in data["prices"]:
        price = Decimal(str(row["usd_per_gpu_hour"]))
        note = f"example: {row['offering']}; {row['basis']}"[:200]
        rows.append((row["gpu"], row["provider"], row["region"], row["tier"], price, note))
        if row["tier"] == "on_demand":
            by_gpu.setdefault(row["gpu"], []).append(price)
    for gpu, prices in by_gpu.items():
        fallback = Decimal(median(prices)).quantize(Decimal("0.01"))
        rows.append((gpu, "", "", "on_demand", fallback, "example: median of the on-demand examples, for runs naming no provider"))
    seen = set()
    for gpu, provider, region, tier, price, note in rows:
        if (gpu, provider, region, tier) in seen:
            continue
        seen.add((gpu, provider, region, tier))
        entry = PriceEntry.objects.create(
            gpu=gpu, provider=provider, region=region, tier=tier, usd_per_gpu_hour=price,
            effective_from=START, is_example=True, note=note,
        )
        PriceAudit.objects.create(
            entry_id=entry.pk, action="create", actor_label="example seed",
            after={"gpu": gpu, "provider": provider, "region": region, "tier": tier, "usd_per_gpu_hour": str(price)},
        )


class Migration(migrations.Migration):
    dependencies = [("pricing", "0001_initial")]
    operations = [migrations.RunPython(seed, migrations.RunPython.noop)]
