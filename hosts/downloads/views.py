"""Web pages of weight downloads (admins only): request one (or join the running one), watch its
progress (the page polls the database, so every browser sees the same), cancel it or forget its
access token; list the models on a host's disk and delete one. Each destructive action has a
confirmation page."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_http_methods

from portal.forms import pk_from
from portal.ui import add_validation_errors

from ..models import Host
from ..remote import ssh
from ..views import admin_required
from . import services
from .forms import DownloadForm
from .models import ModelDownload

if TYPE_CHECKING:
    from portal.permissions import AuthenticatedHttpRequest

PREFILL = ("source", "repo_id", "revision", "pattern", "endpoint")


@admin_required
@require_http_methods(["GET", "POST"])
def download_create(request: AuthenticatedHttpRequest, host_pk: int) -> HttpResponse:
    host = get_object_or_404(Host, pk=host_pk)
    if request.method == "POST":
        form = DownloadForm(request.POST)
        if form.is_valid():
            data = form.cleaned_data
            try:
                job, created = services.request_download(host=host, user=request.user, **data)
            except ValidationError as exc:
                add_validation_errors(form, exc)  # the host is the page's, not a field: its error goes on top
            else:
                if created:
                    messages.success(request, _("Download #%(id)s queued.") % {"id": job.pk})
                else:
                    messages.info(
                        request,
                        _("The same download is already running (#%(id)s): you are watching it.") % {"id": job.pk},
                    )
                return redirect("download_detail", pk=job.pk)
    else:
        initial = {k: request.GET[k] for k in PREFILL if request.GET.get(k)}
        if "endpoint" not in initial:  # the mirror this host used last, if any
            last = host.downloads.exclude(endpoint="").values_list("endpoint", flat=True).first()
            if last:
                initial["endpoint"] = last
        form = DownloadForm(initial=initial or None)
    status = 400 if form.is_bound else 200
    return render(request, "hosts/downloads/form.html", {"host": host, "form": form}, status=status)


@admin_required
@require_GET
def download_list(request: AuthenticatedHttpRequest) -> HttpResponse:
    downloads = ModelDownload.objects.select_related("host").all()
    host_pk = pk_from(request.GET.get("host", ""))
    if host_pk is not None:
        downloads = downloads.filter(host_id=host_pk)
    return render(request, "hosts/downloads/list.html", {"downloads": downloads[:200]})


@admin_required
@require_GET
def download_detail(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    job = get_object_or_404(ModelDownload.objects.select_related("host"), pk=pk)
    return render(request, "hosts/downloads/detail.html", {"job": job})


@admin_required
@require_GET
def download_progress(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    job = get_object_or_404(ModelDownload.objects.select_related("host"), pk=pk)
    return render(request, "hosts/downloads/_progress.html", {"job": job})


@admin_required
@require_http_methods(["GET", "POST"])
def download_cancel(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    return _confirmed(
        request, pk, services.cancel, _("Download #%(id)s cancelled."), "hosts/downloads/cancel_confirm.html"
    )


@admin_required
@require_http_methods(["GET", "POST"])
def download_forget_token(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    return _confirmed(
        request,
        pk,
        services.forget_token,
        _("The access token of download #%(id)s is forgotten."),
        "hosts/downloads/forget_token_confirm.html",
    )


def _confirmed(
    request: AuthenticatedHttpRequest,
    pk: int,
    act: Callable[..., object],
    done: str,
    template: str,
) -> HttpResponse:
    """A destructive action on a download: GET asks for confirmation, POST does it (the service
    refuses it with a `DownloadConflict` when the download's state does not allow it)."""
    job = get_object_or_404(ModelDownload.objects.select_related("host"), pk=pk)
    if request.method != "POST":
        return render(request, template, {"job": job})
    try:
        act(job, user=request.user)
    except services.DownloadConflict as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, done % {"id": job.pk})
    return redirect("download_detail", pk=job.pk)


@admin_required
@require_GET
def models_on_disk(request: AuthenticatedHttpRequest, host_pk: int) -> HttpResponse:
    host = get_object_or_404(Host, pk=host_pk)
    error, rows = "", []
    try:
        rows = services.models_on_disk(host)
    except ssh.SSHError as exc:
        error = exc.message
    return render(
        request,
        "hosts/downloads/on_disk.html",
        {"host": host, "rows": rows, "error": error, "download_dir": settings.HOSTS_DOWNLOAD_DIR},
    )


@admin_required
@require_http_methods(["GET", "POST"])
def model_delete(request: AuthenticatedHttpRequest, host_pk: int, name: str) -> HttpResponse:
    host = get_object_or_404(Host, pk=host_pk)
    if request.method == "POST":
        try:
            services.delete_model(host, name, user=request.user)
        except (ValidationError, services.DownloadConflict, services.DownloadFailed, ssh.SSHError) as exc:
            messages.error(request, getattr(exc, "message", None) or " ".join(getattr(exc, "messages", [str(exc)])))
        else:
            messages.success(request, _("%(name)s was deleted from %(host)s.") % {"name": name, "host": host})
        return redirect("host_models", host_pk=host.pk)
    return render(request, "hosts/downloads/model_delete.html", {"host": host, "name": name})
