"""EncryptedTextField: stores Fernet ciphertext, gives plaintext in Python."""

from __future__ import annotations

from django.db import models
from django.db.models.query_utils import DeferredAttribute

from . import secrets

UNDECRYPTABLE_HELP = (
    "cannot be decrypted with PORTAL_ENCRYPTION_KEYS: this process lacks the key it was encrypted "
    "with. Add that key back (after the newest) on every process, or enter the secret again."
)


class Undecryptable(str):
    """A stored secret that no key in PORTAL_ENCRYPTION_KEYS opens. It reads as "" (nothing to
    send, nothing to show) so one such row never breaks a list or a job, while the ciphertext is
    kept: saving the row again writes it back unchanged, and `undecryptable()` flags the row."""

    ciphertext: str

    def __new__(cls, ciphertext: str) -> Undecryptable:
        value = super().__new__(cls, "")
        value.ciphertext = ciphertext
        return value


class _Decrypting(DeferredAttribute):
    """Decrypts on first access, so a row whose secret cannot be decrypted still loads."""

    def __get__(self, instance, cls=None):
        value = super().__get__(instance, cls)
        if instance is None or not isinstance(value, _Stored):
            return value
        try:
            plain: str = secrets.decrypt(value)
        except ValueError:
            plain = Undecryptable(str(value))
        instance.__dict__[self.field.attname] = plain
        return plain

    def __set__(self, instance, value) -> None:
        # A data descriptor, so reads come through __get__ even though the value is in __dict__.
        instance.__dict__[self.field.attname] = value


class _Stored(str):
    """Ciphertext as loaded from the database, not yet decrypted."""


class EncryptedTextField(models.TextField):
    """Plaintext in Python, ciphertext in the database and in serialized dumps (`dumpdata`).

    A value that already carries the ciphertext prefix is stored as it is, so fixtures made by
    `dumpdata` load back without double encryption, and key rotation can write ciphertext directly.
    """

    descriptor_class = _Decrypting

    def from_db_value(self, value, expression, connection):
        if value is None or value == "":
            return value
        return _Stored(value)

    def pre_save(self, model_instance, add):
        value = model_instance.__dict__.get(self.attname)
        return value.ciphertext if isinstance(value, Undecryptable) else value

    def get_prep_value(self, value):
        if isinstance(value, Undecryptable):
            return value.ciphertext
        value = super().get_prep_value(value)
        if value is None or value == "" or value.startswith(secrets.PREFIX):
            return value
        return secrets.encrypt(value)

    def value_to_string(self, obj):
        value = obj.__dict__.get(self.attname)
        return self.get_prep_value(value) or ""


def undecryptable(instance: models.Model) -> list[str]:
    """Names of `instance`'s encrypted fields whose stored secret cannot be decrypted."""
    return [
        f.name
        for f in instance._meta.concrete_fields
        if isinstance(f, EncryptedTextField) and isinstance(getattr(instance, f.attname), Undecryptable)
    ]


def secret_problem(instance: models.Model) -> str:
    """What an admin should know and do about `instance`'s secrets ("" when they are fine)."""
    names = undecryptable(instance)
    if not names:
        return ""
    fields = {f.name: f for f in instance._meta.concrete_fields}
    label = ", ".join(str(fields[n].verbose_name) for n in names)
    return f"The stored {label} {UNDECRYPTABLE_HELP}"
