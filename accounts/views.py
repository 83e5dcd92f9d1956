"""Account and personal API tokens, users (admin), teams (admin; a team lead their own), audit log (admin)."""

from __future__ import annotations

import datetime

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model, update_session_auth_hash
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.contrib.auth.mixins import LoginRequiredMixin
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import Count, Q
from django.forms.utils import ErrorDict
from django.http import HttpResponseRedirect
from django.shortcuts import get_object_or_404, render
from django.urls import reverse, reverse_lazy
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext
from django.views import View
from django.views.decorators.http import require_POST
from django.views.generic import DetailView

from portal import audit
from portal.choices import AuditAction
from portal.i18n import set_language_cookie, supported
from portal.permissions import AdminOrTeamLeadRequiredMixin, AdminRequiredMixin
from portal.public import client_ip
from portal.ui import FilteredListView, done, pop_secret, remember_secret

from . import services, sso
from .filters import AuditLogFilterSet, TeamFilterSet, UserFilterSet
from .forms import ApiTokenForm, MemberLimitsForm, PasswordChangeForm, TeamForm, UserCreateForm, UserEditForm
from .models import ApiToken, AuditLog, Team

User = get_user_model()


# --- account and personal API tokens -------------------------------------------------------


@login_required
def account(request):
    user = request.user
    context = {
        "tokens": user.api_tokens.not_revoked().order_by("-created"),
        "token_form": ApiTokenForm(user=user),
        "new_token": pop_secret(request, "api_token"),
    }
    return render(request, "accounts/account.html", context)


@login_required
def token_create(request):
    if request.method != "POST":
        return done(request, _("Use the form to create a token."), "account", level=messages.INFO)
    form = ApiTokenForm(request.POST, user=request.user)
    if not form.is_valid():
        tokens_qs = request.user.api_tokens.not_revoked()
        return render(request, "accounts/account.html", {"tokens": tokens_qs, "token_form": form}, status=400)
    days = form.cleaned_data.get("expires_in_days")
    expires = timezone.now() + datetime.timedelta(days=days) if days else None
    token, plaintext = services.issue_token(user=request.user, name=form.cleaned_data["name"], expires_at=expires)
    audit.record(AuditAction.CREATE, token, message="API token created")
    remember_secret(request, "api_token", plaintext)
    return done(request, _("API token “%(name)s” created. Copy it now.") % {"name": token.name}, "account")


@require_POST
def set_language(request):
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


class TokenRevokeView(LoginRequiredMixin, View):
    def get_token(self) -> ApiToken:
        return get_object_or_404(ApiToken.objects.not_revoked(), pk=self.kwargs["pk"], user=self.request.user)

    def get(self, request, pk):
        token = self.get_token()
        return render(
            request,
            "portal/confirm.html",
            {
                "title": _("Revoke API token"),
                "question": _("Revoke the API token “%(name)s” (%(prefix)s…%(last_four)s)?")
                % {"name": token.name, "prefix": token.prefix, "last_four": token.last_four},
                "detail": _("Scripts using it stop working at once. This cannot be undone."),
                "button": _("Revoke token"),
                "danger": True,
                "cancel_url": reverse("account"),
            },
        )

    def post(self, request, pk):
        token = self.get_token()
        services.revoke_token(token)
        audit.record(AuditAction.ACTION, token, message="API token revoked")
        return done(request, _("API token “%(name)s” revoked.") % {"name": token.name}, "account")


class LoginView(auth_views.LoginView):
    """The password form, and "Sign in with <IdP>" when single sign-on is on. A username with many
    recent failures is slowed down (`services.login_delay`), except from a trusted address."""

    def post(self, request, *args, **kwargs):
        username = request.POST.get("username", "")
        if username and not services.is_trusted_address(client_ip(request)):
            wait = services.login_delay(username)
            if wait:
                form = self.get_form()  # not validated: that would check the password
                form._errors, form.cleaned_data = ErrorDict(), {}
                form.add_error(
                    None,
                    _("Too many failed logins for this username. Try again in %(seconds)s seconds.")
                    % {"seconds": wait},
                )
                response = self.render_to_response(self.get_context_data(form=form), status=429)
                response["Retry-After"] = str(wait)
                return response
        return super().post(request, *args, **kwargs)

    def get_context_data(self, **kwargs):
        return super().get_context_data(
            sso_name=sso.provider_name() if sso.enabled() else "",
            password_admins_only=settings.PORTAL_PASSWORD_LOGIN_ADMINS_ONLY,
            **kwargs,
        )


