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
