"""Re-encrypt every stored secret with the newest key in PORTAL_ENCRYPTION_KEYS."""

from django.apps import apps
from django.core.management.base import BaseCommand
from django.db import transaction

from portal import secrets
from portal.fields import EncryptedTextField


class Command(BaseCommand):
    help = "Re-encrypt all secrets with the first key of PORTAL_ENCRYPTION_KEYS (then drop old keys)."

    def handle(self, *args, **options):
        total = 0
        for model in apps.get_models():
            fields = [f for f in model._meta.concrete_fields if isinstance(f, EncryptedTextField)]
            if not fields:
                continue
            names = [f.attname for f in fields]
            with transaction.atomic():
                # values() decrypts with any known key; encrypt() always uses the newest one.
                # .update() writes the ciphertext directly, without signals or audit noise.
                for row in model._default_manager.select_for_update().values("pk", *names):
                    updates = {n: secrets.encrypt(row[n]) for n in names if row[n]}
                    if updates:
                        model._default_manager.filter(pk=row["pk"]).update(**updates)
                        total += 1
        self.stdout.write(self.style.SUCCESS(f"Re-encrypted {total} row(s) with the newest key."))
