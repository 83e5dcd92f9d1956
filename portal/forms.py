"""Form helpers every app's forms share: the five limit fields and their labels."""

from __future__ import annotations

from django import forms

LIMIT_MAX = 10**12


def limit_form_field(label: str, help_text: str = "Blank: unlimited.") -> forms.IntegerField:
    return forms.IntegerField(
        label=label,
        required=False,
        min_value=1,
        max_value=LIMIT_MAX,
        help_text=help_text,
        widget=forms.NumberInput(attrs={"placeholder": "unlimited"}),
    )


LIMIT_LABELS = {
    "requests_per_minute": "Requests / minute",
    "tokens_per_minute": "Tokens / minute",
    "tokens_per_day": "Tokens / day (UTC)",
    "tokens_per_month": "Tokens / month",
    "max_parallel_requests": "Parallel requests",
}


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
