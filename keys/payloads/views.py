"""Request log pages (admins only): the switches per key, user or team, the stored requests, and one
request's redacted bodies (every view of them is audit-logged)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils.translation import gettext_lazy as _
from django.views import View

from keys.models import PayloadLogging, RequestPayload
from portal.forms import pk_from
from portal.permissions import AdminRequiredMixin
from portal.ui import ObjectDeleteView, sort_queryset

from .filters import RequestLogPageFilterSet
from .forms import PayloadLoggingForm, find_key
from .services import read

PAGE_SIZE = 50


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
        payloads = RequestLogPageFilterSet(
            request.GET or None,
            queryset=RequestPayload.objects.select_related("key", "user").defer("request_body", "response_body"),
        )
        rows = payloads.qs if not payloads.is_bound or payloads.is_valid() else RequestPayload.objects.none()
        shown, sort = sort_queryset(request, rows, self.sort_fields)
        page = Paginator(shown, PAGE_SIZE).get_page(request.GET.get("page"))
        query = request.GET.copy()
        query.pop("page", None)
        context: dict[str, Any] = {
            "policies": PayloadLogging.objects.select_related("key", "key__owner", "user", "team"),
            "form": form or PayloadLoggingForm(),
            "filter": payloads,
            "filter_fields": ["key", "user", "model", "status", "since", "until"],
            "filtered": any(v for k, v in request.GET.items() if k not in ("page", "sort")),
            "payloads": page.object_list,
            "page_obj": page,
            "query_string": query.urlencode(),
            "sort": sort,
        }
        return render(request, "keys/request_logs.html", context, status=400 if form is not None else 200)

    def post(self, request: HttpRequest) -> HttpResponse:
        instance = None
        key = find_key(request.POST.get("key", ""))
        if key is not None:
            instance = PayloadLogging.objects.filter(key=key).first()
        elif (user_pk := pk_from(request.POST.get("user", ""))) is not None:  # (else the form's field error)
            instance = PayloadLogging.objects.filter(user_id=user_pk).first()
        elif (team_pk := pk_from(request.POST.get("team", ""))) is not None:
            instance = PayloadLogging.objects.filter(team_id=team_pk).first()
        form = PayloadLoggingForm(request.POST, instance=instance)
        if not form.is_valid():
            return self.get(request, form)
        policy = form.save()
        messages.success(request, _("Saved: %(policy)s.") % {"policy": policy.describe()})
        return HttpResponseRedirect(reverse("request_log_list"))


class PayloadLoggingDeleteView(AdminRequiredMixin, ObjectDeleteView):
    """Remove a logging policy after a confirmation page."""

    queryset = PayloadLogging.objects.all()
    title = _("Remove request logging")
    question = _("Remove the request logging policy for %(name)s?")
    detail = _(
        "Requests are then logged as the next broader policy says (or not at all); bodies already kept "
        "stay until their retention ends."
    )
    button = _("Remove")
    success = "request_log_list"
    deleted = _("Removed: %(name)s.")

    def get_cancel_url(self, obj: PayloadLogging) -> str:
        return reverse("request_log_list")

    def names(self, obj: PayloadLogging) -> dict[str, Any]:
        return {"name": obj.describe()}


class RequestLogDetailView(AdminRequiredMixin, View):
    """One stored request's redacted bodies; the read is audit-logged."""

    def get(self, request: HttpRequest, pk: int) -> HttpResponse:
        payload = get_object_or_404(RequestPayload.objects.select_related("key", "user"), pk=pk)
        bodies = read(payload, reader=request.user, via="web")
        return render(request, "keys/request_log_detail.html", {"payload": payload, "bodies": bodies})
