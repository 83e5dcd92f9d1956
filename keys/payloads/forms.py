"""The admin's form for turning request logs on (or off) for one key, one user or one team."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django import forms
from django.utils.translation import gettext_lazy as _

from keys.models import Key, PayloadLogging
from portal.forms import FIELD_LABELS

if TYPE_CHECKING:
    _PayloadLoggingModelForm = forms.ModelForm[PayloadLogging]
else:  # Django's forms take no [] at runtime
    _PayloadLoggingModelForm = forms.ModelForm


class PayloadLoggingForm(_PayloadLoggingModelForm):
    class Meta:
        model = PayloadLogging
        labels = FIELD_LABELS
        fields = ["key", "user", "team", "enabled", "retention_days"]
        help_texts = {"enabled": "Off on a key (or a user) keeps it out of its owner's (or team's) logging."}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["key"].queryset = Key.objects.not_revoked().select_related("owner")  # type: ignore[attr-defined]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if sum(data.get(f) is not None for f in ("key", "user", "team")) != 1:
            self.add_error("key", _("Choose one key, one user or one team."))
        return data

    def validate_unique(self) -> None:
        """One row per key, user or team: saving for a target that has one changes that row (the view
        passes it as the instance)."""
