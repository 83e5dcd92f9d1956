"""The budgets page: admins set any budget, a team lead their members' (within the team's)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views import View

from channels.prices import currency, format_money, to_nanos
from keys.models import Budget
from portal import i18n
from portal.permissions import AdminOrTeamLeadRequiredMixin
from portal.ui import ConfirmView

from .forms import BudgetForm, TopUpForm, resolve_target
from .services import may_set, refusal, refused_models, remove_budget, save_budget, statuses, top_up

if TYPE_CHECKING:
    from portal.permissions import AuthenticatedHttpRequest


class BudgetListView(AdminOrTeamLeadRequiredMixin, View):
    template_name = "keys/budget_list.html"

    def context(self, request: AuthenticatedHttpRequest, form: BudgetForm) -> dict[str, Any]:
        budgets = Budget.objects.visible_to(request.user).select_related("key__owner", "user", "team")
        return {
            "budgets": statuses(budgets),
            "removable": {b.pk for b in budgets if may_set(request.user, b.target, b)},
            "form": form,
            "topup_form": TopUpForm() if request.user.is_admin else None,
            "currency": currency(),
        }

    def get(self, request: AuthenticatedHttpRequest) -> HttpResponse:
        return render(request, self.template_name, self.context(request, BudgetForm(editor=request.user)))

    def post(self, request: AuthenticatedHttpRequest) -> HttpResponse:
        action = request.POST.get("action", "save")
        if action == "topup":
            topup = TopUpForm(request.POST)
            if topup.is_valid():
                budget = get_object_or_404(Budget.objects.visible_to(request.user), pk=topup.cleaned_data["budget"])
                try:
                    top_up(
                        budget,
                        editor=request.user,
                        amount=topup.cleaned_data["amount"],
                        until=topup.cleaned_data["until"],
                    )
                except ValidationError as exc:
                    messages.error(request, i18n.sentences(*exc.messages))
                else:
                    messages.success(request, _("Top-up saved."))
            else:
                messages.error(request, _("The top-up needs an amount and an end in the future."))
            return redirect("budget_list")
        form = BudgetForm(request.POST, editor=request.user)
        if form.is_valid():
            data = form.cleaned_data
            target = resolve_target(data["target"])
            try:
                save_budget(
                    editor=request.user,
                    target=target,
                    window=data["window"],
                    amount=data["amount"],
                    alert_percent=data["alert_percent"],
                )
            except PermissionDenied as exc:
                form.add_error(None, str(exc))
            except ValidationError as exc:
                for errors in exc.message_dict.values():
                    form.add_error("amount", errors)
            else:
                refused = refused_models(target)
                if refused:
                    messages.warning(
                        request,
                        _(
                            "Budget saved. While it exists, %(target)s cannot use these models: they have no "
                            "price, and budgeted keys are refused on them until an admin sets one on the Prices "
                            "page: %(models)s."
                        )
                        % {"target": target, "models": i18n.listing(refused)},
                    )
                else:
                    messages.success(request, _("Budget saved."))
                return redirect("budget_list")
        return render(request, self.template_name, self.context(request, form), status=400)


class BudgetDeleteView(AdminOrTeamLeadRequiredMixin, ConfirmView):
    """Remove a budget (the cap on someone's spending) after a confirmation page."""

    request: AuthenticatedHttpRequest

    # Lazy: the class is built once at import, the page is read in each request's language.
    title = gettext_lazy("Remove budget")
    question = gettext_lazy(
        "Remove the %(window)s budget of %(amount)s on %(target)s? Its spending is no longer capped."
    )
    button = gettext_lazy("Remove budget")
    danger = True

    def get_object(self) -> Budget:
        visible = Budget.objects.visible_to(self.request.user).select_related("key__owner", "user", "team")
        return get_object_or_404(visible, pk=self.kwargs["pk"])

    def names(self, obj: Budget) -> dict[str, Any]:
        target = obj.target
        return {
            "window": obj.get_window_display(),
            "amount": format_money(to_nanos(obj.amount), 2),
            "target": getattr(target, "username", None) or getattr(target, "name", None) or str(target),
        }

    def check(self, obj: Budget) -> None:
        reason = refusal(self.request.user, obj.target, obj)
        if reason:
            raise ValidationError(reason)

    def get_cancel_url(self, obj: Budget) -> str:
        return reverse("budget_list")

    def act(self, obj: Budget) -> HttpResponse:
        try:
            remove_budget(obj, editor=self.request.user)
        except PermissionDenied as exc:
            messages.error(self.request, str(exc))
        else:
            messages.success(self.request, _("Budget removed."))
        return redirect("budget_list")
