"""Key forms. The rules (ceilings, allowed models, CIDR, expiry) live in `keys.services`."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any, cast

from django import forms
from django.core.exceptions import ValidationError
from django.db.models import Q, QuerySet
from django.utils.html import escape
from django.utils.translation import gettext_lazy as _

from accounts.models import User, lead_managed
from channels.models import Model
from portal import i18n
from portal.forms import LIMIT_LABELS, ModelMultipleChoiceField
from portal.ui import Fieldset, add_validation_errors

from .models import Key
from .services import (
    ADMIN,
    LOCAL_ONLY_LOCK,
    OWN,
    binding_ceilings,
    binding_restrictions,
    check_editable,
    validate_key_settings,
)

if TYPE_CHECKING:
    _UserChoiceField = forms.ModelChoiceField[User]
else:
    _UserChoiceField = forms.ModelChoiceField  # Django's form fields take no [] at runtime

GRACE_CHOICES = [
    ("0", _("No grace: the old key stops now")),
    ("3600", _("1 hour")),
    ("86400", _("24 hours")),
    ("604800", _("7 days")),
]


class OwnerChoiceField(_UserChoiceField):
    queryset: QuerySet[User]  # KeyForm always sets one

    def label_from_instance(self, obj: User) -> str:
        return f"{obj.username} ({obj.get_role_display().lower()})"


class KeyForm(forms.Form):
    """Create a key (or, with `instance`, edit one). Developers can only own their keys; admins
    pick any active user, team leads any active member of their team. The owner of an existing key never changes."""

    owner = OwnerChoiceField(
        label=_("Owner"),
        queryset=User.objects.none(),
        error_messages={"invalid_choice": _("You can only create keys for yourself.")},
    )
    name = forms.CharField(
        label=_("Name"), max_length=100, help_text=_("Where the key is used, e.g. “laptop” or “ci”.")
    )
    allowed_models = ModelMultipleChoiceField(
        label=_("Allowed models"),
        queryset=Model.objects.all(),
        required=False,
        widget=forms.SelectMultiple(attrs={"size": 5}),
        help_text=_("None selected: every model the owner may use."),
        error_messages={
            "invalid_choice": _("Unknown model: %(value)s."),
            "invalid_pk_value": _("Unknown model: %(pk)s."),
        },
    )
    ip_allowlist = forms.CharField(
        label=_("IP allowlist"),
        required=False,
        max_length=5000,
        widget=forms.Textarea(attrs={"rows": 2, "placeholder": "10.0.0.0/8, 192.168.1.20"}),
        help_text=_("CIDR blocks or addresses, comma or newline separated. Blank: any address."),
    )
    local_only = forms.BooleanField(
        label=_("Local channels only"),
        required=False,
        help_text=_(
            "Requests with this key stay on our own servers: never sent to a cloud provider, even on failover."
        ),
    )
    expires_at = forms.DateTimeField(
        label=_("Expires"),
        required=False,
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"),
        input_formats=["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d"],
        help_text=_("UTC. Blank: never expires."),
    )

    def __init__(self, *args: Any, user: User, instance: Key | None = None, **kwargs: Any) -> None:
        self.instance = instance
        if instance is not None:
            kwargs["initial"] = {
                "owner": instance.owner_id,
                "name": instance.name,
                "allowed_models": list(instance.allowed_models.values_list("pk", flat=True)),
                "ip_allowlist": "\n".join(instance.ip_allowlist or []),
                "expires_at": instance.expires_at,
                "local_only": instance.local_only,
                **instance.limits(),
                **kwargs.get("initial", {}),
            }
        super().__init__(*args, **kwargs)
        self.user = user
        owner = cast(OwnerChoiceField, self.fields["owner"])
        if instance is not None:
            owner.queryset = User.objects.filter(pk=instance.owner_id)
            owner.widget = forms.HiddenInput()
            owner.disabled = True  # posted owner values are ignored
        elif user.is_admin:
            owner.queryset = User.objects.filter(is_active=True).order_by("username")
            owner.error_messages["invalid_choice"] = _("Choose an active user.")
        elif user.led_team_id is not None:
            members = User.objects.filter(lead_managed() | Q(pk=user.pk), is_active=True, team_id=user.led_team_id)
            owner.queryset = members.order_by("username")
            owner.error_messages["invalid_choice"] = _("Choose an active member of your team.")
        else:
            owner.queryset = User.objects.filter(pk=user.pk)
            owner.widget = forms.HiddenInput()
        owner.initial = owner.initial or user.pk
        if instance is None:
            self.fields["name"].widget.attrs["autofocus"] = True
        for name, label in LIMIT_LABELS.items():
            # No min/max here: keys.services.validate_key_settings owns those rules (and the ceilings).
            self.fields[name] = forms.IntegerField(label=label, required=False)
        self._describe_choices()

    def _describe_choices(self) -> None:
        owner = self._owner_for_display()
        models = Model.objects.usable_by(owner) if owner is not None else Model.objects.enabled()
        self.fields["allowed_models"].widget.choices = [(m.pk, m.name) for m in models]
        defaults = (owner.key_defaults or {}) if owner is not None else {}
        binding = binding_ceilings(self.instance, self.user)
        lock = binding.get(LOCAL_ONLY_LOCK)
        if lock is not None:
            local = self.fields["local_only"]
            local.disabled = True  # a posted value is ignored: the key stays local-only
            local.help_text = (
                _("Set by an admin: this key stays on local channels; only an admin can lift it.")
                if lock[1] == ADMIN
                else _(
                    "Set by a team lead: this key stays on local channels; only a team lead or an admin can lift it."
                )
            )
        for name, locks in binding_restrictions(self.instance, self.user).items():
            field = self.fields[name]
            field.help_text = i18n.sentences(*(_restriction_help(name, bound, who) for bound, who in locks))
            field.widget.attrs["required"] = True  # clearing a restriction allows everything
            if name == "expires_at":
                field.widget.attrs["max"] = f"{min(b for b, _who in locks).astimezone(datetime.UTC):%Y-%m-%dT%H:%M}"
        for name in LIMIT_LABELS:
            field = self.fields[name]
            ceiling = getattr(owner, name, None) if owner is not None else None
            default = defaults.get(name)
            if self.instance is not None:
                default = None  # editing: blank means unlimited, defaults only pre-fill new keys
            field.widget.attrs["placeholder"] = (
                _("default %(value)s") % {"value": f"{default:,}"} if default else str(_("unlimited"))
            )
            bound = binding.get(name)
            if bound is not None:
                locked, who = bound
                text = (
                    _("Set by an admin: at most %(value)s; you can lower it, not raise or clear it.")
                    if who == ADMIN
                    else _("Your own key: at most %(value)s; you can lower it, only an admin can raise or clear it.")
                    if who == OWN
                    else _("Set by a team lead: at most %(value)s; you can lower it, not raise or clear it.")
                )
                help_bits = [text % {"value": f"{locked:,}"}]
                field.widget.attrs["max"] = min(locked, ceiling) if ceiling is not None else locked
                field.widget.attrs["required"] = True
            else:
                help_bits = [
                    _("Blank: the default %(value)s.") % {"value": f"{default:,}"}
                    if default
                    else str(_("Blank: unlimited."))
                ]
            if ceiling is not None and owner is not None:
                help_bits.append(
                    _("%(owner)s's own limit, shared by all their keys: %(value)s.")
                    % {"owner": escape(owner.username), "value": f"{ceiling:,}"}
                )
            team = owner.team if owner is not None else None
            team_ceiling = getattr(team, name, None) if team is not None else None
            if team_ceiling is not None:
                help_bits.append(
                    _("The team %(team)s's limit, shared by all its members: %(value)s.")
                    % {"team": escape(team), "value": f"{team_ceiling:,}"}
                )
            if self.user.is_admin and (owner is None or owner.pk != self.user.pk):
                help_bits.append(str(_("A value you set is a ceiling the owner can only lower.")))
            elif owner is not None and self.user.pk != owner.pk and self.user.led_team_id is not None:
                lead_note = _("A value you set is a ceiling %(owner)s can only lower.")
                help_bits.append(lead_note % {"owner": escape(owner.username)})
            # (help texts are HTML: a name a person chose, or an SSO group's, is escaped in them)
            field.help_text = i18n.sentences(*help_bits)

    def _owner_for_display(self) -> User | None:
        if self.instance is not None:
            return self.instance.owner
        owner = cast(OwnerChoiceField, self.fields["owner"])
        raw = self.data.get("owner") if self.is_bound else self.initial.get("owner", owner.initial)
        try:
            return owner.queryset.filter(pk=int(str(raw))).first()
        except (TypeError, ValueError):
            return None

    fieldsets = (
        Fieldset(("owner", "name", "allowed_models", "ip_allowlist", "expires_at", "local_only")),
        Fieldset(tuple(LIMIT_LABELS), _("Limits")),
    )

    def clean_name(self) -> str:
        name: str = self.cleaned_data["name"].strip()
        if not name:
            raise ValidationError(_("Enter a name."))
        return name

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        assert cleaned is not None  # Form.clean() returns cleaned_data
        owner = cleaned.get("owner")
        if owner is None:
            return cleaned
        if self.instance is not None:
            try:
                check_editable(self.instance)
            except ValidationError as exc:
                add_validation_errors(self, exc)
                return cleaned
        name = cleaned.get("name")
        same_name = Key.objects.not_revoked().filter(owner=owner, name=name)
        if self.instance is not None:
            same_name = same_name.exclude(pk=self.instance.pk)
        if name and same_name.exists():
            self.add_error(
                "name",
                _("%(username)s already has a key named “%(name)s”; pick another name or revoke it.")
                % {"username": owner.username, "name": name},
            )
        limits = {n: cleaned.get(n) for n in LIMIT_LABELS if n not in self.errors}
        expires_at = cleaned.get("expires_at")
        kept_expiry = self._unchanged_expiry(expires_at)
        try:
            settings = validate_key_settings(
                owner,
                editor=self.user,
                key=self.instance,
                limits=limits,
                allowed_models=cleaned.get("allowed_models") if "allowed_models" not in self.errors else None,
                ip_allowlist=cleaned.get("ip_allowlist", ""),
                expires_at=cast(Key, self.instance).expires_at if kept_expiry else expires_at,
                local_only=bool(cleaned.get("local_only")),
            )
        except ValidationError as exc:
            add_validation_errors(self, exc)
            return cleaned
        settings["expires_at"] = cast(Key, self.instance).expires_at if kept_expiry else expires_at
        self.settings = settings
        return cleaned

    def _unchanged_expiry(self, value: datetime.datetime | None) -> bool:
        """Editing an expired key without touching its expiry is fine (the minute-precision field
        cannot round-trip the stored seconds, so compare by minute)."""
        old = self.instance.expires_at if self.instance is not None else None
        if old is None or value is None:
            return False
        return value.replace(second=0, microsecond=0) == old.replace(second=0, microsecond=0)

    def apply(self) -> Key:
        """Save the edited settings onto `instance` (audited by the model signals)."""
        key, s = self.instance, self.settings
        assert key is not None  # only edits call apply()
        key.name = self.cleaned_data["name"]
        for name in LIMIT_LABELS:
            setattr(key, name, s.get(name))
        key.ip_allowlist = s.get("ip_allowlist", [])
        key.expires_at = s.get("expires_at")
        key.local_only = self.cleaned_data["local_only"]
        if "admin_ceilings" in s:
            key.admin_ceilings = s["admin_ceilings"]
        if "lead_ceilings" in s:
            key.lead_ceilings = s["lead_ceilings"]
        key.save()
        key.allowed_models.set(s.get("allowed_models") or [])
        return key

    def issue_kwargs(self) -> dict[str, Any]:
        """Arguments for `keys.services.issue_key`; blank limits are left out so owner defaults apply."""
        s = self.settings
        kwargs = {n: s[n] for n in LIMIT_LABELS if s.get(n) is not None}
        kwargs.update(
            owner=self.cleaned_data["owner"],
            name=self.cleaned_data["name"],
            allowed_models=s.get("allowed_models") or [],
            ip_allowlist=s.get("ip_allowlist", []),
            expires_at=s.get("expires_at"),
            local_only=self.cleaned_data["local_only"],
        )
        for ceilings in ("admin_ceilings", "lead_ceilings"):
            if s.get(ceilings):
                kwargs[ceilings] = s[ceilings]
        return kwargs


def _restriction_help(name: str, bound: Any, who: str) -> str:
    """The help text of a key field an admin (`who`) or a team lead restricted to `bound` (as
    `keys.services.binding_restrictions` gives it), for the owner: who set what, and what is left
    to them. HTML: the model names are escaped."""
    if name == "allowed_models":
        names = i18n.listing(
            escape(n) for n in Model.objects.filter(pk__in=bound).order_by("name").values_list("name", flat=True)
        )
        text = (
            _("Set by an admin: only %(models)s; you can remove models, not add any or allow all.")
            if who == ADMIN
            else _("Set by a team lead: only %(models)s; you can remove models, not add any or allow all.")
        )
        return text % {"models": names}
    if name == "ip_allowlist":
        text = (
            _("Set by an admin: only from %(networks)s; you can narrow them, not widen them.")
            if who == ADMIN
            else _("Set by a team lead: only from %(networks)s; you can narrow them, not widen them.")
        )
        return text % {"networks": escape(i18n.listing(sorted(bound)))}
    text = (
        _("Set by an admin: expires by %(time)s UTC; you can bring it forward, not postpone or remove it.")
        if who == ADMIN
        else _("Set by a team lead: expires by %(time)s UTC; you can bring it forward, not postpone or remove it.")
    )
    return text % {"time": f"{bound.astimezone(datetime.UTC):%Y-%m-%d %H:%M}"}


class RotateForm(forms.Form):
    grace = forms.ChoiceField(
        label=_("Keep the old key working for"),
        choices=GRACE_CHOICES,
        initial="3600",
        widget=forms.RadioSelect,
        help_text=_("Time to roll the new key out before the old one stops."),
    )

    def grace_period(self) -> datetime.timedelta | None:
        seconds = int(self.cleaned_data["grace"])
        return datetime.timedelta(seconds=seconds) if seconds else None
