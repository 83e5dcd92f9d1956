"""Web pages for deployments and their launch jobs.

Admins only. Actions that change a server (launch, stop, restart, adopt) are POSTs behind a
confirmation page; the job page polls its progress with htmx while the job is active.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import QuerySet
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from portal.permissions import AdminRequiredMixin
from portal.ui import ConfirmView, FilteredListView, ObjectDeleteView, names

from ..choices import JobAction, NodeRole
from ..downloads import services as downloads
from ..models import Deployment, DeploymentNode, Host, LaunchJob
from ..ondemand import services as ondemand
from ..remote import commands, ssh
from ..views import DENIED, admin_required
from . import jobs, multinode, services
from .filters import DeploymentFilterSet
from .forms import DeploymentForm

if TYPE_CHECKING:
    from portal.permissions import AuthenticatedHttpRequest

ACTIONS = {
    JobAction.LAUNCH: _("Launch the server on the host and register its channel."),
    JobAction.STOP: _("Stop the server (TERM, then KILL after a grace period) and disable its channel."),
    JobAction.RESTART: _("Stop the server, then launch it again."),
    JobAction.ADOPT: _("Take over a server already running on this port (started by hand or by an earlier job)."),
}


class DeploymentListView(AdminRequiredMixin, FilteredListView):
    """Deployments with the API's filters (host, status, backend) and sortable columns."""

    model = Deployment
    filterset_class = DeploymentFilterSet
    template_name = "hosts/deploy_list.html"
    sort_fields = {
        "name": "name",
        "host": "host__name",
        "backend": "backend",
        "served": "served_model_name",
        "port": "port",
        "status": "status",
    }

    def get_base_queryset(self) -> QuerySet[Deployment]:
        return Deployment.objects.select_related("host", "channel").order_by("host__name", "port")

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        return super().get_context_data(
            filter_fields=["host", "status", "backend"], hosts=Host.objects.order_by("name"), **kwargs
        )


deployment_list = DeploymentListView.as_view()


def _preview_context(form: DeploymentForm) -> dict[str, Any]:
    deployment = form.preview_deployment()
    return {
        "preview_command": services.command_preview(deployment),
        "preview_fit": services.check_fit(deployment, arch=services.host_architecture(deployment)),
        "preview_layout": multinode.layout(deployment),
    }


@admin_required
@require_POST
def deployment_fit_preview(request: AuthenticatedHttpRequest, host_pk: int) -> HttpResponse:
    """The deploy form's live estimate: htmx posts the form here as its options change."""
    host = get_object_or_404(Host, pk=host_pk)
    instance = None
    if request.GET.get("deployment", "").isdigit():
        instance = get_object_or_404(Deployment, pk=int(request.GET["deployment"]), host=host)
    form = DeploymentForm(request.POST, host=host, instance=instance)
    context: dict[str, Any] = {"host": host, "form": form}
    if form.is_valid():
        context.update(_preview_context(form))
    return render(request, "hosts/_deploy_fit_live.html", context)


@admin_required
@require_http_methods(["GET", "POST"])
def deployment_create(request: AuthenticatedHttpRequest, host_pk: int) -> HttpResponse:
    host = get_object_or_404(Host, pk=host_pk)
    return _deployment_form(request, host, None)


@admin_required
@require_http_methods(["GET", "POST"])
def deployment_edit(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    deployment = get_object_or_404(Deployment.objects.select_related("host"), pk=pk)
    try:
        services.check_changeable(deployment)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
        return redirect("deployment_detail", pk=pk)
    return _deployment_form(request, deployment.host, deployment)


def _deployment_form(request: AuthenticatedHttpRequest, host: Host, instance: Deployment | None) -> HttpResponse:
    context: dict[str, Any] = {"host": host, "deployment": instance}
    if request.method == "POST":
        form = DeploymentForm(request.POST, host=host, instance=instance)
        if form.is_valid():
            if "preview" in request.POST:
                context.update(_preview_context(form))
            else:
                deployment = form.save(request.user)
                services.check_fit(deployment, arch=services.host_architecture(deployment))
                messages.success(
                    request,
                    _("Deployment %(deployment)s saved. Check the fit, then launch it.") % {"deployment": deployment},
                )
                return redirect("deployment_detail", pk=deployment.pk)
    else:
        initial = None
        if instance is None:
            gpus = list(host.gpus.values_list("index", flat=True))
            initial = {"gpu_indices": gpus[:1], "port": 8000, "backend": "vllm"}
            initial.update(downloads.offered_initial(request.GET))  # "already on this host"
        form = (
            DeploymentForm(host=host, instance=instance, initial=initial)
            if initial
            else DeploymentForm(host=host, instance=instance)
        )
    context["form"] = form
    context["on_host"] = downloads.downloaded_on(host) if instance is None else []
    return render(request, "hosts/deploy_form.html", context)


@admin_required
@require_GET
def deployment_detail(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
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
            "events": deployment.events.all()[:50],
            "active_job": next((j for j in jobs if j.is_active), None),
            "actions": ACTIONS,
            "nodes": deployment.nodes.select_related("host"),
            "layout": multinode.layout(deployment),
            "on_demand": ondemand.overview(deployment) if deployment.on_demand else None,
        },
    )


