"""Channel and model forms. Base URL rules live in `channels.services.clean_base_url`."""

from __future__ import annotations

from typing import Any, cast

from django import forms
from django.core.exceptions import ValidationError
from django.forms import BaseInlineFormSet, inlineformset_factory
from django.urls import reverse
from django.utils.translation import gettext_lazy as _

from portal.forms import FIELD_LABELS, SecretsAskedAgain
from portal.ui import Fieldset

from .choices import BalancePolicy, ChannelKind, Locality, ModelKind, UnpricedPolicy
from .models import MODEL_NAME_VALIDATOR, Channel, Model, ModelRoute
from .services import MAX_ALIAS_TARGETS, clean_base_url, reset_status_after_edit, suggest_locality

FROM_ADDRESS = ("", _("From the base URL (our own network: local; else external)"))
# When the base URL preview asks again: as the admin types, and once when the page loads (an edit
# shows what is stored and why).
PREVIEW_AS_TYPED = "input changed delay:400ms"


class ChannelForm(SecretsAskedAgain, forms.ModelForm):
    base_url = forms.CharField(
        label=_("Base URL"),
        max_length=2000,
        strip=False,  # clean_base_url reports stripped whitespace as a note
        help_text=_(
            "Paste what the provider documents (e.g. https://api.example.com or …/v1/); "
            "we store one canonical form ending in /v1."
        ),
    )
    api_key = forms.CharField(
        label=_("API key"),
        required=False,
        max_length=5000,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
    )
    clear_api_key = forms.BooleanField(label=_("Remove the stored API key"), required=False)

    class Meta:
        model = Channel
        labels = FIELD_LABELS
        fields = [
            "name",
            "kind",
            "base_url",
            "locality",
            "api_key",
            "priority",
            "weight",
            "enabled",
            "speaks_messages",
            "speaks_responses",
            "notes",
        ]
        widgets = {"notes": forms.Textarea(attrs={"rows": 3})}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.base_url_notes: list[str] = []
        self.initial.pop("api_key", None)
        if self.instance.pk and self.instance.api_key:
            self.fields["api_key"].help_text = _(
                "A key is <strong>set</strong>. Leave blank to keep it; type a new one to replace it."
            )
        else:
            self.fields["api_key"].help_text = _(
                "Not set. Sent upstream as the bearer token; encrypted at rest and never shown again."
            )
            del self.fields["clear_api_key"]
        # A new channel's locality follows its address unless the admin says otherwise; an edit
        # that sends none keeps it.
        locality = cast(forms.ChoiceField, self.fields["locality"])
        locality.required = False
        if not self.instance.pk:
            locality.choices = [FROM_ADDRESS, *Locality.choices]
            self.initial["locality"] = ""
        self.fields["base_url"].widget.attrs.update(
            {
                "hx-get": reverse("channel_base_url_preview"),
                "hx-trigger": f"{PREVIEW_AS_TYPED}, load",
                "hx-target": "#base-url-preview",
            }
        )

    def clean_base_url(self) -> str:
        try:
            canonical, notes = clean_base_url(self.cleaned_data["base_url"])
        except ValidationError as exc:
            raise ValidationError(exc.message_dict.get("base_url") or exc.messages) from None
        self.base_url_notes = notes
        return canonical

    def full_clean(self) -> None:
        super().full_clean()
        if self.has_error("base_url"):
            # The field shows its error; the preview loaded with the page would say it a second time.
            self.fields["base_url"].widget.attrs["hx-trigger"] = PREVIEW_AS_TYPED

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        assert cleaned is not None
        if not cleaned.get("locality"):
            if self.instance.pk:
                cleaned["locality"] = Channel.objects.filter(pk=self.instance.pk).values_list("locality", flat=True)[0]
            elif cleaned.get("base_url"):
                cleaned["locality"] = suggest_locality(cleaned["base_url"])
        return cleaned

    def clean_api_key(self) -> str:
        value = (self.cleaned_data.get("api_key") or "").strip()
        if any(c.isspace() for c in value):
            raise ValidationError(_("An API key cannot contain spaces or line breaks."))
        return value

    def save(self, commit: bool = True):
        channel = super().save(commit=False)
        previous = Channel.objects.filter(pk=channel.pk).first() if channel.pk else None
        new_key = self.cleaned_data.get("api_key")
        if self.cleaned_data.get("clear_api_key") and not new_key:
            channel.api_key = ""
        elif not new_key and previous is not None:
            channel.api_key = previous.api_key
        if channel.kind == ChannelKind.ANTHROPIC:
            channel.speaks_messages = True
        if previous is not None:  # a new address or key voids the last health verdict
            reset_status_after_edit(channel, previous_base_url=previous.base_url, previous_api_key=previous.api_key)
        if commit:
            channel.save()
        return channel


