"""Forms of the health pages: alert targets, the probe schedule and a channel's probe settings."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django import forms

from channels.choices import AlertKind
from channels.health.schedule import MAX_INTERVAL, MIN_INTERVAL
from channels.models import AlertTarget, Channel

if TYPE_CHECKING:
    _AlertTargetModelForm = forms.ModelForm[AlertTarget]
    _ChannelModelForm = forms.ModelForm[Channel]
else:  # Django's forms take no [] at runtime
    _AlertTargetModelForm = _ChannelModelForm = forms.ModelForm


class AlertTargetForm(_AlertTargetModelForm):
    class Meta:
        model = AlertTarget
        fields = ["name", "kind", "url", "email", "enabled"]

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        assert data is not None  # ModelForm.clean() returns cleaned_data
        kind = data.get("kind")
        if kind == AlertKind.WEBHOOK:
            if not data.get("url"):
                self.add_error("url", "A webhook needs a URL.")
            data["email"] = ""
        elif kind == AlertKind.EMAIL:
            if not data.get("email"):
                self.add_error("email", "Enter the address to notify.")
            data["url"] = ""
        return data


class ProbeScheduleForm(forms.Form):
    interval_seconds = forms.IntegerField(min_value=MIN_INTERVAL, max_value=MAX_INTERVAL, label="Probe every (seconds)")
    enabled = forms.BooleanField(required=False, label="Probing enabled")


class ProbeSettingsForm(_ChannelModelForm):
    class Meta:
        model = Channel
        fields = ["probe_inference", "probe_max_tokens", "ttft_degraded_ms"]
        labels = {
            "probe_inference": "Latency probe (a tiny chat completion)",
            "probe_max_tokens": "Probe max_tokens",
            "ttft_degraded_ms": "Degraded above TTFT (ms)",
        }
