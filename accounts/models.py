"""People: users and their roles, personal API tokens, and the audit log of who changed what."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractUser
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext, gettext_noop, pgettext_lazy
from django.utils.translation import gettext_lazy as _

from portal import audit, i18n
from portal.choices import AuditAction
from portal.models import Limits, ShownOnceQuerySet, ShownOnceSecret, TimeStampedModel

from .choices import Role


class TeamQuerySet(models.QuerySet["Team"]):
    def visible_to(self, user: User) -> TeamQuerySet:
        """Admins see every team; anyone else only their own."""
        if user.is_admin:
            return self.all()
        return self.filter(pk=user.team_id) if user.team_id is not None else self.none()


class Team(TimeStampedModel, Limits):
    """A group of people sharing a model allow-list and limits. Its limits (set by admins only) are
    a ceiling over all its members together, on top of each member's own and each key's; a member
    with role `team_lead` manages the team's developers and their keys within them (`may_manage`)."""

    name = models.CharField(max_length=100, unique=True)
    description = models.CharField(max_length=300, blank=True)
    allowed_models = models.ManyToManyField(
        "channels.Model",
        blank=True,
        related_name="+",
        help_text=_("Models the team's members may use; empty: every enabled model."),
    )

    objects = TeamQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class User(AbstractUser, Limits):
    """A person. `role` decides what they see; the limits apply to all their keys together and are
    also the ceiling for any single key they own. A user belongs to at most one team, whose limits
    and models bound theirs."""

    role = models.CharField(max_length=16, choices=Role, default=Role.DEVELOPER)
    key_defaults = models.JSONField(
        default=dict,
        blank=True,
        help_text='Limits pre-filled on this user\'s new keys, e.g. {"tokens_per_day": 200000}.',
    )
    allowed_models = models.ManyToManyField(
        "channels.Model",
        blank=True,
        related_name="+",
        help_text=_("Models this user may use; empty: every enabled model."),
    )
    team = models.ForeignKey(Team, null=True, blank=True, on_delete=models.SET_NULL, related_name="members")
    admin_ceilings = models.JSONField(
        default=dict,
        blank=True,
        help_text=_("Limits an admin set on this user ({field: value}): a team lead may only lower them."),
    )
    # The language of the portal's pages, e-mails and generated installers for this person; blank:
    # whatever the browser asks for (portal.i18n).
    language = models.CharField(_("language"), max_length=16, blank=True, choices=settings.LANGUAGES)
    # The single sign-on identity (the IdP's `sub`): set at the first OIDC login, how later ones find
    # this user again whatever their username or e-mail became.
    oidc_subject = models.CharField(max_length=255, unique=True, null=True, blank=True, editable=False)

    class Meta(AbstractUser.Meta):
        swappable = "AUTH_USER_MODEL"

    def __str__(self) -> str:
        return self.username

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.is_superuser:
            self.role = Role.ADMIN
        super().save(*args, **kwargs)

    @property
    def is_admin(self) -> bool:
        return self.is_active and (self.role == Role.ADMIN or self.is_superuser)

    @property
    def led_team_id(self) -> int | None:
        """The team this user leads (role team lead, active, in a team), else None."""
        if self.is_active and self.role == Role.TEAM_LEAD and self.team_id is not None:
            return self.team_id
        return None

    @property
    def is_team_lead(self) -> bool:
        return self.led_team_id is not None

    @property
    def is_lead_managed(self) -> bool:
        """A team lead may manage this member of their team: a developer, never an admin or another
        lead, who would otherwise be handed their keys (`lead_managed()` is the same rule)."""
        return self.role == Role.DEVELOPER and not self.is_superuser

    @property
    def managing_team_id(self) -> int | None:
        """The team whose leads manage this user (`is_lead_managed`), else None."""
        return self.team_id if self.is_lead_managed else None


def lead_managed(prefix: str = "") -> models.Q:
    """`User.is_lead_managed` as a filter; `prefix` leads to the user ("owner__")."""
    return models.Q(**{f"{prefix}role": Role.DEVELOPER, f"{prefix}is_superuser": False})


