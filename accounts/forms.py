"""Forms for users, personal API tokens and the account page."""

from __future__ import annotations

from django import forms
from django.contrib.auth import get_user_model
from django.core.validators import MaxValueValidator, MinValueValidator

from channels.models import Model
from portal.forms import LIMIT_LABELS, limit_form_field
from portal.models import Limits

from .choices import Role

User = get_user_model()


class UserCreateForm(forms.ModelForm):
    """Username, email and role; the password is generated and shown once."""

    class Meta:
        model = User
        fields = ["username", "email", "role", "first_name", "last_name"]


class UserEditForm(forms.ModelForm):
    """Role, limits (the ceiling for every key the user owns), key defaults and allowed models."""

    allowed_models = forms.ModelMultipleChoiceField(
        queryset=Model.objects.all(),
        required=False,
        widget=forms.SelectMultiple(attrs={"size": 6}),
        help_text="Models this user may use. None selected: every enabled model.",
    )

    class Meta:
        model = User
        fields = ["email", "first_name", "last_name", "role", *Limits.LIMIT_FIELDS, "allowed_models"]

    def __init__(self, *args, acting_user=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.acting_user = acting_user
        for name in Limits.LIMIT_FIELDS:
            field = self.fields[name]
            field.label = LIMIT_LABELS[name]
            field.help_text = "Ceiling for all this user's keys together. Blank: unlimited."
            field.widget.attrs["placeholder"] = "unlimited"
            self.fields[f"default_{name}"] = limit_form_field(
                LIMIT_LABELS[name], "Pre-filled on this user's new keys. Blank: no default."
            )
            self.fields[f"default_{name}"].initial = (self.instance.key_defaults or {}).get(name)

    @property
    def limit_fields(self):
        return [self[name] for name in Limits.LIMIT_FIELDS]

    @property
    def default_fields(self):
        return [self[f"default_{name}"] for name in Limits.LIMIT_FIELDS]

    @property
    def profile_fields(self):
        return [self[name] for name in ("email", "first_name", "last_name", "role", "allowed_models")]

    def clean_role(self):
        role = self.cleaned_data["role"]
        if self.acting_user is not None and self.instance.pk == self.acting_user.pk and role != Role.ADMIN:
            raise forms.ValidationError("You cannot remove your own admin role; ask another admin.")
        if self.instance.is_superuser and role != Role.ADMIN:
            raise forms.ValidationError("This account is a superuser and always an admin.")
        return role

    def clean(self):
        cleaned = super().clean()
        for name in Limits.LIMIT_FIELDS:
            default, ceiling = cleaned.get(f"default_{name}"), cleaned.get(name)
            if default is not None and ceiling is not None and default > ceiling:
                self.add_error(f"default_{name}", f"Cannot exceed this user's limit of {ceiling:,}.")
        return cleaned

    def save(self, commit: bool = True):
        user = super().save(commit=False)
        user.key_defaults = {
            name: self.cleaned_data[f"default_{name}"]
            for name in Limits.LIMIT_FIELDS
            if self.cleaned_data.get(f"default_{name}") is not None
        }
        if commit:
            user.save()
            self.save_m2m()
        return user


class ApiTokenForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="What the token is for, e.g. “deploy script”.")
    expires_in_days = forms.IntegerField(
        label="Expires after (days)",
        required=False,
        validators=[MinValueValidator(1), MaxValueValidator(3650)],
        help_text="Blank: never expires.",
    )

    def __init__(self, *args, user=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.user = user

    def clean_name(self):
        name = self.cleaned_data["name"].strip()
        if not name:
            raise forms.ValidationError("Enter a name.")
        if self.user is not None and self.user.api_tokens.not_revoked().filter(name=name).exists():
            raise forms.ValidationError("You already have an active token with this name.")
        return name
