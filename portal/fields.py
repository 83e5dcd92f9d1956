"""EncryptedTextField: stores Fernet ciphertext, gives plaintext in Python."""

from __future__ import annotations

from django.db import models

from . import secrets


class EncryptedTextField(models.TextField):
    """Plaintext in Python, ciphertext in the database and in serialized dumps (`dumpdata`).

    A value that already carries the ciphertext prefix is stored as it is, so fixtures made by
    `dumpdata` load back without double encryption, and key rotation can write ciphertext directly.
    """

    def from_db_value(self, value, expression, connection):
        if value is None or value == "":
            return value
        return secrets.decrypt(value)

    def get_prep_value(self, value):
        value = super().get_prep_value(value)
        if value is None or value == "" or value.startswith(secrets.PREFIX):
            return value
        return secrets.encrypt(value)

    def value_to_string(self, obj):
        value = self.value_from_object(obj)
        return self.get_prep_value(value) or ""