class ApiToken(ShownOnceSecret):
    """A personal token for scripts using the REST API. Shown once; stored as a keyed hash."""

    PREFIX = "gpt-"
    HASH_FIELD = "token_hash"

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    token_hash = models.CharField(max_length=64, unique=True)

    objects = ShownOnceQuerySet.as_manager()

    class Meta:
        ordering = ["-created"]
        constraints = [
            models.UniqueConstraint(
                fields=["user", "name"],
                condition=models.Q(revoked_at__isnull=True),
                name="apitoken_unique_active_name_per_user",
            )
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.masked})"


class AuditLog(models.Model):
    """Who changed what, when. Secrets appear as "changed", never with their value."""

    created = models.DateTimeField(default=timezone.now, db_index=True)
    actor = models.ForeignKey(User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    actor_name = models.CharField(max_length=150, blank=True)
    action = models.CharField(max_length=16, choices=AuditAction)
    object_type = models.CharField(max_length=50, db_index=True)
    object_id = models.CharField(max_length=64, blank=True)
    object_repr = models.CharField(max_length=200, blank=True)
    changes = models.JSONField(default=dict, blank=True)
    message = models.CharField(max_length=300, blank=True)
    message_code = i18n.code_field()
    message_params = i18n.params_field()
    message_text = i18n.TranslatedText("message")
    ip_address = models.GenericIPAddressField(null=True, blank=True)

    class Meta:
        ordering = ["-created", "-id"]

    def __str__(self) -> str:
        return f"{self.actor_name or 'system'} {self.action} {self.object_type} {self.object_repr}"

    @property
    def object_type_name(self) -> str:
        """The object type (a model name) as its model's verbose name in the reader's language."""
        return object_type_names().get(self.object_type, self.object_type)

    @property
    def change_rows(self) -> list[tuple[str, str, Any]]:
        """`changes` for the page: (field, verb, value). A field's change has no verb; a many-to-many
        change (`{"models": {"added": [...]}}`, stored in English) shows its related model's name and
        its verb in the reader's language."""
        rows: list[tuple[str, str, Any]] = []
        for name, change in self.changes.items():
            if isinstance(change, dict) and len(change) == 1 and next(iter(change)) in M2M_VERBS:
                verb, names = next(iter(change.items()))
                rows.append((gettext(name), str(M2M_VERBS[verb]), i18n.listing(names)))
            else:
                rows.append((name, "", change))
        return rows


# The verbs of a many-to-many change as `portal.audit` stores them (in English), and as they are shown.
M2M_VERBS = {
    audit.M2M_VERBS["post_add"]: pgettext_lazy("audit log change", "added"),
    audit.M2M_VERBS["post_remove"]: pgettext_lazy("audit log change", "removed"),
    audit.M2M_VERBS["post_clear"]: pgettext_lazy("audit log change", "cleared"),
}

# The audit log's object types are model names (`aliastarget`): the page shows each as its model's
# verbose name. Most models keep the one Django derives from the class, which no catalog holds, so
# those are marked here (and the related models' plural names a many-to-many change is stored
# under); tests/portal/test_i18n.py checks every audited model's is.
DERIVED_VERBOSE_NAMES = [
    gettext_noop("alias target"),
    gettext_noop("api token"),
    gettext_noop("budget"),
    gettext_noop("channel"),
    gettext_noop("deployment"),
    gettext_noop("gpu type cost"),
    gettext_noop("host"),
    gettext_noop("key"),
    gettext_noop("model"),
    gettext_noop("model route"),
    gettext_noop("payload logging"),
    gettext_noop("route price"),
    gettext_noop("team"),
    gettext_noop("model download"),
    gettext_noop("request payload"),
    gettext_noop("download token"),
    gettext_noop("hosts"),
    gettext_noop("models"),
]


def object_type_names() -> dict[str, str]:
    """Each audit object type with its name in the current language."""
    names = {m._meta.model_name: gettext(str(m._meta.verbose_name)) for m in audit.registered()}
    names["login"] = gettext("login")  # accounts/apps.py: a failed login of an unknown username
    return {t: n for t, n in names.items() if t}
