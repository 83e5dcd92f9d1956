"""The query of the usage reports (the pages and `/api/usage/summary/`): which days, grouped how, and
as what. One form for both, so a value the API refuses is refused on the page too, never read as
the default and answered with figures the reader takes for the ones asked for."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from django import forms
from django.utils.translation import gettext_lazy as _

from portal import i18n
from portal.filters import RANGE_MESSAGE

from .retention import days_pruned, rollup_cutoff
from .services import today

MAX_DAYS = 366
DEFAULT_DAYS = 30
DATE_FORMAT = "%Y-%m-%d"
ENTER_DATE = _("Enter a date as YYYY-MM-DD (UTC).")


# One sentence for a word, 0 or 367: Django's own ("Ensure this value is greater than or equal to 1")
# names neither the unit nor the other bound.
DAYS_WANTED = _("Enter a whole number of days from 1 to 366.")


class UsageQueryForm(forms.Form):
    """The `days` days (default 30) up to `until` (default today, UTC), or the days from `since` to
    `until`, inclusive; `group_by` one of `groups`; `format=csv` for a download."""

    days = forms.IntegerField(
        label=_("Period"),
        required=False,
        min_value=1,
        max_value=MAX_DAYS,
        error_messages=dict.fromkeys(("invalid", "min_value", "max_value"), DAYS_WANTED),
    )
    since = forms.DateField(
        label=_("From"), required=False, input_formats=[DATE_FORMAT], error_messages={"invalid": ENTER_DATE}
    )
    until = forms.DateField(
        label=_("Until"), required=False, input_formats=[DATE_FORMAT], error_messages={"invalid": ENTER_DATE}
    )
    group_by = forms.ChoiceField(label=_("Group by"), required=False)
    format = forms.ChoiceField(label=_("Format"), required=False, choices=[("csv", "CSV")])

    def __init__(
        self, data: Mapping[str, Any] | None, *, groups: Sequence[str] = (), default_group: str = "", csv: bool = False
    ) -> None:
        """Without `groups` (a report of one grouping) or `csv`, those parameters are not read."""
        super().__init__(data)
        self.default_group = default_group
        field = self.fields["group_by"]
        assert isinstance(field, forms.ChoiceField)
        field.choices = [(group, group) for group in groups]
        field.error_messages["invalid_choice"] = _("Choose one of: %(choices)s.") % {"choices": i18n.listing(groups)}
        if not groups:
            del self.fields["group_by"]
        if not csv:
            del self.fields["format"]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        days, since, until = cleaned.get("days"), cleaned.get("since"), cleaned.get("until")
        if days is not None and since is not None:
            self.add_error("days", _("Give either days or since, not both."))
        if since is not None and until is not None and until < since:
            self.add_error("until", RANGE_MESSAGE % {"start": "since", "end": "until"})
        elif "days" not in self.errors and self.period[0] < rollup_cutoff():
            # Totals over days partly pruned would be too low, and look complete.
            self.add_error("since" if since else "until" if until else "days", days_pruned())
        return cleaned

    @property
    def period(self) -> tuple[dt.date, dt.date]:
        """The first and last day asked for (once cleaned)."""
        until = self.cleaned_data.get("until") or today()
        since = self.cleaned_data.get("since")
        if since is None:
            try:
                since = until - dt.timedelta(days=(self.cleaned_data.get("days") or DEFAULT_DAYS) - 1)
            except OverflowError:  # `?until=0001-01-02`: long before anything kept
                since = dt.date.min
        return since, until

    @property
    def group(self) -> str:
        return self.cleaned_data.get("group_by") or self.default_group

    @property
    def csv(self) -> bool:
        return self.cleaned_data.get("format") == "csv"
