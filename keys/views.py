"""Key pages: my keys, all keys (admin), create (plaintext once), revoke, rotate."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib.auth.mixins import LoginRequiredMixin
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.http import HttpResponse
from django.shortcuts import get_object_or_404
from django.utils.translation import gettext_lazy as _
from django.views.generic import DetailView

from portal.forms import pk_from
from portal.permissions import AdminOrTeamLeadRequiredMixin
from portal.ui import ConfirmView, FilteredListView, ObjectFormView, done, pop_secret, remember_secret

from .filters import KeyFilterSet
from .forms import KeyForm, RotateForm
from .models import Key, KeyQuerySet
from .services import check_rotatable, effective_limits, issue_key, revoke_key, rotate_key

if TYPE_CHECKING:
    from accounts.models import User
    from portal.permissions import AuthenticatedHttpRequest

    _KeyDetailView = DetailView[Key]
else:
    _KeyDetailView = DetailView  # Django's generic views take no [] at runtime


def visible_keys(user: User) -> KeyQuerySet:
    return Key.objects.select_related("owner").prefetch_related("allowed_models").visible_to(user)


KEY_SORT_FIELDS = {
    "name": "name",
    "owner": "owner__username",
    "created": "created",
    "last_used": "last_used_at",
    "expires": "expires_at",
}


class MyKeyListView(LoginRequiredMixin, FilteredListView):
    request: AuthenticatedHttpRequest
    model = Key
    filterset_class = KeyFilterSet
    template_name = "keys/key_list.html"
    sort_fields = KEY_SORT_FIELDS

    def get_base_queryset(self) -> KeyQuerySet:
        return visible_keys(self.request.user).filter(owner=self.request.user).order_by("revoked_at", "-created")

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        return super().get_context_data(filter_fields=["state"], title=_("My keys"), show_owner=False, **kwargs)


class AllKeyListView(AdminOrTeamLeadRequiredMixin, FilteredListView):
    """Everyone's keys for admins; the team's members' keys for a team lead."""

    request: AuthenticatedHttpRequest
    model = Key
    filterset_class = KeyFilterSet
    template_name = "keys/key_list.html"
    sort_fields = KEY_SORT_FIELDS

    def get_base_queryset(self) -> KeyQuerySet:
        return visible_keys(self.request.user).order_by("revoked_at", "-created")

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        title = _("All keys") if self.request.user.is_admin else _("Team keys")
        return super().get_context_data(filter_fields=["owner", "state"], title=title, show_owner=True, **kwargs)


class KeyEditView(LoginRequiredMixin, ObjectFormView):
    """Create a key (shown once on its page) or change a key's name, models, IP allowlist, expiry
    and limits, under the same rules (`keys.services.validate_key_settings`)."""

    request: AuthenticatedHttpRequest
    form_class = KeyForm
    success, cancel = "key_detail", "key_list"
    title = (_("New key"), _("Edit key"))
    button = (_("Create key"), _("Save"))
    saved = (_("Key “%(name)s” created. Copy it now."), _("Key “%(name)s” saved."))
    template_name = "keys/key_form.html"

    def get_object(self) -> Key | None:
        pk = self.kwargs.get("pk")
        return None if pk is None else get_object_or_404(visible_keys(self.request.user).not_revoked(), pk=pk)

    def get_form_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"user": self.request.user, "instance": self.object}
        user = self.request.user
        owner = pk_from(self.request.GET.get("owner", ""))
        if self.creating and (user.is_admin or user.is_team_lead) and owner is not None:
            kwargs["initial"] = {"owner": owner}
        return kwargs

    def save(self, form: KeyForm) -> Key:
        if not self.creating:
            return form.apply()
        key, plaintext = issue_key(**form.issue_kwargs())
        remember_secret(self.request, f"key-{key.pk}", plaintext)
        return key

    def saved_message(self, obj: Key, form: KeyForm) -> str:
        if self.creating and obj.owner_id != self.request.user.pk:
            return _("Key “%(name)s” created for %(owner)s. Copy it now.") % {
                "name": obj.name,
                "owner": obj.owner.username,
            }
        return super().saved_message(obj, form)


class KeyDetailView(LoginRequiredMixin, _KeyDetailView):
    request: AuthenticatedHttpRequest
    template_name = "keys/key_detail.html"
    context_object_name = "key"

    def get_queryset(self) -> KeyQuerySet:
        return visible_keys(self.request.user)

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        key = self.object
        context["plaintext"] = pop_secret(self.request, f"key-{key.pk}")
        context["rotated_to"] = key.rotated_to.order_by("-created").first()
        context["limits"] = effective_limits(key)
        return context


class KeyRevokeView(LoginRequiredMixin, ConfirmView):
    request: AuthenticatedHttpRequest
    cancel = "key_detail"
    title = _("Revoke key")
    question = _("Revoke the key “%(name)s” (%(masked)s)?")
    detail = _("Every tool using it gets 401 from now on. This cannot be undone.")
    button = _("Revoke key")
    danger = True

    def get_object(self) -> Key:
        return get_object_or_404(visible_keys(self.request.user).not_revoked(), pk=self.kwargs["pk"])

    def names(self, obj: Key) -> dict[str, Any]:
        return {"name": obj.name, "masked": obj.masked}

    def act(self, obj: Key) -> HttpResponse:
        revoke_key(obj)
        return done(self.request, _("Key “%(name)s” (%(masked)s) revoked.") % self.names(obj), "key_detail", obj.pk)


class KeyRotateView(LoginRequiredMixin, ObjectFormView):
    """A new key in place of one (same name, models, allowlist, limits), shown once on its page;
    the old one keeps working for the grace period chosen."""

    request: AuthenticatedHttpRequest
    form_class = RotateForm
    success = "key_detail"
    title = ("", _("Rotate “%(name)s”"))
    button = ("", _("Rotate key"))
    intro = _(
        "Rotation issues a new key with the same name, models, IP allowlist and limits. The new key is shown once."
    )
    template_name = "keys/key_rotate.html"

    def get_object(self) -> Key:
        return get_object_or_404(visible_keys(self.request.user).not_revoked(), pk=self.kwargs["pk"])

    def check(self, obj: Key) -> None:
        check_rotatable(obj)

    def save(self, form: RotateForm) -> Key:
        try:
            with transaction.atomic():
                new, plaintext = rotate_key(self.object, grace=form.grace_period())
        except IntegrityError:
            # rotate_key names the outgoing key "<name> (rotated <minute>)"; a second rotation with
            # grace in the same minute collides with the first one's still-active old key.
            raise ValidationError(
                _("This key was rotated less than a minute ago; wait a minute and try again.")
            ) from None
        remember_secret(self.request, f"key-{new.pk}", plaintext)
        return new

    def saved_message(self, obj: Key, form: RotateForm) -> str:
        if form.grace_period():
            return _("Key “%(name)s” rotated: the old key works until %(until)s UTC. Copy the new key now.") % {
                "name": obj.name,
                "until": f"{self.object.expires_at:%Y-%m-%d %H:%M}",
            }
        return _("Key “%(name)s” rotated: the old key stopped working. Copy the new key now.") % {"name": obj.name}