@admin_required
@require_GET
def deployment_node_log(request: AuthenticatedHttpRequest, pk: int, node_pk: int) -> HttpResponse:
    """One node's logs (Ray's, and the server's on the head), read over SSH when asked for: the
    deployment page loads it into the node's row with htmx."""
    node = get_object_or_404(
        DeploymentNode.objects.select_related("host", "deployment__host"), pk=node_pk, deployment=pk
    )
    deployment = node.deployment
    folder = commands.deployment_dir(deployment.remote_dir)
    logs: list[tuple[str, str]] = []
    error = ""
    try:
        with ssh.connect(node.host) as remote:
            logs.append(("Ray", commands.log_tail(remote, folder, deployment.upstream_api_key, name="ray")))
            if node.role == NodeRole.HEAD:
                logs.append(
                    (deployment.get_backend_display(), commands.log_tail(remote, folder, deployment.upstream_api_key))
                )
    except ssh.SSHError as exc:
        error = exc.message
    return render(request, "hosts/_node_log.html", {"node": node, "logs": logs, "error": error})


@admin_required
@require_POST
def deployment_fit(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    """Re-estimate, reading config.json / GGUF metadata on the host."""
    deployment = get_object_or_404(Deployment.objects.select_related("host"), pk=pk)
    try:
        with ssh.connect(deployment.host) as remote:
            services.check_fit(deployment, remote)
    except ssh.SSHError as exc:
        services.check_fit(deployment)
        messages.warning(
            request, _("Could not read the model on the host, used presets: %(message)s") % {"message": exc.message}
        )
    return redirect("deployment_detail", pk=pk)


QUESTIONS = {
    JobAction.LAUNCH: _("Launch %(name)s?"),
    JobAction.STOP: _("Stop %(name)s?"),
    JobAction.RESTART: _("Restart %(name)s?"),
    JobAction.ADOPT: _("Adopt %(name)s?"),
}


class DeploymentConfirmView(AdminRequiredMixin, ConfirmView):
    request: AuthenticatedHttpRequest
    permission_denied_message = DENIED
    queryset = Deployment.objects.select_related("host")
    cancel = "deployment_detail"

    def texts(self, deployment: Deployment) -> dict[str, Any]:
        about = _("Host %(host)s, port %(port)s, model %(model)s.") % {
            "host": deployment.host.name,
            "port": deployment.port,
            "model": deployment.served_model_name,
        }
        return {**super().texts(deployment), "about": about}


class DeploymentActionView(DeploymentConfirmView):
    """Launch, stop, restart or adopt: the job is queued after a confirmation (one at a time)."""

    def get_object(self) -> Deployment:
        if self.kwargs["action"] not in ACTIONS:
            raise PermissionDenied(_("Unknown action."))
        deployment: Deployment = super().get_object()
        return deployment

    def texts(self, deployment: Deployment) -> dict[str, Any]:
        action = JobAction(self.kwargs["action"])
        question = QUESTIONS[action] % names(deployment)
        texts = {"title": question, "question": question, "detail": ACTIONS[action], "button": action.label}
        return {**super().texts(deployment), **texts, "danger": action == JobAction.STOP}

    def act(self, deployment: Deployment) -> HttpResponse:
        try:
            job = jobs.request_job(deployment, self.kwargs["action"], user=self.request.user)
        except jobs.JobConflict as exc:
            messages.error(self.request, str(exc))
            return redirect("deployment_detail", pk=deployment.pk)
        return redirect("job_detail", pk=job.pk)


class DeploymentDeleteView(DeploymentConfirmView, ObjectDeleteView):
    queryset = Deployment.objects.all()
    success = "deployment_list"
    title = _("Delete deployment")
    question = _("Delete %(name)s?")
    detail = _("Delete the deployment and its job history. Its channel stays until you delete it.")
    button = _("Delete")
    deleted = _("Deployment %(name)s deleted.")

    def check(self, deployment: Deployment) -> None:
        services.check_changeable(deployment, deleting=True)  # asked again by delete_deployment

    def delete(self, deployment: Deployment) -> None:
        services.delete_deployment(deployment)


# --- jobs ----------------------------------------------------------------------------------------------
@admin_required
@require_GET
def job_detail(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    job = get_object_or_404(LaunchJob.objects.select_related("deployment__host"), pk=pk)
    return render(request, "hosts/job_detail.html", {"job": job})


@admin_required
@require_GET
def job_progress(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    """The part of the job page htmx polls: states with times, message, log tail."""
    job = get_object_or_404(LaunchJob.objects.select_related("deployment__host"), pk=pk)
    return render(request, "hosts/job_progress.html", {"job": job})