class PasswordChangeView(auth_views.PasswordChangeView):
    template_name = "registration/password_change_form.html"
    success_url = reverse_lazy("account")
    form_class = PasswordChangeForm

    def form_valid(self, form):
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

    def get_base_queryset(self):
        return User.objects.order_by("username")

    def get_context_data(self, **kwargs):
        return super().get_context_data(filter_fields=["role", "team", "is_active"], **kwargs)


class UserCreateView(AdminRequiredMixin, View):
    template_name = "accounts/user_form.html"

    def get(self, request):
        return render(request, self.template_name, {"form": UserCreateForm(), "creating": True})

    def post(self, request):
        form = UserCreateForm(request.POST)
        if not form.is_valid():
            return render(request, self.template_name, {"form": form, "creating": True}, status=400)
        data = form.cleaned_data
        with transaction.atomic():
            user, password = services.create_user(
                username=data["username"],
                role=data["role"],
                email=data["email"],
                first_name=data["first_name"],
                last_name=data["last_name"],
            )
        remember_secret(request, f"password-{user.pk}", password)
        return done(
            request,
            _("User %(username)s created. Give them the password below.") % {"username": user.username},
            "user_detail",
            user.pk,
        )


class UserDetailView(AdminRequiredMixin, DetailView):
    model = User
    template_name = "accounts/user_detail.html"
    context_object_name = "person"

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        person = self.object
        context["new_password"] = pop_secret(self.request, f"password-{person.pk}")
        context["keys"] = person.keys.order_by("revoked_at", "-created")[:50]
        context["allowed"] = person.allowed_models.all()
        context["locked_out"] = services.is_locked_out(person)
        return context


class UserEditView(AdminRequiredMixin, View):
    template_name = "accounts/user_edit.html"

    def get(self, request, pk):
        person = get_object_or_404(User, pk=pk)
        form = UserEditForm(instance=person, acting_user=request.user)
        return render(request, self.template_name, {"form": form, "person": person})

    def post(self, request, pk):
        person = get_object_or_404(User, pk=pk)
        form = UserEditForm(request.POST, instance=person, acting_user=request.user)
        if not form.is_valid():
            person.refresh_from_db()
            return render(request, self.template_name, {"form": form, "person": person}, status=400)
        with transaction.atomic():
            form.save()
        return done(request, _("User %(username)s saved.") % {"username": person.username}, "user_detail", person.pk)


