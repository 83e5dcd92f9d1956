"""The GPU-hours showback page (admins): one calendar month, `?month=YYYY-MM`, `?format=csv`."""

from __future__ import annotations

import datetime as dt

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views import View

from channels.prices import currency, format_money
from portal.permissions import AdminRequiredMixin
from portal.ui import bad_query, csv_download, csv_safe

from ..forms import GPUTypeCostForm, ShowbackQueryForm
from .services import IDLE, gpu_types, monthly, set_gpu_type_cost


class ShowbackView(AdminRequiredMixin, View):
    """GPU-hours per deployment, and per team and developer by their token share."""

    def post(self, request: HttpRequest) -> HttpResponse:
        """Set one GPU type's cost per GPU-hour (hosts without a cost of their own use it)."""
        form = GPUTypeCostForm(request.POST)
        if not form.is_valid():
            return self.get(request, form=form, status=400)
        set_gpu_type_cost(form.cleaned_data["gpu_name"], form.cleaned_data["hour_cost"])
        messages.success(request, _("Cost per GPU-hour saved for %(gpu)s.") % {"gpu": form.cleaned_data["gpu_name"]})
        return redirect(request.get_full_path())

    def get(self, request: HttpRequest, form: GPUTypeCostForm | None = None, status: int = 200) -> HttpResponse:
        query = ShowbackQueryForm(request.GET)
        if not query.is_valid():
            return bad_query(request, _("GPU-hours"), query)
        report = monthly(query.cleaned_data["month"])
        label = f"{report.month:%Y-%m}"
        if query.cleaned_data["format"] == "csv":
            response, writer = csv_download(
                f"gpu-hours-{label}.csv", [_("Month"), _("Team"), _("User"), _("GPU-hours"), _("Tokens")]
            )
            for team, user, hours, tokens in report.people:
                writer.writerow([label, csv_safe(team or ""), csv_safe(user or ""), f"{hours:.3f}", tokens])
            return response
        previous = (report.since - dt.timedelta(days=1)).date()
        return render(
            request,
            "hosts/showback.html",
            {
                "report": report,
                "label": label,
                "previous": f"{previous:%Y-%m}",
                "next": f"{report.until:%Y-%m}" if report.until <= timezone.now() else "",
                "idle": IDLE,
                "money": [
                    (team, user, format_money(gpu), format_money(spent), format_money(gpu + spent))
                    for team, user, gpu, spent in report.money
                ],
                "gpu_types": gpu_types(),
                "gpu_type_form": form,
                "currency": currency(),
            },
            status=status,
        )
