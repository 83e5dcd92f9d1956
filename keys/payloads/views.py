"""Request log pages (admins only): the switches per key, user or team, the stored requests, and one
request's redacted bodies (every view of them is audit-logged)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils.translation import gettext_lazy as _
from django.views import View

from keys.models import PayloadLogging, RequestPayload
from portal.permissions import AdminRequiredMixin
from portal.ui import sort_queryset

from .filters import RequestPayloadFilterSet
from .forms import PayloadLoggingForm
from .services import read

LIST_LIMIT = 200


class RequestLogListView(AdminRequiredMixin, View):
    """Who is logged (and for how long), a form to change it, and the latest stored requests."""

    sort_fields = {
        "created": "created",
        "user": "user__username",
        "key": "key__name",
        "model": "model",
        "surface": "surface",
        "status": "http_status",
        "expires": "expires_at",
    }

    def get(self, request: HttpRequest, form: PayloadLoggingForm | None = None) -> HttpResponse:
        payloads = RequestPayloadFilterSet(
            request.GET,
            queryset=RequestPayload.objects.select_related("key", "user").defer("request_body", "response_body"),
        )
        shown, sort = sort_queryset(request, payloads.qs, self.sort_fields)
        context: dict[str, Any] = {
            "policies": PayloadLogging.objects.select_related("key", "key__owner", "user", "team"),
            "form": form or PayloadLoggingForm(),
            "payloads": shown[:LIST_LIMIT],
            "sort": sort,
            "limit": LIST_LIMIT,
        }
        return render(request, "keys/request_logs.html", context, status=400 if form is not None else 200)

    def post(self, request: HttpRequest) -> HttpResponse:
        instance = None
        if request.POST.get("key"):
            instance = PayloadLogging.objects.filter(key_id=request.POST["key"]).first()
        elif request.POST.get("user"):
            instance = PayloadLogging.objects.filter(user_id=request.POST["user"]).first()
        elif request.POST.get("team"):
            instance = PayloadLogging.objects.filter(team_id=request.POST["team"]).first()
        form = PayloadLoggingForm(request.POST, instance=instance)
        if not form.is_valid():
            return self.get(request, form)
        policy = form.save()
        messages.success(request, _("Saved: %(policy)s.") % {"policy": policy})
        return HttpResponseRedirect(reverse("request_log_list"))


class PayloadLoggingDeleteView(AdminRequiredMixin, View):
    def post(self, request: HttpRequest, pk: int) -> HttpResponse:
        policy = get_object_or_404(PayloadLogging, pk=pk)
        policy.delete()
        messages.success(request, _("Removed: %(policy)s.") % {"policy": policy})
        return HttpResponseRedirect(reverse("request_log_list"))


class RequestLogDetailView(AdminRequiredMixin, View):
    """One stored request's redacted bodies; the read is audit-logged."""

    def get(self, request: HttpRequest, pk: int) -> HttpResponse:
        payload = get_object_or_404(RequestPayload.objects.select_related("key", "user"), pk=pk)
        bodies = read(payload, reader=request.user, via="web")
        return render(request, "keys/request_log_detail.html", {"payload": payload, "bodies": bodies})
