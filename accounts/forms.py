"""Forms for users, teams and their members' limits, personal API tokens and the account page."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib.auth import forms as auth_forms
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.utils.translation import gettext_lazy as _

from channels.models import Model
from portal import i18n
from portal.forms import FIELD_LABELS, LIMIT_LABELS, ModelMultipleChoiceField, limit_form_field
from portal.models import Limits
from portal.ui import Fieldset, add_validation_errors

from . import services
from .choices import Role
from .models import Team, User

if TYPE_CHECKING:
    _UserModelForm = forms.ModelForm[User]
    _TeamModelForm = forms.ModelForm[Team]
else:  # Django's generic forms and views take no [] at runtime
    _UserModelForm = forms.ModelForm
    _TeamModelForm = forms.ModelForm


class UserCreateForm(_UserModelForm):
    """Username, email and role; the password is generated and shown once."""

    class Meta:
        model = User
        labels = FIELD_LABELS
        fields = ["username", "email", "role", "first_name", "last_name"]


class UserEditForm(_UserModelForm):
    """Role, limits (the ceiling for every key the user owns), key defaults and allowed models."""

    allowed_models = ModelMultipleChoiceField(
        label=_("Allowed models"),
        queryset=Model.objects.all(),
        required=False,
        widget=forms.SelectMultiple(attrs={"size": 6}),
        help_text=_("Models this user may use. None selected: every enabled model."),
    )

    class Meta:
        model = User
        labels = FIELD_LABELS
        fields = ["email", "first_name", "last_name", "role", "team", *Limits.LIMIT_FIELDS, "allowed_models"]

    fieldsets = (
        Fieldset(("email", "first_name", "last_name", "role", "team", "allowed_models"), _("Profile and access")),
        Fieldset(Limits.LIMIT_FIELDS, _("Limits (ceiling for every key)")),
        Fieldset([f"default_{name}" for name in Limits.LIMIT_FIELDS], _("Defaults for new keys")),
    )

    def __init__(self, *args: Any, acting_user: User | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.acting_user = acting_user
        self.fields["team"].help_text = _("Its limits cap this user's; a team lead manages the team's members.")
        for name in Limits.LIMIT_FIELDS:
            field = self.fields[name]
            field.label = LIMIT_LABELS[name]
            field.help_text = _("Ceiling for all this user's keys together. Blank: unlimited.")
            field.widget.attrs["placeholder"] = _("unlimited")
            self.fields[f"default_{name}"] = limit_form_field(
                LIMIT_LABELS[name], _("Pre-filled on this user's new keys. Blank: no default.")
            )
            self.fields[f"default_{name}"].initial = (self.instance.key_defaults or {}).get(name)

    def clean_role(self) -> str:
        role: str = self.cleaned_data["role"]
        try:
            services.check_role_change(self.instance, role, actor=self.acting_user)
        except ValidationError as exc:
            raise forms.ValidationError(exc.message_dict["role"]) from None
        if self.instance.is_superuser and role != Role.ADMIN:
            raise forms.ValidationError(_("This account is a superuser and always an admin."))
        return role

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        assert cleaned is not None  # ModelForm.clean() returns cleaned_data
        for name in Limits.LIMIT_FIELDS:
            default, ceiling = cleaned.get(f"default_{name}"), cleaned.get(name)
            if default is not None and ceiling is not None and default > ceiling:
                self.add_error(
                    f"default_{name}", _("Cannot exceed this user's limit of %(limit)s.") % {"limit": f"{ceiling:,}"}
                )
        if self.acting_user is not None:
            limits = {n: cleaned.get(n) for n in Limits.LIMIT_FIELDS if n not in self.errors}
            try:
                self.member_limits = services.validate_member_limits(
                    self.instance,
                    editor=self.acting_user,
                    limits=limits,
                    team=cleaned.get("team"),
                    changed=self.changed_data,
                )
            except ValidationError as exc:
                add_validation_errors(self, exc)
        return cleaned

    def save(self, commit: bool = True) -> User:
        user = super().save(commit=False)
        user.key_defaults = {
            name: self.cleaned_data[f"default_{name}"]
            for name in Limits.LIMIT_FIELDS
            if self.cleaned_data.get(f"default_{name}") is not None
        }
        if "admin_ceilings" in getattr(self, "member_limits", {}):
            user.admin_ceilings = self.member_limits["admin_ceilings"]
        if commit:
            user.save()
            self.save_m2m()
        return user


class ApiTokenForm(forms.Form):
    name = forms.CharField(label=_("Name"), max_length=100, help_text=_("What the token is for, e.g. “deploy script”."))
    expires_in_days = forms.IntegerField(
        label=_("Expires after (days)"),
        required=False,
        validators=[MinValueValidator(1), MaxValueValidator(3650)],
        help_text=_("Blank: never expires."),
    )

    def __init__(self, *args: Any, user: User | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.user = user

    def clean_name(self) -> str:
        name: str = self.cleaned_data["name"].strip()
        if not name:
            raise forms.ValidationError(_("Enter a name."))
        if self.user is not None and self.user.api_tokens.not_revoked().filter(name=name).exists():
            raise forms.ValidationError(_("You already have an active token with this name."))
        return name


class TeamForm(_TeamModelForm):
    """A team's name, the models its members may use and its limits (admins only): a ceiling over
    all its members together."""

    allowed_models = ModelMultipleChoiceField(
        label=_("Allowed models"),
        queryset=Model.objects.all(),
        required=False,
        widget=forms.SelectMultiple(attrs={"size": 6}),
        help_text=_("Models the team's members may use. None selected: every enabled model."),
    )

    class Meta:
        model = Team
        labels = FIELD_LABELS
        fields = ["name", "description", *Limits.LIMIT_FIELDS, "allowed_models"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in Limits.LIMIT_FIELDS:
            field = self.fields[name]
            field.label = LIMIT_LABELS[name]
            field.help_text = _("For all members together; members' and keys' own limits can only be lower.")
            field.widget.attrs["placeholder"] = _("unlimited")

    fieldsets = (
        Fieldset(("name", "description", "allowed_models"), _("Team")),
        Fieldset(Limits.LIMIT_FIELDS, _("Limits (all members together)")),
    )


class MemberLimitsForm(forms.Form):
    """A member's own limits as an admin or their team lead sets them (`validate_member_limits`)."""

    def __init__(self, *args: Any, member: User, editor: User, **kwargs: Any) -> None:
        kwargs.setdefault("initial", member.limits())
        super().__init__(*args, **kwargs)
        self.member, self.editor = member, editor
        team = member.team
        locked = {} if editor.is_admin else (member.admin_ceilings or {})
        own = services.own_limit_bounds(editor, member, member)
        for name, label in LIMIT_LABELS.items():
            field = limit_form_field(label)
            bits = []
            if locked.get(name) is not None:
                bits.append(
                    _("Set by an admin: at most %(limit)s; you can lower it, not raise or clear it.")
                    % {"limit": f"{locked[name]:,}"}
                )
                field.widget.attrs["required"] = True
            elif own.get(name) is not None:
                bits.append(
                    _("Your own limit: at most %(limit)s; you can lower it, only an admin can raise or clear it.")
                    % {"limit": f"{own[name]:,}"}
                )
                field.widget.attrs["required"] = True
            team_limit = getattr(team, name, None) if team is not None else None
            if team_limit is not None:
                bits.append(_("The team's limit (all members together): %(limit)s.") % {"limit": f"{team_limit:,}"})
            field.help_text = i18n.sentences(*bits) or _("Blank: unlimited.")
            self.fields[name] = field

    fieldsets = (Fieldset(tuple(LIMIT_LABELS), _("Limits")),)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        assert cleaned is not None  # Form.clean() returns cleaned_data
        limits = {n: cleaned.get(n) for n in LIMIT_LABELS if n not in self.errors}
        try:
            self.limits = services.validate_member_limits(
                self.member, editor=self.editor, limits=limits, changed=self.changed_data
            )
        except ValidationError as exc:
            add_validation_errors(self, exc)
        return cleaned

    def save(self) -> None:
        services.save_member_limits(self.member, self.limits)


class PasswordChangeForm(auth_forms.PasswordChangeForm):
    """Django's form, plus the choice to end everything the old password may have let someone keep."""

    revoke_access = forms.BooleanField(
        required=False,
        initial=True,
        label=_("Also revoke my API tokens and log out my other sessions"),
        help_text=_("Recommended if someone else may have known your old password."),
    )
