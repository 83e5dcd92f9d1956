"""Price the external routes the starter catalogue knows (channels/data/price_catalogue.json)."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from channels.services import load_price_catalogue


class Command(BaseCommand):
    help = "Add catalogue prices to external routes that have none (--overwrite: to every route it knows)."

    def add_arguments(self, parser):
        parser.add_argument("--overwrite", action="store_true", help="Add a new price row even to priced routes.")

    def handle(self, *args, overwrite: bool = False, **options):
        added = load_price_catalogue(overwrite=overwrite)
        for price in added:
            self.stdout.write(f"{price.route}: input {price.input}, output {price.output}")
        self.stdout.write(f"{len(added)} route(s) priced.")
