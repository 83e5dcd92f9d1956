"""Web pages for deployments and launch jobs, plus the host actions used by the host page.

Admins only. Actions that change a server (launch, stop, restart, adopt) are POSTs behind a
confirmation page; the job page polls its progress with htmx while the job is active.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from . import services, ssh
from .choices import DeploymentStatus, JobAction
from .deploy_forms import DeploymentForm
from .models import Deployment, Host, LaunchJob

ACTIONS = {
    JobAction.LAUNCH: "Launch the server on the host and register its channel.",
    JobAction.STOP: "Stop the server (TERM, then KILL after a grace period) and disable its channel.",
    JobAction.RESTART: "Stop the server, then launch it again.",
    JobAction.ADOPT: "Take over a server already running on this port (started by hand or by an earlier job).",
}


def admin_required(view: Callable) -> Callable:
    @login_required
    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        if not request.user.is_admin:
            raise PermissionDenied("Only admins manage GPU hosts and deployments.")
        return view(request, *args, **kwargs)

    return wrapper


# --- deployments ---------------------------------------------------------------------------------------
@admin_required
@require_GET
def deployment_list(request: HttpRequest) -> HttpResponse:
    deployments = Deployment.objects.select_related("host", "channel").order_by("host__name", "port")
    hosts = Host.objects.order_by("name")
    return render(request, "hosts/deploy_list.html", {"deployments": deployments, "hosts": hosts})


def _preview_context(form: DeploymentForm) -> dict:
    deployment = form.preview_deployment()
    return {
        "preview_command": services.command_preview(deployment),
        "preview_fit": services.check_fit(deployment),
    }


@admin_required
@require_http_methods(["GET", "POST"])
def deployment_create(request: HttpRequest, host_pk: int) -> HttpResponse:
    host = get_object_or_404(Host, pk=host_pk)
    return _deployment_form(request, host, None)


@admin_required
@require_http_methods(["GET", "POST"])
def deployment_edit(request: HttpRequest, pk: int) -> HttpResponse:
    deployment = get_object_or_404(Deployment.objects.select_related("host"), pk=pk)
    if deployment.status not in (DeploymentStatus.STOPPED, DeploymentStatus.FAILED):
        messages.error(request, "Stop the deployment before changing it.")
        return redirect("deployment_detail", pk=pk)
    return _deployment_form(request, deployment.host, deployment)


def _deployment_form(request: HttpRequest, host: Host, instance: Deployment | None) -> HttpResponse:
    context: dict = {"host": host, "deployment": instance}
    if request.method == "POST":
        form = DeploymentForm(request.POST, host=host, instance=instance)
        if form.is_valid():
            if "preview" in request.POST:
                context.update(_preview_context(form))
            else:
                deployment = form.save(request.user)
                messages.success(request, f"Deployment {deployment} saved. Check the fit, then launch it.")
                return redirect("deployment_detail", pk=deployment.pk)
    else:
        initial = None
        if instance is None:
            gpus = list(host.gpus.values_list("index", flat=True))
            initial = {"gpu_indices": gpus[:1], "port": 8000, "backend": "vllm"}
        form = (
            DeploymentForm(host=host, instance=instance, initial=initial)
            if initial
            else DeploymentForm(host=host, instance=instance)
        )
    context["form"] = form
    return render(request, "hosts/deploy_form.html", context)


@admin_required
@require_GET
def deployment_detail(request: HttpRequest, pk: int) -> HttpResponse:
    deployment = get_object_or_404(Deployment.objects.select_related("host", "channel"), pk=pk)
    jobs = deployment.jobs.all()[:50]
    return render(
        request,
        "hosts/deploy_detail.html",
        {
            "deployment": deployment,
            "command": services.command_preview(deployment),
            "fit": deployment.last_fit,
            "jobs": jobs,
            "active_job": next((j for j in jobs if j.is_active), None),
            "actions": ACTIONS,
        },
    )


@admin_required
@require_POST
def deployment_fit(request: HttpRequest, pk: int) -> HttpResponse:
    """Re-estimate, reading config.json / GGUF metadata on the host."""
    deployment = get_object_or_404(Deployment.objects.select_related("host"), pk=pk)
    try:
        with ssh.connect(deployment.host) as remote:
            services.check_fit(deployment, remote)
    except ssh.SSHError as exc:
        services.check_fit(deployment)
        messages.warning(request, f"Could not read the model on the host, used presets: {exc.message}")
    return redirect("deployment_detail", pk=pk)


@admin_required
@require_http_methods(["GET", "POST"])
def deployment_action(request: HttpRequest, pk: int, action: str) -> HttpResponse:
    if action not in ACTIONS:
        raise PermissionDenied("Unknown action.")
    deployment = get_object_or_404(Deployment.objects.select_related("host"), pk=pk)
    if request.method == "GET":
        return render(
            request,
            "hosts/deploy_confirm.html",
            {
                "deployment": deployment,
                "action": action,
                "label": JobAction(action).label,
                "question": f"{JobAction(action).label} {deployment.name}?",
                "explain": ACTIONS[action],
                "danger": action == JobAction.STOP,
            },
        )
    try:
        job = services.request_job(deployment, action, user=request.user)
    except services.JobConflict as exc:
        messages.error(request, str(exc))
        return redirect("deployment_detail", pk=pk)
    return redirect("job_detail", pk=job.pk)


@admin_required
@require_http_methods(["GET", "POST"])
def deployment_delete(request: HttpRequest, pk: int) -> HttpResponse:
    deployment = get_object_or_404(Deployment, pk=pk)
    if deployment.status not in (DeploymentStatus.STOPPED, DeploymentStatus.FAILED):
        messages.error(request, "Stop the deployment before deleting it.")
        return redirect("deployment_detail", pk=pk)
    if request.method == "GET":
        return render(
            request,
            "hosts/deploy_confirm.html",
            {
                "deployment": deployment,
                "action": "delete",
                "label": "Delete",
                "question": f"Delete {deployment.name}?",
                "danger": True,
                "explain": "Delete the deployment and its job history. Its channel stays until you delete it.",
            },
        )
    deployment.delete()
    messages.success(request, f"Deployment {deployment.name} deleted.")
    return redirect("deployment_list")


# --- jobs ----------------------------------------------------------------------------------------------
@admin_required
@require_GET
def job_detail(request: HttpRequest, pk: int) -> HttpResponse:
    job = get_object_or_404(LaunchJob.objects.select_related("deployment__host"), pk=pk)
    return render(request, "hosts/job_detail.html", {"job": job})


@admin_required
@require_GET
def job_progress(request: HttpRequest, pk: int) -> HttpResponse:
    """The part of the job page htmx polls: states with times, message, log tail."""
    job = get_object_or_404(LaunchJob.objects.select_related("deployment__host"), pk=pk)
    return render(request, "hosts/job_progress.html", {"job": job})


# --- host actions (for the host page) ---------------------------------------------------------------
def host_gpus_context(host: Host, *, refreshing: bool = False, partial: bool = False) -> dict:
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
    from .tasks import refresh_inventory

    host = get_object_or_404(Host, pk=pk)
    refresh_inventory.delay(host.pk)
    messages.info(request, f"Inventory refresh of {host} queued; this part reloads in a few seconds.")
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
        messages.success(request, f"Host key {host.host_key_fingerprint} confirmed for {host}.")
    return _back(request, host)
