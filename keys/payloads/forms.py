"""The admin's form for turning request logs on (or off) for one key, one user or one team."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django import forms
from django.utils.translation import gettext_lazy as _

from keys.models import Key, PayloadLogging
from portal.forms import FIELD_LABELS, DatalistInput, pk_from

KEY_OPTIONS = 1000  # suggestions in the key picker's datalist; any other key can still be typed


def key_label(key: Key) -> str:
    """How the key picker shows a key: masked, then its name and owner (the masked part is what
    `find_key` reads back)."""
    return f"{key.masked} {key.name} ({key.owner.username})"


def key_options() -> list[str]:
    keys = Key.objects.not_revoked().select_related("owner").order_by("-last_used_at", "-created")
    return [key_label(k) for k in keys[:KEY_OPTIONS]]


def find_key(text: str) -> Key | None:
    """The key a picker's text names: an id, `prefix…last4` (as `key_label` writes it), a prefix,
    or a name that is unique among keys not revoked."""
    text = text.strip()
    if not text:
        return None
    token = text.split(" ", 1)[0]
    keys = Key.objects.select_related("owner")
    if token.isdigit():  # an id ("²" too, which is none)
        pk = pk_from(token)
        return keys.filter(pk=pk).first() if pk is not None else None
    if "…" in token:
        prefix, last_four = token.split("…", 1)
        return keys.filter(prefix=prefix, last_four=last_four[:4]).order_by("-created").first()
    by_prefix = list(keys.filter(prefix=token)[:2])
    if len(by_prefix) == 1:
        return by_prefix[0]
    by_name = list(keys.not_revoked().filter(name=text)[:2])
    return by_name[0] if len(by_name) == 1 else None


class KeyPickerField(forms.CharField):
    """A key chosen by typing (with suggestions), not from a select of every key."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("widget", DatalistInput(key_options, attrs={"placeholder": _("type a key's name or gp-…")}))
        super().__init__(**kwargs)

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, Key):
            return key_label(value)
        if isinstance(value, int):
            key = Key.objects.select_related("owner").filter(pk=value).first()
            return key_label(key) if key is not None else value
        return value

    def clean(self, value: Any) -> Key | None:
        text = super().clean(value)
        if not text:
            return None
        key = find_key(text)
        if key is None or key.revoked_at is not None:
            raise forms.ValidationError(
                _("No active key matches “%(text)s”; pick one from the suggestions."), params={"text": text}
            )
        return key


if TYPE_CHECKING:
    _PayloadLoggingModelForm = forms.ModelForm[PayloadLogging]
else:  # Django's forms take no [] at runtime
    _PayloadLoggingModelForm = forms.ModelForm


class PayloadLoggingForm(_PayloadLoggingModelForm):
    class Meta:
        model = PayloadLogging
        labels = FIELD_LABELS
        fields = ["key", "user", "team", "enabled", "retention_days"]
        help_texts = {"enabled": _("Off on a key (or a user) keeps it out of its owner's (or team's) logging.")}

    key = KeyPickerField(label=_("Key"), required=False)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if sum(data.get(f) is not None for f in ("key", "user", "team")) != 1:
            self.add_error("key", _("Choose one key, one user or one team."))
        return data

    def validate_unique(self) -> None:
        """One row per key, user or team: saving for a target that has one changes that row (the view
        passes it as the instance)."""
