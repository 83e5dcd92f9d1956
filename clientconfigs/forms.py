from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from django import forms
from django.utils.translation import gettext_lazy as _

from keys.models import Key

from .models import KeyMode

if TYPE_CHECKING:
    from accounts.models import User


class ConnectForm(forms.Form):
    """How the files for one client are made: a new key, or a placeholder scoped like an existing key."""

    # Minting is the default: a placeholder makes the installer write files that cannot work yet.
    key_mode = forms.ChoiceField(
        label=_("Key"), choices=KeyMode.choices, initial=KeyMode.MINT, widget=forms.RadioSelect
    )
    machine = forms.CharField(
        label=_("Machine name"),
        max_length=40,
        required=False,
        initial="laptop",
        help_text=_("Names the new key, e.g. cline@laptop."),
    )
    replace = forms.BooleanField(
        required=False,
        initial=True,
        label=_("Replace the key minted before for this client and machine"),
        help_text=_("The old key keeps working for 10 minutes, then stops."),
    )
    key = forms.ModelChoiceField(
        queryset=Key.objects.none(),
        required=False,
        empty_label=_("All models I may use"),
        help_text=_("Placeholder mode: list only the models this key may use."),
    )
    model = forms.ChoiceField(
        choices=(),
        required=False,
        label=_("Default model"),
        # The choices follow the key chosen: a model picked for another key (or all models) is not one.
        error_messages={
            "invalid_choice": _("The chosen key may not use %(value)s: pick one of the models it may use.")
        },
    )

    def __init__(self, *args: Any, user: User, model_names: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        key = cast("forms.ModelChoiceField[Key]", self.fields["key"])
        key.queryset = Key.objects.unexpired().filter(owner=user).order_by("name")  # a key that still works
        cast(forms.ChoiceField, self.fields["model"]).choices = [(n, n) for n in model_names]