class ModelForm(forms.ModelForm):
    remove_priced_routes = forms.BooleanField(
        label=_("Also remove routes that have prices, with their price history"),
        required=False,
        help_text=_("Without it, removing a priced route is refused and nothing is saved."),
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["balance"].required = False  # a post without it keeps what the model has
        self.fields["kind"].required = False
        # Only routes with prices need the confirmation; the page offers it when the model has some.
        priced = ModelRoute.objects.filter(model_id=self.instance.pk, prices__isnull=False)
        self.priced_channels = sorted(set(priced.values_list("channel__name", flat=True))) if self.instance.pk else []

    class Meta:
        model = Model
        fields = ["name", "display_name", "description", "enabled", "kind", "balance"]
        labels = FIELD_LABELS
        widgets = {"description": forms.Textarea(attrs={"rows": 2})}
        help_texts = {"name": _("The public name developers put in requests, e.g. qwen3-32b.")}

    def clean_balance(self) -> str:
        return self.cleaned_data.get("balance") or self.instance.balance or BalancePolicy.WEIGHTED

    def clean_kind(self) -> str:
        return self.cleaned_data.get("kind") or self.instance.kind or ModelKind.CHAT


class RouteForm(forms.ModelForm):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The route table's columns are headers, not <label>s: each input names itself.
        for name, field in self.fields.items():
            field.widget.attrs.setdefault("aria-label", str(field.label or name))

    def validate_unique(self) -> None:
        """Routes are saved by channel (`replace_routes`): a row naming a channel another row of
        the page held before (removed and added again, two rows swapped) updates that route. Two
        rows naming one channel are the formset's error; a route the page does not show, its
        `clean`'s."""

    class Meta:
        model = ModelRoute
        fields = ["channel", "upstream_model", "context_window", "max_output_tokens", "enabled"]
        labels = {**FIELD_LABELS, "upstream_model": _("Upstream model id")}
        widgets = {
            "upstream_model": forms.TextInput(attrs={"placeholder": _("same as public name")}),
            "context_window": forms.NumberInput(attrs={"placeholder": _("unknown")}),
            "max_output_tokens": forms.NumberInput(attrs={"placeholder": _("unknown")}),
        }


class BaseRouteFormSet(BaseInlineFormSet):
    def add_fields(self, form: forms.ModelForm, index: int | None) -> None:
        super().add_fields(form, index)
        if "DELETE" in form.fields:  # added by the formset, after RouteForm labelled its own inputs
            form.fields["DELETE"].widget.attrs["aria-label"] = _("Remove this route")

    def clean(self) -> None:
        """A row naming a channel the model already has a route to, that no row of this form
        holds (the form sent twice, or another admin added it meanwhile): a field error, where
        saving would overwrite a route the admin did not see."""
        super().clean()
        if self.instance.pk is None:
            return
        shown = {form.instance.pk for form in self.initial_forms}
        kept = ModelRoute.objects.filter(model=self.instance).exclude(pk__in=shown)
        taken = set(kept.values_list("channel_id", flat=True))
        for form in self.forms:
            channel = form.cleaned_data.get("channel") if form.has_changed() else None
            if channel is not None and not form.cleaned_data.get("DELETE") and channel.pk in taken:
                form.add_error("channel", _("This model already has a route to this channel; reload the page."))

    @property
    def routes(self) -> list[dict[str, Any]]:
        """What the valid formset asks for, one dict per route (`replace_routes`' input): the
        rows not removed, new rows only when filled in."""
        return [
            form.cleaned_data
            for form in self.forms
            if form.cleaned_data.get("channel") is not None
            and not form.cleaned_data.get("DELETE")
            and (form in self.initial_forms or form.has_changed())
        ]


RouteFormSet = inlineformset_factory(
    Model, ModelRoute, form=RouteForm, formset=BaseRouteFormSet, extra=1, can_delete=True, max_num=50, validate_max=True
)


class AddServedModelForm(forms.Form):
    """One row of "Add models from this channel": a model the upstream lists, one click to add."""

    upstream_model = forms.CharField(label=_("Upstream model id"), max_length=256, widget=forms.HiddenInput)
    name = forms.CharField(
        label=_("Public name"),
        max_length=128,
        validators=[MODEL_NAME_VALIDATOR],
        help_text=_("What developers request."),
    )
    context_window = forms.IntegerField(
        label=_("Context window"),
        required=False,
        min_value=256,
        max_value=10_000_000,
        help_text=_("Tokens; blank: unknown."),
    )


FIRST_TARGET, NEXT_TARGET = _("First (target %(n)d)"), _("Then (target %(n)d)")


class AliasForm(forms.Form):
    """An alias and its targets in order (one select per slot; empty slots are ignored). The
    rules are `channels.services.save_alias`'s; the view maps its errors onto these fields."""

    name = forms.CharField(
        label=_("Public name"),
        max_length=128,
        validators=[MODEL_NAME_VALIDATOR],
        help_text=_("What developers request, e.g. coder."),
    )
    display_name = forms.CharField(label=_("Display name"), max_length=200, required=False)
    description = forms.CharField(
        label=_("Description"), max_length=2000, required=False, widget=forms.Textarea(attrs={"rows": 2})
    )
    enabled = forms.BooleanField(label=_("Enabled"), required=False, initial=True)
    local_only = forms.BooleanField(
        label=_("Local channels only"),
        required=False,
        help_text=_("Never send requests for this alias to an external channel, even when no local one can hold them."),
    )

    def __init__(self, *args: Any, instance: Model | None = None, **kwargs: Any) -> None:
        self.instance = instance
        current = instance.target_names if instance is not None else []
        if instance is not None:
            kwargs["initial"] = {
                "name": instance.name,
                "display_name": instance.display_name,
                "description": instance.description,
                "enabled": instance.enabled,
                "local_only": instance.local_only,
                **{f"target_{i}": name for i, name in enumerate(current)},
            }
        super().__init__(*args, **kwargs)
        posted = sum(1 for k in self.data if k.startswith("target_")) if self.is_bound else 0
        slots = min(MAX_ALIAS_TARGETS, max(3, len(current) + 1, posted))
        choices = [("", "—"), *((m.name, m.name) for m in Model.objects.served().order_by("name"))]
        for i in range(slots):
            self.fields[f"target_{i}"] = forms.ChoiceField(
                label=(FIRST_TARGET if i == 0 else NEXT_TARGET) % {"n": i + 1},
                choices=choices,
                required=False,
                help_text=_("Tried first while its window holds the request.") if i == 0 else "",
            )

    service_error_fields = {"targets": "target_0"}

    @property
    def fieldsets(self) -> tuple[Fieldset, ...]:
        return (
            Fieldset(("name", "display_name")),
            Fieldset(("description",), grid=False),
            Fieldset(
                [name for name in self.fields if name.startswith("target_")],
                _("Targets, tried in this order"),
                _(
                    "Each request goes to the first target whose context window holds it (prompt + requested "
                    "output) and that answers; a failing one falls through to the next."
                ),
            ),
            Fieldset(("enabled", "local_only"), _("Behaviour"), grid=False),
        )

    @property
    def targets(self) -> list[str]:
        return [v for name, v in self.cleaned_data.items() if name.startswith("target_") and v]


class RoutePriceForm(forms.Form):
    """A new price for one route from a moment on (now by default); the old one stays for the past."""

    route = forms.ModelChoiceField(
        queryset=ModelRoute.objects.select_related("model", "channel").order_by("model__name", "channel__name"),
        label=_("Route"),
    )
    input = forms.DecimalField(label=_("Input"), min_value=0, max_digits=12, decimal_places=3)
    cached_input = forms.DecimalField(
        label=_("Cached input"),
        min_value=0,
        max_digits=12,
        decimal_places=3,
        required=False,
        help_text=_("Blank: the input price."),
    )
    cache_write = forms.DecimalField(
        label=_("Cache write"),
        min_value=0,
        max_digits=12,
        decimal_places=3,
        required=False,
        help_text=_("Blank: the input price."),
    )
    output = forms.DecimalField(label=_("Output"), min_value=0, max_digits=12, decimal_places=3)
    effective_from = forms.DateTimeField(
        label=_("Effective from (UTC)"),
        required=False,
        help_text=_("Blank: now."),
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
    )


class UnpricedPolicyForm(forms.Form):
    """What a key with a budget meets on one route while it has no price."""

    route = forms.ModelChoiceField(queryset=ModelRoute.objects.all(), widget=forms.HiddenInput)
    unpriced = forms.ChoiceField(label=_("While unpriced"), choices=UnpricedPolicy.choices, required=False)
