"""MCP server and grant forms. Secrets are write-only: blank keeps what is stored."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.utils.translation import gettext_lazy as _

from accounts.models import Team
from keys.models import Key
from portal import i18n
from portal.forms import SecretsAskedAgain, SecretTextarea

from .models import McpGrant, McpServer, McpTool
from .services import EDITABLE_FIELDS, SECRET_FIELDS, save_server


def _secret(label: Any) -> forms.CharField:
    return forms.CharField(
        label=label,
        required=False,
        max_length=8000,
        strip=True,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
    )


class McpServerForm(SecretsAskedAgain, forms.ModelForm):
    bearer_token = _secret(_("Bearer token"))
    headers = forms.CharField(
        label=_("Extra headers"),
        required=False,
        max_length=8000,
        widget=SecretTextarea(attrs={"rows": 2, "autocomplete": "off"}),
    )
    oauth_client_secret = _secret(_("OAuth client secret"))
    clear_secrets = forms.BooleanField(label=_("Remove the stored token, headers and client secret"), required=False)

    class Meta:
        model = McpServer
        fields = list(EDITABLE_FIELDS)
        widgets = {"description": forms.Textarea(attrs={"rows": 2})}
        labels = {
            "name": _("Name"),
            "slug": _("Slug"),
            "url": _("URL"),
            "transport": _("Transport"),
            "enabled": _("Enabled"),
            "description": _("Description"),
            "auth": _("Authentication"),
            "oauth_issuer": _("OAuth issuer"),
            "oauth_client_id": _("OAuth client ID"),
            "oauth_scope": _("OAuth scope"),
            "timeout_seconds": _("Timeout (seconds)"),
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in SECRET_FIELDS:
            self.initial.pop(name, None)
            stored = bool(self.instance.pk and getattr(self.instance, name))
            self.fields[name].help_text = (
                _("Stored. Leave blank to keep it; type a new value to replace it.")
                if stored
                else _("Not set. Encrypted at rest, sent only to the server, never shown again.")
            )
        self.fields["headers"].help_text = i18n.sentences(
            self.fields["headers"].help_text, _('A JSON object, e.g. {"X-Api-Key": "…"}.')
        )
        if not self.instance.pk:
            del self.fields["clear_secrets"]

    def _post_clean(self) -> None:
        # Model validation runs in save_server, once the kept secrets are back on the instance.
        pass

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        assert cleaned is not None
        server = self.instance
        for name in self._meta.fields or ():
            if name in cleaned and name not in SECRET_FIELDS:
                setattr(server, name, cleaned[name])
        try:
            self.saved = save_server(server, secrets=self.secrets(cleaned), commit=False)
        except ValidationError as exc:
            for field, errors in exc.message_dict.items():
                self.add_error(field if field in self.fields else None, errors)
        return cleaned

    def secrets(self, cleaned: dict[str, Any]) -> dict[str, str | None]:
        if cleaned.get("clear_secrets"):
            return {name: cleaned.get(name) or "" for name in SECRET_FIELDS}
        return {name: cleaned.get(name) or None for name in SECRET_FIELDS}

    def save(self, commit: bool = True) -> McpServer:
        self.saved.save()
        return self.saved


class McpGrantForm(forms.Form):
    """Allow one key, user or team to call one tool of the server, or all of them."""

    tool = forms.ModelChoiceField(
        label=_("Tool"), queryset=McpTool.objects.none(), required=False, empty_label=_("All tools of the server")
    )
    key = forms.ModelChoiceField(label=_("Key"), queryset=Key.objects.none(), required=False)
    user = forms.ModelChoiceField(label=_("User"), queryset=get_user_model().objects.none(), required=False)
    team = forms.ModelChoiceField(label=_("Team"), queryset=Team.objects.none(), required=False)

    def __init__(self, *args: Any, server: McpServer, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.server = server
        self.fields["tool"].queryset = server.tools.all()  # type: ignore[attr-defined]
        self.fields["key"].queryset = Key.objects.active().select_related("owner").order_by("owner__username", "name")  # type: ignore[attr-defined]
        self.fields["key"].label_from_instance = lambda k: f"{k.owner.username} · {k.name} ({k.masked})"  # type: ignore[attr-defined]
        self.fields["user"].queryset = get_user_model().objects.filter(is_active=True).order_by("username")  # type: ignore[attr-defined]
        self.fields["team"].queryset = Team.objects.order_by("name")  # type: ignore[attr-defined]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        assert cleaned is not None
        holders = [h for h in ("key", "user", "team") if cleaned.get(h)]
        if len(holders) != 1:
            raise ValidationError(_("Choose exactly one key, user or team."))
        if McpGrant.objects.filter(
            server=self.server, tool=cleaned.get("tool"), **{holders[0]: cleaned[holders[0]]}
        ).exists():
            raise ValidationError(_("This grant exists already."))
        return cleaned
