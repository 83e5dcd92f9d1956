"""Account and personal API tokens, users (admin), teams (admin; a team lead their own), audit log (admin)."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import forms as auth_forms
from django.contrib.auth import update_session_auth_hash
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.contrib.auth.mixins import LoginRequiredMixin
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Q, QuerySet
from django.forms.utils import ErrorDict
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, render
from django.urls import reverse, reverse_lazy
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext_lazy as _
from django.utils.translation import gettext_noop, ngettext
from django.views import View
from django.views.decorators.http import require_POST
from django.views.generic import DetailView

from portal import audit
from portal.choices import AuditAction
from portal.i18n import Message, set_language_cookie, supported
from portal.permissions import AdminOrTeamLeadRequiredMixin, AdminRequiredMixin
from portal.public import client_ip
from portal.ui import ConfirmView, FilteredListView, ObjectFormView, done, names, pop_secret, remember_secret

from . import services, sso
from .filters import AuditLogFilterSet, TeamFilterSet, UserFilterSet
from .forms import ApiTokenForm, MemberLimitsForm, PasswordChangeForm, TeamForm, UserCreateForm, UserEditForm
from .models import ApiToken, AuditLog, Team, User, object_type_names

# --- account and personal API tokens -------------------------------------------------------


@login_required
def account(request: AuthenticatedHttpRequest) -> HttpResponse:
    user = request.user
    context = {
        "tokens": user.api_tokens.not_revoked().order_by("-created"),
        "token_form": ApiTokenForm(user=user),
        "new_token": pop_secret(request, "api_token"),
    }
    return render(request, "accounts/account.html", context)


@login_required
def token_create(request: AuthenticatedHttpRequest) -> HttpResponse:
    if request.method != "POST":
        return done(request, str(_("Use the form to create a token.")), "account", level=messages.INFO)
    form = ApiTokenForm(request.POST, user=request.user)
    if not form.is_valid():
        tokens_qs = request.user.api_tokens.not_revoked()
        return render(request, "accounts/account.html", {"tokens": tokens_qs, "token_form": form}, status=400)
    days = form.cleaned_data.get("expires_in_days")
    expires = timezone.now() + datetime.timedelta(days=days) if days else None
    token, plaintext = services.issue_token(user=request.user, name=form.cleaned_data["name"], expires_at=expires)
    audit.record(AuditAction.CREATE, token, message=Message(gettext_noop("API token created")))
    remember_secret(request, "api_token", plaintext)
    return done(request, _("API token “%(name)s” created. Copy it now.") % {"name": token.name}, "account")


@require_POST
def set_language(request: HttpRequest) -> HttpResponse:
    """The header's language switcher and the account page's choice: saves a signed-in person's
    preference (portal.i18n) and sets the language cookie for everyone, then goes back."""
    code = supported(request.POST.get("language"))
    if request.user.is_authenticated and ("language" in request.POST) and (code or not request.POST["language"]):
        services.set_language(request.user, code)
    target = request.POST.get("next") or request.META.get("HTTP_REFERER") or "/"
    if not url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        target = "/"
    response = HttpResponseRedirect(target)
    if code:
        set_language_cookie(response, code)
    else:
        response.delete_cookie(settings.LANGUAGE_COOKIE_NAME, samesite=settings.LANGUAGE_COOKIE_SAMESITE)
    return response


if TYPE_CHECKING:
    from portal.permissions import AuthenticatedHttpRequest

    _UserDetailView = DetailView[User]
else:  # Django's generic forms and views take no [] at runtime
    _UserDetailView = DetailView


class TokenRevokeView(LoginRequiredMixin, ConfirmView):
    request: AuthenticatedHttpRequest
    title = _("Revoke API token")
    question = _("Revoke the API token “%(name)s” (%(prefix)s…%(last_four)s)?")
    detail = _("Scripts using it stop working at once. This cannot be undone.")
    button = _("Revoke token")
    danger = True

    def get_object(self) -> ApiToken:
        return get_object_or_404(ApiToken.objects.not_revoked(), pk=self.kwargs["pk"], user=self.request.user)

    def names(self, obj: ApiToken) -> dict[str, Any]:
        return {"name": obj.name, "prefix": obj.prefix, "last_four": obj.last_four}

    def get_cancel_url(self, obj: ApiToken) -> str:
        return reverse("account")

    def act(self, obj: ApiToken) -> HttpResponse:
        services.revoke_token(obj)
        audit.record(AuditAction.ACTION, obj, message=Message(gettext_noop("API token revoked")))
        return done(self.request, _("API token “%(name)s” revoked.") % {"name": obj.name}, "account")


class LoginView(auth_views.LoginView):
    """The password form, and "Sign in with <IdP>" when single sign-on is on. A username, or an
    address, with many recent failures is slowed down (`services.login_delay`,
    `services.address_delay`), except from a trusted address."""

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        username = request.POST.get("username", "")
        ip = client_ip(request)
        if username and not services.is_trusted_address(ip):
            wait, why = (
                services.login_delay(username),
                _("Too many failed logins for this username. Try again in %(seconds)s seconds."),
            )
            if not wait:
                wait, why = (
                    services.address_delay(ip),
                    _("Too many failed logins from your network address. Try again in %(seconds)s seconds."),
                )
            if wait:
                form = self.get_form()  # not validated: that would check the password
                form._errors = ErrorDict()  # type: ignore[attr-defined]  # Django's own, not in the stubs
                form.cleaned_data = {}
                form.add_error(None, why % {"seconds": wait})
                response = self.render_to_response(self.get_context_data(form=form), status=429)
                response["Retry-After"] = str(wait)
                return response
        return super().post(request, *args, **kwargs)

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        return super().get_context_data(
            sso_name=sso.provider_name() if sso.enabled() else "",
            password_admins_only=settings.PORTAL_PASSWORD_LOGIN_ADMINS_ONLY,
            **kwargs,
        )


class PasswordChangeView(auth_views.PasswordChangeView):
    request: AuthenticatedHttpRequest
    template_name = "registration/password_change_form.html"
    success_url = reverse_lazy("account")
    form_class = PasswordChangeForm

    def form_valid(self, form: auth_forms.PasswordChangeForm) -> HttpResponse:
        response = super().form_valid(form)  # keeps this session (update_session_auth_hash)
        revoke = form.cleaned_data["revoke_access"]
        services.password_changed(
            self.request.user, current_session=self.request.session.session_key, revoke_access=revoke
        )
        if revoke:
            messages.success(
                self.request,
                _("Your password was changed; your API tokens were revoked and your other sessions ended."),
            )
        else:
            messages.success(self.request, _("Your password was changed; your API tokens were kept."))
        return response


# --- users (admin) -------------------------------------------------------------------------


class UserListView(AdminRequiredMixin, FilteredListView):
    model = User
    filterset_class = UserFilterSet
    template_name = "accounts/user_list.html"
    sort_fields = {
        "username": "username",
        "email": "email",
        "role": "role",
        "state": "is_active",
        "tokens_per_day": "tokens_per_day",
        "last_login": "last_login",
    }

    def get_base_queryset(self) -> QuerySet[User]:
        return User.objects.order_by("username")

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        return super().get_context_data(filter_fields=["role", "team", "is_active"], **kwargs)


class UserCreateView(AdminRequiredMixin, ObjectFormView):
    request: AuthenticatedHttpRequest
    form_class = UserCreateForm
    success, cancel = "user_detail", "user_list"
    title = (_("New user"), "")
    button = (_("Create user"), "")
    saved = (_("User %(name)s created. Give them the password below."), "")
    intro = _(
        "A password is generated and shown to you once; limits, key defaults and allowed models are on the next page."
    )

    def save(self, form: UserCreateForm) -> User:
        data = form.cleaned_data
        user, password = services.create_user(
            username=data["username"],
            role=data["role"],
            email=data["email"],
            first_name=data["first_name"],
            last_name=data["last_name"],
        )
        remember_secret(self.request, f"password-{user.pk}", password)
        return user


class UserDetailView(AdminRequiredMixin, _UserDetailView):
    model = User
    template_name = "accounts/user_detail.html"
    context_object_name = "person"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        person = self.object
        context["new_password"] = pop_secret(self.request, f"password-{person.pk}")
        context["keys"] = person.keys.order_by("revoked_at", "-created")[:50]
        context["allowed"] = person.allowed_models.all()
        context["locked_out"] = services.is_locked_out(person)
        return context


class UserEditView(AdminRequiredMixin, ObjectFormView):
    form_class = UserEditForm
    queryset = User.objects.all()
    success = "user_detail"
    title = ("", _("Edit %(name)s"))
    saved = ("", _("User %(name)s saved."))

    def get_form_kwargs(self) -> dict[str, Any]:
        return {"instance": self.object, "acting_user": self.request.user}


class UserConfirmView(AdminRequiredMixin, ConfirmView):
    """An admin's action on a user, asked first; Cancel goes back to the user's page."""

    request: AuthenticatedHttpRequest
    queryset = User.objects.all()
    cancel = "user_detail"


class UserActivationView(UserConfirmView):
    """Deactivate (keys stop working) or reactivate, after a confirmation page; the service refuses
    deactivating oneself (`services.check_set_active`), here and in the API."""

    choice = "restore_keys"

    def activating(self, person: User) -> bool:
        return not person.is_active

    def check(self, person: User) -> None:
        services.check_set_active(person, self.activating(person), actor=self.request.user)

    def texts(self, person: User) -> dict[str, Any]:
        names = {"username": person.username}
        if self.activating(person):
            old_keys = person.keys.filter(revoked_at__isnull=True).count()
            texts = {
                "title": _("Reactivate user"),
                "button": _("Reactivate"),
                "question": _("Reactivate %(username)s?") % names,
                "detail": _(
                    "%(username)s can log in again. Their API tokens stay revoked; their old keys are "
                    "revoked too unless you keep them below."
                )
                % names,
                "danger": False,
                "choice_name": self.choice if old_keys else "",
                "choice_label": ngettext(
                    "Keep their %(count)d old key working", "Keep their %(count)d old keys working", old_keys
                )
                % {"count": old_keys},
            }
        else:
            texts = {
                "title": _("Deactivate user"),
                "button": _("Deactivate"),
                "question": _("Deactivate %(username)s?") % names,
                "detail": _(
                    "%(username)s is logged out everywhere, cannot log in, their API tokens are revoked "
                    "and all their keys stop working at once."
                )
                % names,
                "danger": True,
            }
        return texts

    def act(self, person: User) -> HttpResponse:
        activate = self.activating(person)
        restore = activate and self.chose()
        services.set_active(person, activate, restore_keys=restore, actor=self.request.user)
        if not activate:
            text = _("User %(username)s deactivated; their sessions, tokens and keys no longer work.")
        elif restore:
            text = _("User %(username)s reactivated; their old keys work again.")
        else:
            text = _("User %(username)s reactivated; their old keys were revoked.")
        return done(self.request, text % {"username": person.username}, "user_detail", person.pk)


class UserUnlockView(UserConfirmView):
    """Clear the failed logins that locked a username out (django-axes), after a confirmation."""

    title = _("Unlock login")
    question = _("Let %(name)s try to log in again now?")
    detail = _(
        "Their failed login attempts are cleared. Addresses that failed too many times stay "
        "blocked until the cool-off ends."
    )
    button = _("Unlock login")

    def act(self, person: User) -> HttpResponse:
        services.unlock_login(person, actor=self.request.user)
        return done(self.request, _("%(name)s can log in again.") % names(person), "user_detail", person.pk)


class UserResetPasswordView(UserConfirmView):
    title = _("Reset password")
    question = _("Reset the password of %(name)s?")
    detail = _("Their current password stops working; the new password is shown to you once.")
    choice = "revoke_access"
    choice_label = _("Also revoke their API tokens and end their sessions (recommended)")
    choice_checked = True  # a POST that was not offered the choice (a script) revokes
    button = _("Reset password")
    danger = True

    def act(self, person: User) -> HttpResponse:
        revoke = self.chose()
        password = services.reset_password(person, actor=self.request.user, revoke_access=revoke)
        if person.pk == self.request.user.pk:  # resetting one's own ends this session too: keep it
            update_session_auth_hash(self.request, person)
        remember_secret(self.request, f"password-{person.pk}", password)
        if revoke:
            text = _(
                "Password of %(name)s reset; their sessions ended and API tokens were revoked. "
                "Give them the new one below."
            )
        else:
            text = _("Password of %(name)s reset; their API tokens were kept. Give them the new one below.")
        return done(self.request, text % names(person), "user_detail", person.pk)


# --- teams (admin; a team lead manages their own team's members) ---------------------------


class TeamListView(AdminRequiredMixin, FilteredListView):
    model = Team
    filterset_class = TeamFilterSet
    template_name = "accounts/team_list.html"
    sort_fields = {"name": "name", "requests_per_minute": "requests_per_minute", "tokens_per_day": "tokens_per_day"}

    def get_base_queryset(self) -> QuerySet[Team]:
        return Team.objects.annotate(member_count=Count("members")).order_by("name")


class TeamEditView(AdminRequiredMixin, ObjectFormView):
    """Create (no pk) or edit a team."""

    form_class = TeamForm
    queryset = Team.objects.all()
    success, cancel = "team_detail", "team_list"
    title = (_("New team"), _("Edit team %(name)s"))
    saved = (_("Team %(name)s created. Put people in it on their user page."), _("Team %(name)s saved."))


def managed_team(request: AuthenticatedHttpRequest, pk: int) -> Team:
    """The team `pk` if the user is an admin or its lead; another team is 404 (a lead's), 403 otherwise."""
    team = get_object_or_404(Team.objects.visible_to(request.user), pk=pk)
    if not (request.user.is_admin or request.user.led_team_id == team.pk):
        raise PermissionDenied(_("Only admins and the team's leads can manage it."))
    return team


class TeamDetailView(AdminOrTeamLeadRequiredMixin, View):
    """The team's limits and models, and its members with their own limits and keys."""

    def get(self, request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
        team = managed_team(request, pk)
        members = (
            services.managed_members(team, request.user)
            .annotate(active_keys=Count("keys", filter=Q(keys__revoked_at__isnull=True), distinct=True))
            .order_by("username")
        )
        return render(
            request,
            "accounts/team_detail.html",
            {"team": team, "members": members, "allowed": team.allowed_models.all()},
        )


class MemberLimitsView(AdminOrTeamLeadRequiredMixin, ObjectFormView):
    """A member's own limits, set by an admin or the team's lead (within the team's ceilings)."""

    request: AuthenticatedHttpRequest

    form_class = MemberLimitsForm
    template_name = "accounts/member_limits.html"
    success = "team_detail"
    title = ("", _("Limits of %(name)s"))
    saved = ("", _("Limits of %(name)s saved."))

    def get_object(self) -> User:
        self.team = managed_team(self.request, self.kwargs["pk"])
        return get_object_or_404(services.managed_members(self.team, self.request.user), pk=self.kwargs["member_pk"])

    def get_form_kwargs(self) -> dict[str, Any]:
        return {"member": self.object, "editor": self.request.user}

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        intro = _(
            "These apply to all of %(name)s's keys together; the team's limits apply on top, for all members together."
        ) % names(self.object)
        return super().get_context_data(team=self.team, intro=intro, **kwargs)

    def save(self, form: MemberLimitsForm) -> User:
        form.save()
        member: User = self.object
        return member

    def get_success_url(self, obj: User) -> str:
        return reverse("team_detail", args=[self.team.pk])


# --- audit log (admin) ---------------------------------------------------------------------


class AuditLogView(AdminRequiredMixin, FilteredListView):
    model = AuditLog
    filterset_class = AuditLogFilterSet
    template_name = "accounts/audit_log.html"
    paginate_by = 50
    sort_fields = {"when": "created", "who": "actor_name", "action": "action", "object": "object_type"}

    def get_base_queryset(self) -> QuerySet[AuditLog]:
        return AuditLog.objects.select_related("actor")

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        found = set(AuditLog.objects.order_by().values_list("object_type", flat=True).distinct())
        names = object_type_names()
        object_types = sorted(((t, names.get(t, t)) for t in found if t), key=lambda pair: pair[1])
        return super().get_context_data(filter_fields=["action", "actor"], object_types=object_types, **kwargs)
