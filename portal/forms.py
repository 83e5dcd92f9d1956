"""Form helpers every app's forms share: the five limit fields and their labels."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django import forms
from django.core.exceptions import ValidationError
from django.utils.translation import gettext_lazy as _
from django.utils.translation import gettext_noop

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise

LIMIT_MAX = 10**12
PK_MAX = 2**63 - 1  # the largest primary key our tables hold (BigAutoField)


def pk_from(text: str) -> int | None:
    """A primary key from a query string or a form's value, or None. `str.isdigit` alone let in
    what `int` refuses ("²") and values past any key, on which SQLite's driver raises OverflowError
    in a foreign-key or `__in` lookup: both were a 500 for a mistyped or hand-edited address."""
    if not (text.isascii() and text.isdigit()):
        return None
    value = int(text)
    return value if value <= PK_MAX else None


class ModelMultipleChoiceField(forms.ModelMultipleChoiceField):
    """Django's, with an id past any primary key refused as an unknown choice before the query
    (on SQLite its `__in` lookup raised OverflowError: a 500 instead of the field's error)."""

    def _check_values(self, value):  # type: ignore[no-untyped-def]
        if self.to_field_name is None and isinstance(value, (list, tuple)):
            for pk in value:
                if isinstance(pk, str) and pk.isascii() and pk.isdigit() and pk_from(pk) is None:
                    message = self.error_messages["invalid_choice"]
                    raise ValidationError(message, code="invalid_choice", params={"value": pk})
        return super()._check_values(value)


# The suffix Django puts after a form's labels (`BaseForm.label_suffix`, `_(":")`): its own zh-Hans
# catalog keeps the ASCII colon; ours, first in LOCALE_PATHS, gives Chinese labels the full-width one.
gettext_noop(":")


def limit_form_field(label: StrOrPromise, help_text: StrOrPromise | None = None) -> forms.IntegerField:
    return forms.IntegerField(
        label=label,
        required=False,
        min_value=1,
        max_value=LIMIT_MAX,
        help_text=_("Blank: unlimited.") if help_text is None else help_text,
        widget=forms.NumberInput(attrs={"placeholder": _("unlimited")}),
    )


LIMIT_LABELS = {
    "requests_per_minute": _("Requests / minute"),
    "tokens_per_minute": _("Tokens / minute"),
    "tokens_per_day": _("Tokens / day (UTC)"),
    "tokens_per_month": _("Tokens / month"),
    "max_parallel_requests": _("Parallel requests"),
}

# The labels of model fields in every ModelForm (`Meta.labels = FIELD_LABELS`): a model field's
# own verbose name is its attribute name, which a translation cannot reach without a migration.
FIELD_LABELS = {
    **LIMIT_LABELS,
    "name": _("Name"),
    "description": _("Description"),
    "role": _("Role"),
    "team": _("Team"),
    "allowed_models": _("Allowed models"),
    "kind": _("Kind"),
    "url": _("URL"),
    "email": _("E-mail"),
    "enabled": _("Enabled"),
    "display_name": _("Display name"),
    "balance": _("Balancing"),
    "channel": _("Channel"),
    "upstream_model": _("Upstream model"),
    "context_window": _("Context window"),
    "max_output_tokens": _("Max output tokens"),
    "key": _("Key"),
    "user": _("User"),
    "retention_days": _("Retention (days)"),
    "source": _("Source"),
    "repo_id": _("Repository"),
    "revision": _("Revision"),
    "pattern": _("File pattern"),
    "endpoint": _("Endpoint"),
    "token": _("Token"),
    "install_tool": _("Install the download tool"),
    "address": _("Address"),
    "ssh_port": _("SSH port"),
    "username": _("Username"),
    "private_key": _("SSH private key"),
    "labels": _("Labels"),
    "notes": _("Notes"),
    "probe_inference": _("Measure time to first token"),
    "probe_max_tokens": _("Probe max_tokens"),
    "ttft_degraded_ms": _("Degraded above (ms time to first token)"),
    "base_url": _("Base URL"),
    "locality": _("Locality"),
    "api_key": _("API key"),
    "priority": _("Priority"),
    "weight": _("Weight"),
    "speaks_messages": _("Speaks Anthropic Messages"),
    "speaks_responses": _("Speaks OpenAI Responses"),
    "host": _("Host"),
    "model": _("Model"),
    "status": _("Status"),
    "backend": _("Backend"),
    "state": _("State"),
    "owner": _("Owner"),
    "client": _("Client"),
    "surface": _("API"),
    "deployment": _("Deployment"),
    "action": _("Action"),
    "created": _("Created"),
}


class SecretTextarea(forms.Textarea):
    """A textarea for a write-only secret (an SSH key, headers with credentials): like
    `PasswordInput(render_value=False)`, it is always rendered empty, also when the form comes
    back with another field's error, so the secret never travels back to the browser."""

    def format_value(self, value: object) -> None:
        return None


class SecretsAskedAgain:
    """A form mixin (before the form class): the write-only secrets (`SecretTextarea`,
    `PasswordInput(render_value=False)`) of a form that comes back with an error come back empty,
    and each one that was filled in says so, so that nobody saves the object again without the key
    they pasted, believing it kept."""

    def full_clean(self) -> None:
        super().full_clean()  # type: ignore[misc]
        form: forms.BaseForm = self  # type: ignore[assignment]
        if not form.is_bound or not form.errors:
            return
        for name, field in form.fields.items():
            widget = field.widget
            secret = isinstance(widget, SecretTextarea) or (
                isinstance(widget, forms.PasswordInput) and not widget.render_value
            )
            if secret and name not in form.errors and str(form.data.get(form.add_prefix(name)) or "").strip():
                form.add_error(name, _("Enter it again: a secret is never sent back to the browser."))


class DatalistInput(forms.TextInput):
    """A text input with a `<datalist>` of suggestions: searchable as one types, in any browser and
    without JS, instead of a select of hundreds of options. `options` is a callable (evaluated at
    render time, so a form built at import does not query) returning the suggested values."""

    def __init__(self, options, attrs: dict | None = None) -> None:
        super().__init__(attrs={"autocomplete": "off", **(attrs or {})})
        self.options = options

    def get_context(self, name, value, attrs):
        context = super().get_context(name, value, attrs)
        context["widget"]["attrs"]["list"] = f"{context['widget']['attrs'].get('id') or name}-options"
        return context

    def render(self, name, value, attrs=None, renderer=None):
        from django.utils.html import format_html, format_html_join

        html = super().render(name, value, attrs, renderer)
        list_id = f"{(attrs or {}).get('id') or self.attrs.get('id') or name}-options"
        options = format_html_join("", '<option value="{}"></option>', ((o,) for o in self.options()))
        return format_html('{}<datalist id="{}">{}</datalist>', html, list_id, options)