class UserActivationView(AdminRequiredMixin, View):
    """Deactivate (keys stop working) or reactivate, after a confirmation page."""

    def setup_person(self, request, pk):
        person = get_object_or_404(User, pk=pk)
        return person, not person.is_active

    def refused(self, request, person, activate):
        """The service's answer when this change is not allowed (e.g. deactivating oneself)."""
        try:
            services.check_set_active(person, activate, actor=request.user)
        except ValidationError as exc:
            return done(request, " ".join(exc.messages), "user_detail", person.pk, level=messages.ERROR)
        return None

    def get(self, request, pk):
        person, activate = self.setup_person(request, pk)
        if refusal := self.refused(request, person, activate):
            return refusal
        names = {"username": person.username}
        if activate:
            title, button = _("Reactivate user"), _("Reactivate")
            question = _("Reactivate %(username)s?") % names
            detail = (
                _(
                    "%(username)s can log in again. Their API tokens stay revoked; their old keys are "
                    "revoked too unless you keep them below."
                )
                % names
            )
        else:
            title, button = _("Deactivate user"), _("Deactivate")
            question = _("Deactivate %(username)s?") % names
            detail = (
                _(
                    "%(username)s is logged out everywhere, cannot log in, their API tokens are revoked "
                    "and all their keys stop working at once."
                )
                % names
            )
        old_keys = person.keys.filter(revoked_at__isnull=True).count() if activate else 0
        return render(
            request,
            "portal/confirm.html",
            {
                "title": title,
                "question": question,
                "detail": detail,
                "button": button,
                "danger": not activate,
                "cancel_url": reverse("user_detail", args=[person.pk]),
                "choice_name": "restore_keys" if old_keys else "",
                "choice_label": ngettext(
                    "Keep their %(count)d old key working", "Keep their %(count)d old keys working", old_keys
                )
                % {"count": old_keys},
            },
        )

    def post(self, request, pk):
        person, activate = self.setup_person(request, pk)
        if refusal := self.refused(request, person, activate):
            return refusal
        restore = activate and request.POST.get("restore_keys") == "on"
        services.set_active(person, activate, restore_keys=restore, actor=request.user)
        names = {"username": person.username}
        if not activate:
            text = _("User %(username)s deactivated; their sessions, tokens and keys no longer work.")
        elif restore:
            text = _("User %(username)s reactivated; their old keys work again.")
        else:
            text = _("User %(username)s reactivated; their old keys were revoked.")
        return done(request, text % names, "user_detail", person.pk)


class UserUnlockView(AdminRequiredMixin, View):
    """Clear the failed logins that locked a username out (django-axes), after a confirmation."""

    def get(self, request, pk):
        person = get_object_or_404(User, pk=pk)
        return render(
            request,
            "portal/confirm.html",
            {
                "title": _("Unlock login"),
                "question": _("Let %(username)s try to log in again now?") % {"username": person.username},
                "detail": _(
                    "Their failed login attempts are cleared. Addresses that failed too many times stay "
                    "blocked until the cool-off ends."
                ),
                "button": _("Unlock login"),
                "cancel_url": reverse("user_detail", args=[person.pk]),
            },
        )

    def post(self, request, pk):
        person = get_object_or_404(User, pk=pk)
        services.unlock_login(person, actor=request.user)
        return done(
            request, _("%(username)s can log in again.") % {"username": person.username}, "user_detail", person.pk
        )


class UserResetPasswordView(AdminRequiredMixin, View):
    def get(self, request, pk):
        person = get_object_or_404(User, pk=pk)
        return render(
            request,
            "portal/confirm.html",
            {
                "title": _("Reset password"),
                "question": _("Reset the password of %(username)s?") % {"username": person.username},
                "detail": _("Their current password stops working; the new password is shown to you once."),
                "choice_name": "revoke_access",
                "choice_label": _("Also revoke their API tokens and end their sessions (recommended)"),
                "choice_checked": True,
                "button": _("Reset password"),
                "danger": True,
                "cancel_url": reverse("user_detail", args=[person.pk]),
            },
        )

    def post(self, request, pk):
        person = get_object_or_404(User, pk=pk)
        # Ticked by default; a POST that was not offered the choice (a script) revokes.
        revoke = request.POST.get("revoke_access") == "on" or not request.POST.get("revoke_access_offered")
        password = services.reset_password(person, actor=request.user, revoke_access=revoke)
        if person.pk == request.user.pk:  # resetting one's own ends this session too: keep it
            update_session_auth_hash(request, person)
        remember_secret(request, f"password-{person.pk}", password)
        if revoke:
            text = _(
                "Password of %(username)s reset; their sessions ended and API tokens were revoked. "
                "Give them the new one below."
            )
        else:
            text = _("Password of %(username)s reset; their API tokens were kept. Give them the new one below.")
        return done(request, text % {"username": person.username}, "user_detail", pk)


# --- teams (admin; a team lead manages their own team's members) ---------------------------


class TeamListView(AdminRequiredMixin, FilteredListView):
    model = Team
    filterset_class = TeamFilterSet
    template_name = "accounts/team_list.html"
    sort_fields = {"name": "name", "requests_per_minute": "requests_per_minute", "tokens_per_day": "tokens_per_day"}

    def get_base_queryset(self):
        return Team.objects.annotate(member_count=Count("members")).order_by("name")


