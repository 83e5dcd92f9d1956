"""Host form. The private key is write-only: never rendered back, kept when left blank."""

from __future__ import annotations

import datetime as dt
import re
from typing import TYPE_CHECKING, Any

from django import forms
from django.conf import settings
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from portal import i18n
from portal.forms import SecretsAskedAgain, SecretTextarea
from portal.ui import Fieldset

from .models import Host

LABEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:=/-]{0,49}$")
MAX_LABELS = 20


if TYPE_CHECKING:
    _HostModelForm = forms.ModelForm[Host]
else:  # Django's generic forms and views take no [] at runtime
    _HostModelForm = forms.ModelForm


class HostForm(SecretsAskedAgain, _HostModelForm):
    private_key = forms.CharField(
        label=_("SSH private key"),
        required=False,
        max_length=20000,
        strip=False,
        widget=SecretTextarea(
            attrs={
                "rows": 4,
                "autocomplete": "off",
                "spellcheck": "false",
                "placeholder": "-----BEGIN OPENSSH PRIVATE KEY-----",
            }
        ),
    )
    clear_private_key = forms.BooleanField(label=_("Remove the stored private key"), required=False)
    labels = forms.CharField(
        label=_("Labels"),
        required=False,
        max_length=1000,
        help_text=_("Comma-separated, e.g. “h100, rack-2”."),
    )

    fieldsets = (
        Fieldset(("name", "address", "ssh_port", "username")),
        Fieldset(("private_key", "clear_private_key", "labels", "gpu_hour_cost", "notes"), grid=False),
    )

    class Meta:
        model = Host
        fields = ["name", "address", "ssh_port", "username", "private_key", "labels", "gpu_hour_cost", "notes"]
        widgets = {"notes": forms.Textarea(attrs={"rows": 3})}
        labels = {
            "name": _("Name"),
            "address": _("Address"),
            "ssh_port": _("SSH port"),
            "username": _("Username"),
            "gpu_hour_cost": _("Cost per GPU-hour"),
            "notes": _("Notes"),
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["private_key"].initial = ""  # write-only: never sent back to the browser
        self.initial.pop("private_key", None)
        has_key = bool(self.instance.pk and self.instance.private_key)
        if has_key:
            self.fields["private_key"].help_text = _(
                "A key is <strong>set</strong>. Leave blank to keep it; paste a new one to replace it."
            )
        else:
            self.fields["private_key"].help_text = _(
                "Not set. Paste an unencrypted OpenSSH or PEM private key; it is encrypted at rest."
            )
            del self.fields["clear_private_key"]
        self.initial["labels"] = ", ".join(self.instance.labels or []) if self.instance.pk else ""

    def clean_private_key(self) -> str:
        value = self.cleaned_data.get("private_key") or ""
        if not value.strip():
            return ""
        text = value.strip() + "\n"
        import asyncssh  # on use: see hosts.remote.ssh

        try:
            asyncssh.import_private_key(text)
        except asyncssh.KeyEncryptionError:
            raise forms.ValidationError(_("This key is protected by a passphrase; use a key without one.")) from None
        except (asyncssh.KeyImportError, ValueError):
            raise forms.ValidationError(_("This is not a private key we can read (OpenSSH or PEM format).")) from None
        return text

    def clean_labels(self) -> list[str]:
        raw = self.cleaned_data.get("labels") or ""
        labels = [part.strip() for part in raw.replace("\n", ",").split(",") if part.strip()]
        bad = [label for label in labels if not LABEL_RE.match(label)]
        if bad:
            raise forms.ValidationError(
                _("Not a valid label: %(labels)s (letters, digits and . _ : = / -, up to 50).")
                % {"labels": i18n.listing(bad)}
            )
        if len(labels) > MAX_LABELS:
            raise forms.ValidationError(_("At most %(MAX_LABELS)s labels.") % {"MAX_LABELS": MAX_LABELS})
        return list(dict.fromkeys(labels))

    def save(self, commit: bool = True) -> Host:
        host = super().save(commit=False)
        new_key = self.cleaned_data.get("private_key")
        if self.cleaned_data.get("clear_private_key") and not new_key:
            host.private_key = ""
        elif not new_key and self.instance.pk:
            host.private_key = Host.objects.get(pk=self.instance.pk).private_key
        if commit:
            host.save()
        return host


class GPUTypeCostForm(forms.Form):
    """What one GPU of a type costs per hour (blank: no cost, the type's row is removed)."""

    gpu_name = forms.CharField(label=_("GPU type"), max_length=100)
    hour_cost = forms.DecimalField(
        label=_("Cost per GPU-hour"), required=False, min_value=0, max_digits=12, decimal_places=4
    )


class ShowbackQueryForm(forms.Form):
    """The showback's month (`YYYY-MM`, UTC; default this one) and `format=csv`."""

    month = forms.DateField(
        label=_("Month"),
        required=False,
        input_formats=["%Y-%m"],
        error_messages={"invalid": _("Enter a month as YYYY-MM.")},
    )
    format = forms.ChoiceField(label=_("Format"), required=False, choices=[("csv", "CSV")])

    def clean_month(self) -> dt.date:
        this_month = timezone.now().date().replace(day=1)
        month = self.cleaned_data["month"] or this_month
        if month > this_month:
            raise forms.ValidationError(_("That month has not started yet."))
        # Its tokens are read from the daily totals (their retention); `0001-01` was a 500.
        oldest = (timezone.now() - dt.timedelta(days=settings.PORTAL_ROLLUP_RETENTION_DAYS)).date().replace(day=1)
        if month < oldest:
            raise forms.ValidationError(_("GPU-hours go back to %(oldest)s.") % {"oldest": f"{oldest:%Y-%m}"})
        return month
