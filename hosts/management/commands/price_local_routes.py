"""Price each deployment's routes from its host's GPU-hour cost (hosts.showback)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from hosts.models import Deployment
from hosts.showback.services import PRICE_WINDOW_DAYS, price_from_gpu_hours


class Command(BaseCommand):
    help = "Set the price of local routes from their host's cost per GPU-hour and the tokens served per GPU-hour."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--days", type=int, default=PRICE_WINDOW_DAYS, help="Measure over this many days.")

    def handle(self, *args: Any, days: int = PRICE_WINDOW_DAYS, **options: Any) -> None:
        for deployment in Deployment.objects.select_related("host").filter(channel__isnull=False):
            derived, prices = price_from_gpu_hours(deployment, days=days)
            if prices:
                self.stdout.write(
                    f"{deployment.name}: {derived.per_million} per million tokens ({len(prices)} route(s))"
                )
            else:
                self.stdout.write(f"{deployment.name}: not priced ({derived.reason})")
