"""The budgets page's forms."""

from __future__ import annotations

from typing import Any

from django import forms
from django.utils.translation import gettext_lazy as _

from accounts.models import Team, User, lead_managed
from keys.choices import BudgetWindow
from keys.models import Key


def target_choices(editor: User) -> list[tuple[str, str]]:
    """What `editor` may put a budget on: every team, user and key (an admin); a lead's members and
    their keys, never themselves or their own keys. Values are "team:ID", "user:ID", "key:ID"."""
    if editor.is_admin:
        teams = Team.objects.order_by("name")
        users = User.objects.filter(is_active=True).order_by("username")
    else:
        teams = Team.objects.none()
        users = (
            User.objects.filter(lead_managed(), is_active=True, team__pk=editor.led_team_id or 0)
            .exclude(pk=editor.pk)
            .order_by("username")
        )
    keys = Key.objects.unexpired().filter(owner__in=users).select_related("owner").order_by("owner__username", "name")
    return (
        [(f"team:{t.pk}", _("Team %(name)s (all members)") % {"name": t.name}) for t in teams]
        + [(f"user:{u.pk}", _("User %(name)s (all their keys)") % {"name": u.username}) for u in users]
        + [
            (f"key:{k.pk}", _("Key %(name)s of %(owner)s") % {"name": k.shown_name, "owner": k.owner.username})
            for k in keys
        ]
    )


def resolve_target(value: str) -> Any:
    kind, _sep, pk = value.partition(":")
    if kind == "team":
        return Team.objects.get(pk=int(pk))
    if kind == "user":
        return User.objects.get(pk=int(pk))
    return Key.objects.get(pk=int(pk))


class BudgetForm(forms.Form):
    target = forms.ChoiceField(label=_("Applies to"))
    window = forms.ChoiceField(label=_("Window"), choices=BudgetWindow.choices, initial=BudgetWindow.MONTH)
    amount = forms.DecimalField(label=_("Amount"), min_value=0, max_digits=14, decimal_places=4)
    alert_percent = forms.IntegerField(
        label=_("Alert at (%)"),
        min_value=1,
        max_value=100,
        required=False,
        help_text=_("Tell the alert targets and the owner when this share is spent (blank: no alert)."),
    )

    def __init__(self, *args: Any, editor: User, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["target"].choices = target_choices(editor)  # type: ignore[attr-defined]


class TopUpForm(forms.Form):
    budget = forms.IntegerField(widget=forms.HiddenInput)
    amount = forms.DecimalField(label=_("Top-up"), min_value=0, max_digits=14, decimal_places=4)
    until = forms.DateTimeField(label=_("Until (UTC)"), widget=forms.DateTimeInput(attrs={"type": "datetime-local"}))
