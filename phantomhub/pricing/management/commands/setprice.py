"""Put a price in force.

manage.py setprice --gpu H100-SXM --usd-per-hour 2.50 [--provider aws] [--region …]
                   [--tier on_demand] [--from 2026-01-01] [--confirm-closed]
"""

from __future__ import annotations

from datetime import datetime, time
from decimal import Decimal, InvalidOperation
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from phantomhub.pricing.catalog import gpu_resolve
from phantomhub.pricing.services import PriceError, price_set, price_set_reach
from phantomhub.telemetry.models import PricingTier


def _moment(text: str) -> datetime:
    moment = parse_datetime(text)
    if moment is None:
        day = parse_date(text)
        if day is None:
            raise CommandError(f"--from {text!r} is not a date (YYYY-MM-DD) or ISO 8601 datetime")
        moment = datetime.combine(day, time.min)
    return moment if timezone.is_aware(moment) else timezone.make_aware(moment, timezone.get_fixed_timezone(0))


class Command(BaseCommand):
    help = "Put a GPU-hour price in force (closing the previous price of the same GPU/provider/region/tier)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--gpu", required=True, help="catalog key (H100-SXM) or a GPU name runs report")
        parser.add_argument("--usd-per-hour", required=True, help="USD per GPU-hour")
        parser.add_argument("--provider", default="", help="blank: any provider")
        parser.add_argument("--region", default="", help="blank: any region")
        parser.add_argument("--tier", default=PricingTier.ON_DEMAND, choices=PricingTier.values)
        parser.add_argument("--from", dest="start", default=None, help="effective from (default: now)")
        parser.add_argument("--note", default="")
        parser.add_argument(
            "--confirm-closed", action="store_true", help="go ahead although the price reaches into a closed finance month"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            price = Decimal(options["usd_per_hour"])
        except InvalidOperation:
            raise CommandError(f"--usd-per-hour {options['usd_per_hour']!r} is not a number") from None
        if gpu_resolve(options["gpu"]) is None:
            self.stderr.write(f"note: {options['gpu']!r} is not in the GPU catalog; it prices runs reporting exactly that name")
        start = _moment(options["start"]) if options["start"] else None
        key = {"gpu": options["gpu"], "provider": options["provider"], "region": options["region"], "tier": options["tier"]}
        closed = price_set_reach(**key, effective_from=start)
        if closed and not options["confirm_closed"]:
            raise CommandError(
                f"this price reaches into closed month(s) {', '.join(closed)}: their closed figures stay, and finance "
                "shows the difference as an adjustment. Add --confirm-closed to go ahead"
            )
        try:
            entry = price_set(
                **key, usd_per_gpu_hour=price, effective_from=start, note=options["note"], actor_label="cli",
            )  # fmt: skip
        except PriceError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(str(entry))