class TeamCreateView(AdminRequiredMixin, View):
    template_name = "accounts/team_form.html"

    def get(self, request):
        return render(request, self.template_name, {"form": TeamForm()})

    def post(self, request):
        form = TeamForm(request.POST)
        if not form.is_valid():
            return render(request, self.template_name, {"form": form}, status=400)
        with transaction.atomic():
            team = form.save()
        return done(
            request,
            _("Team %(team)s created. Put people in it on their user page.") % {"team": team.name},
            "team_detail",
            team.pk,
        )


class TeamEditView(AdminRequiredMixin, View):
    template_name = "accounts/team_form.html"

    def get(self, request, pk):
        team = get_object_or_404(Team, pk=pk)
        return render(request, self.template_name, {"form": TeamForm(instance=team), "team": team})

    def post(self, request, pk):
        team = get_object_or_404(Team, pk=pk)
        form = TeamForm(request.POST, instance=team)
        if not form.is_valid():
            team.refresh_from_db()
            return render(request, self.template_name, {"form": form, "team": team}, status=400)
        with transaction.atomic():
            form.save()
        return done(request, _("Team %(team)s saved.") % {"team": team.name}, "team_detail", team.pk)


def managed_team(request, pk) -> Team:
    """The team `pk` if the user is an admin or its lead; another team is 404 (a lead's), 403 otherwise."""
    team = get_object_or_404(Team.objects.visible_to(request.user), pk=pk)
    if not (request.user.is_admin or request.user.led_team_id == team.pk):
        raise PermissionDenied(_("Only admins and the team's leads can manage it."))
    return team


class TeamDetailView(AdminOrTeamLeadRequiredMixin, View):
    """The team's limits and models, and its members with their own limits and keys."""

    def get(self, request, pk):
        team = managed_team(request, pk)
        members = team.members.annotate(
            active_keys=Count("keys", filter=Q(keys__revoked_at__isnull=True), distinct=True)
        ).order_by("username")
        return render(
            request,
            "accounts/team_detail.html",
            {"team": team, "members": members, "allowed": team.allowed_models.all()},
        )


class MemberLimitsView(AdminOrTeamLeadRequiredMixin, View):
    """A member's own limits, set by an admin or the team's lead (within the team's ceilings)."""

    template_name = "accounts/member_limits.html"

    def get_member(self, request, pk, member_pk):
        team = managed_team(request, pk)
        return team, get_object_or_404(team.members.all(), pk=member_pk)

    def get(self, request, pk, member_pk):
        team, member = self.get_member(request, pk, member_pk)
        form = MemberLimitsForm(member=member, editor=request.user)
        return render(request, self.template_name, {"form": form, "team": team, "member": member})

    def post(self, request, pk, member_pk):
        team, member = self.get_member(request, pk, member_pk)
        form = MemberLimitsForm(request.POST, member=member, editor=request.user)
        if not form.is_valid():
            return render(request, self.template_name, {"form": form, "team": team, "member": member}, status=400)
        with transaction.atomic():
            form.save()
        return done(request, _("Limits of %(username)s saved.") % {"username": member.username}, "team_detail", team.pk)


# --- audit log (admin) ---------------------------------------------------------------------


class AuditLogView(AdminRequiredMixin, FilteredListView):
    model = AuditLog
    filterset_class = AuditLogFilterSet
    template_name = "accounts/audit_log.html"
    paginate_by = 50
    sort_fields = {"when": "created", "who": "actor_name", "action": "action", "object": "object_type"}

    def get_base_queryset(self):
        return AuditLog.objects.select_related("actor")

    def get_context_data(self, **kwargs):
        object_types = AuditLog.objects.order_by().values_list("object_type", flat=True).distinct()
        return super().get_context_data(
            filter_fields=["action", "actor"], object_types=sorted(set(object_types)), **kwargs
        )
