"""Key pages: my keys, all keys (admin), create (plaintext once), revoke, rotate."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib.auth.mixins import LoginRequiredMixin
from django.db import IntegrityError, transaction
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils.translation import gettext_lazy as _
from django.views import View
from django.views.generic import DetailView

from portal.permissions import AdminOrTeamLeadRequiredMixin
from portal.ui import FilteredListView, done, pop_secret, remember_secret

from .filters import KeyFilterSet
from .forms import KeyForm, RotateForm
from .models import Key, KeyQuerySet
from .services import effective_limits, issue_key, revoke_key, rotate_key

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


class KeyCreateView(LoginRequiredMixin, View):
    request: AuthenticatedHttpRequest
    template_name = "keys/key_form.html"

    def get(self, request: AuthenticatedHttpRequest) -> HttpResponse:
        initial: dict[str, int] = {}
        if (request.user.is_admin or request.user.is_team_lead) and request.GET.get("owner", "").isdigit():
            initial["owner"] = int(request.GET["owner"])
        return render(request, self.template_name, {"form": KeyForm(user=request.user, initial=initial)})

    def post(self, request: AuthenticatedHttpRequest) -> HttpResponse:
        form = KeyForm(request.POST, user=request.user)
        if not form.is_valid():
            return render(request, self.template_name, {"form": form}, status=400)
        with transaction.atomic():
            key, plaintext = issue_key(**form.issue_kwargs())
        remember_secret(request, f"key-{key.pk}", plaintext)
        owner = "" if key.owner_id == request.user.pk else f" for {key.owner.username}"
        return done(
            request,
            _("Key “%(name)s” created%(owner)s. Copy it now.") % {"name": key.name, "owner": owner},
            "key_detail",
            key.pk,
        )


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


class KeyEditView(LoginRequiredMixin, View):
    """Change a key's name, models, IP allowlist, expiry and limits (the same rules as create)."""

    request: AuthenticatedHttpRequest
    template_name = "keys/key_form.html"

    def get_key(self) -> Key:
        return get_object_or_404(visible_keys(self.request.user).not_revoked(), pk=self.kwargs["pk"])

    def get(self, request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
        key = self.get_key()
        return render(request, self.template_name, {"form": KeyForm(user=request.user, instance=key), "key": key})

    def post(self, request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
        key = self.get_key()
        form = KeyForm(request.POST, user=request.user, instance=key)
        if not form.is_valid():
            key.refresh_from_db()
            return render(request, self.template_name, {"form": form, "key": key}, status=400)
        with transaction.atomic():
            form.apply()
        return done(request, _("Key “%(name)s” saved.") % {"name": key.name}, "key_detail", key.pk)


class KeyRevokeView(LoginRequiredMixin, View):
    request: AuthenticatedHttpRequest

    def get_key(self) -> Key:
        return get_object_or_404(visible_keys(self.request.user).not_revoked(), pk=self.kwargs["pk"])

    def get(self, request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
        key = self.get_key()
        return render(
            request,
            "keys/key_confirm_revoke.html",
            {
                "key": key,
                "question": _("Revoke the key “%(name)s” (%(masked)s)?") % {"name": key.name, "masked": key.masked},
                "detail": _("Every tool using it gets 401 from now on. This cannot be undone."),
                "button": _("Revoke key"),
                "danger": True,
                "cancel_url": reverse("key_detail", args=[key.pk]),
            },
        )

    def post(self, request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
        key = self.get_key()
        revoke_key(key)
        return done(
            request,
            _("Key “%(name)s” (%(masked)s) revoked.") % {"name": key.name, "masked": key.masked},
            "key_detail",
            key.pk,
        )


class KeyRotateView(LoginRequiredMixin, View):
    request: AuthenticatedHttpRequest
    template_name = "keys/key_rotate.html"

    def get_key(self) -> Key:
        return get_object_or_404(visible_keys(self.request.user).not_revoked(), pk=self.kwargs["pk"])

    def get(self, request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
        return render(request, self.template_name, {"key": self.get_key(), "form": RotateForm()})

    def post(self, request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
        key = self.get_key()
        form = RotateForm(request.POST)
        if not form.is_valid():
            return render(request, self.template_name, {"key": key, "form": form}, status=400)
        grace = form.grace_period()
        try:
            with transaction.atomic():
                new, plaintext = rotate_key(key, grace=grace)
        except IntegrityError:
            # rotate_key names the outgoing key "<name> (rotated <minute>)"; a second rotation with
            # grace in the same minute collides with the first one's still-active old key.
            form.add_error(None, _("This key was rotated less than a minute ago; wait a minute and try again."))
            return render(request, self.template_name, {"key": key, "form": form}, status=400)
        remember_secret(request, f"key-{new.pk}", plaintext)
        old = f"the old key works until {key.expires_at:%Y-%m-%d %H:%M} UTC" if grace else "the old key stopped working"
        return done(
            request,
            _("Key “%(name)s” rotated: %(old)s. Copy the new key now.") % {"name": new.name, "old": old},
            "key_detail",
            new.pk,
        )
