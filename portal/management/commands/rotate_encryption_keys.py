"""Re-encrypt every stored secret with the newest key in PORTAL_ENCRYPTION_KEYS."""

from cryptography.fernet import InvalidToken
from django.apps import apps
from django.core.management.base import BaseCommand
from django.db import transaction

from portal import secrets
from portal.fields import EncryptedTextField


class Command(BaseCommand):
    help = "Re-encrypt all secrets with the first key of PORTAL_ENCRYPTION_KEYS (then drop old keys)."

    def handle(self, *args, **options):
        total = unreadable = 0
        for model in apps.get_models():
            fields = [f for f in model._meta.concrete_fields if isinstance(f, EncryptedTextField)]
            if not fields:
                continue
            names = [f.attname for f in fields]
            with transaction.atomic():
                # values() gives the stored ciphertext; rotate() decrypts it with any known key and
                # encrypts with the newest. .update() writes it directly, without signals or audit noise.
                for row in model._default_manager.select_for_update().values("pk", *names):
                    updates = {}
                    for n in names:
                        if not row[n]:
                            continue
                        try:
                            updates[n] = secrets.rotate(row[n])
                        except InvalidToken:
                            unreadable += 1
                            self.stderr.write(f"{model._meta.label} {row['pk']}: {n} opens with no key; left as is.")
                    if updates:
                        model._default_manager.filter(pk=row["pk"]).update(**updates)
                        total += 1
        self.stdout.write(self.style.SUCCESS(f"Re-encrypted {total} row(s) with the newest key."))
        if unreadable:
            self.stderr.write(
                f"{unreadable} secret(s) could not be decrypted with any key in PORTAL_ENCRYPTION_KEYS: keep the "
                "old keys until they are entered again (the portal flags those rows)."
            )
