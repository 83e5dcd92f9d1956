"""Forms of the health pages: alert targets, the probe schedule and a channel's probe settings."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django import forms
from django.db import models
from django.utils.translation import gettext_lazy as _

from channels.choices import AlertKind
from channels.health.schedule import MAX_INTERVAL, MIN_INTERVAL
from channels.models import AlertTarget, Channel
from portal.forms import FIELD_LABELS

if TYPE_CHECKING:
    _AlertTargetModelForm = forms.ModelForm[AlertTarget]
    _ChannelModelForm = forms.ModelForm[Channel]
else:  # Django's forms take no [] at runtime
    _AlertTargetModelForm = _ChannelModelForm = forms.ModelForm


def _https_by_default(field: models.Field[Any, Any], **kwargs: Any) -> forms.Field | None:
    """A webhook typed without its scheme (`hooks.slack.com/…`) is an https one: Django's form
    field would otherwise make it http:// (its default until 6.0, with a deprecation warning)."""
    if isinstance(field, models.URLField):
        kwargs["assume_scheme"] = "https"
    return field.formfield(**kwargs)


class AlertTargetForm(_AlertTargetModelForm):
    class Meta:
        model = AlertTarget
        labels = FIELD_LABELS
        fields = ["name", "kind", "url", "email", "enabled"]
        formfield_callback = _https_by_default

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        assert data is not None  # ModelForm.clean() returns cleaned_data
        kind = data.get("kind")
        if kind == AlertKind.WEBHOOK:
            if not data.get("url"):
                self.add_error("url", _("A webhook needs a URL."))
            data["email"] = ""
        elif kind == AlertKind.EMAIL:
            if not data.get("email"):
                self.add_error("email", _("Enter the address to notify."))
            data["url"] = ""
        return data


class ProbeScheduleForm(forms.Form):
    interval_seconds = forms.IntegerField(
        min_value=MIN_INTERVAL, max_value=MAX_INTERVAL, label=_("Probe every (seconds)")
    )
    enabled = forms.BooleanField(required=False, label=_("Probing enabled"))


class ProbeSettingsForm(_ChannelModelForm):
    class Meta:
        model = Channel
        fields = ["probe_inference", "probe_max_tokens", "ttft_degraded_ms"]
        labels = {
            "probe_inference": _("Latency probe (a tiny chat completion)"),
            "probe_max_tokens": _("Probe max_tokens"),
            "ttft_degraded_ms": _("Degraded above TTFT (ms)"),
        }
