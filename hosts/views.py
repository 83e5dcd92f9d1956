"""Host pages (admin): list, create, edit, detail with GPUs, delete; the GPU panel's actions."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_GET, require_POST
from django.views.generic import DetailView

from channels.models import Channel
from portal import permissions
from portal.permissions import AdminRequiredMixin
from portal.ui import FilteredListView, ObjectDeleteView, ObjectFormView, names

from . import gpu_history, services, tasks
from .filters import HostFilterSet
from .forms import HostForm
from .models import Host

DENIED = _("Only admins manage GPU hosts and deployments.")
admin_required = permissions.admin_required(message=DENIED)


if TYPE_CHECKING:
    _HostDetailView = DetailView[Host]
else:  # Django's generic forms and views take no [] at runtime
    _HostDetailView = DetailView


class HostListView(AdminRequiredMixin, FilteredListView):
    model = Host
    filterset_class = HostFilterSet
    template_name = "hosts/host_list.html"
    sort_fields = {"name": "name", "address": "address", "status": "status", "last_checked": "last_checked"}

    def get_base_queryset(self) -> QuerySet[Host]:
        return Host.objects.prefetch_related("gpus").order_by("name")

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        return super().get_context_data(filter_fields=["label"], **kwargs)


class HostEditView(AdminRequiredMixin, ObjectFormView):
    """Add (no pk) or edit a host."""

    form_class = HostForm
    queryset = Host.objects.all()
    success, cancel = "host_detail", "host_list"
    title = (_("Add host"), _("Edit host"))
    button = (_("Add host"), _("Save"))
    saved = (_("Host %(name)s added."), _("Host %(name)s saved."))

    def saved_message(self, obj: Host, form: HostForm) -> str:
        if not self.creating and form.cleaned_data.get("private_key"):
            return _("Host %(name)s saved; its private key was replaced.") % names(obj)
        if not self.creating and form.cleaned_data.get("clear_private_key"):
            return _("Host %(name)s saved; its private key was removed.") % names(obj)
        return super().saved_message(obj, form)


class HostDetailView(AdminRequiredMixin, _HostDetailView):
    model = Host
    template_name = "hosts/host_detail.html"
    context_object_name = "host"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context.update(host_gpus_context(self.object))
        # The channels the host's deployments registered.
        context["channels"] = Channel.objects.filter(deployments__host=self.object).distinct().order_by("name")
        context["gpu_history"] = gpu_history.series(self.object)
        context["downloads"] = self.object.downloads.all()[:10]  # hosts/downloads/
        return context


class HostDeleteView(AdminRequiredMixin, ObjectDeleteView):
    queryset = Host.objects.all()
    cancel, success = "host_detail", "host_list"
    title = _("Delete host")
    question = _("Delete the host %(name)s?")
    detail = _(
        "Its GPU records and history, its download records and its stored private key are deleted (the files on "
        "its disk stay there). Channels on it stay, without a host."
    )
    button = _("Delete host")
    deleted = _("Host %(name)s deleted.")

    def check(self, obj: Host) -> None:
        services.check_deletable(obj)

    def delete(self, obj: Host) -> None:
        services.delete_host(obj)


# --- the GPU panel's actions -------------------------------------------------------------------
def host_gpus_context(host: Host, *, refreshing: bool = False, partial: bool = False) -> dict[str, Any]:
    """What `hosts/_host_gpus.html` needs: the host and its GPUs (`refreshing` reloads it once;
    `partial` shows flash messages inside it, for htmx swaps)."""
    return {"host": host, "gpus": list(host.gpus.all()), "refreshing": refreshing, "partial_messages": partial}


@admin_required
@require_GET
def host_gpus(request: HttpRequest, pk: int) -> HttpResponse:
    host = get_object_or_404(Host, pk=pk)
    return render(request, "hosts/_host_gpus.html", host_gpus_context(host, partial=True))


def _back(request: HttpRequest, host: Host, *, refreshing: bool = False) -> HttpResponse:
    if request.headers.get("HX-Request"):
        return render(request, "hosts/_host_gpus.html", host_gpus_context(host, refreshing=refreshing, partial=True))
    target = request.POST.get("next") or request.META.get("HTTP_REFERER", "")
    if target and url_has_allowed_host_and_scheme(target, {request.get_host()}, request.is_secure()):
        return redirect(target)
    return redirect(reverse("host_gpus", args=[host.pk]))


@admin_required
@require_POST
def host_refresh(request: HttpRequest, pk: int) -> HttpResponse:
    """ "Refresh now": queue the inventory task for this host."""
    host = get_object_or_404(Host, pk=pk)
    tasks.refresh_inventory.delay(host.pk)
    messages.info(
        request, _("Inventory refresh of %(host)s queued; this part reloads in a few seconds.") % {"host": host}
    )
    return _back(request, host, refreshing=True)


@admin_required
@require_POST
def host_confirm_key(request: HttpRequest, pk: int) -> HttpResponse:
    host = get_object_or_404(Host, pk=pk)
    try:
        services.confirm_host_key(host, request.POST.get("fingerprint", "").strip())
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    else:
        messages.success(
            request,
            _("Host key %(host_key_fingerprint)s confirmed for %(host)s.")
            % {"host_key_fingerprint": host.host_key_fingerprint, "host": host},
        )
    return _back(request, host)
