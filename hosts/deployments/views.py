"""Web pages for deployments and their launch jobs.

Admins only. Actions that change a server (launch, stop, restart, adopt) and forgetting one whose
host no longer answers over SSH are POSTs behind a confirmation page; the job page polls its
progress with htmx while the job is active.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_GET, require_POST

from portal.forms import pk_from
from portal.permissions import AdminRequiredMixin
from portal.ui import ConfirmView, FilteredListView, ObjectDeleteView, ObjectFormView, names

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
        "preview_tool_calling": services.tool_calling_note(deployment, in_form=True),
        "preview_fit": services.check_fit(deployment, arch=services.host_architecture(deployment)),
        "preview_layout": multinode.layout(deployment),
    }


@admin_required
@require_POST
def deployment_fit_preview(request: AuthenticatedHttpRequest, host_pk: int) -> HttpResponse:
    """The deploy form's live estimate: htmx posts the form here as its options change."""
    host = get_object_or_404(Host, pk=host_pk)
    instance = None
    deployment_pk = pk_from(request.GET.get("deployment", ""))
    if deployment_pk is not None:
        instance = get_object_or_404(Deployment, pk=deployment_pk, host=host)
    form = DeploymentForm(request.POST, host=host, instance=instance)
    context: dict[str, Any] = {"host": host, "form": form}
    if form.is_valid():
        context.update(_preview_context(form))
    return render(request, "hosts/_deploy_fit_live.html", context)


class DeploymentFormView(AdminRequiredMixin, ObjectFormView):
    """Create a deployment on a host (`host_pk`) or edit one (`pk`; refused while it runs). "Preview
    command and fit" re-renders the valid form with the command and the estimate, saving nothing."""

    request: AuthenticatedHttpRequest
    permission_denied_message = DENIED
    form_class = DeploymentForm
    queryset = Deployment.objects.select_related("host")
    template_name = "hosts/deploy_form.html"
    success = "deployment_detail"
    title = (_("New deployment on %(host)s"), _("Edit %(name)s"))
    saved = (_("Deployment %(deployment)s saved. Check the fit, then launch it."),) * 2
    invalid_status = 200  # as the page always answered; the browser shows the errors either way

    def get_object(self) -> Deployment | None:
        deployment: Deployment | None = super().get_object()
        self.host = deployment.host if deployment else get_object_or_404(Host, pk=self.kwargs["host_pk"])
        return deployment

    def check(self, obj: Deployment) -> None:
        services.check_changeable(obj)

    def get_form_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"host": self.host, "instance": self.object}
        if self.creating and self.request.method == "GET":
            gpus = list(self.host.gpus.values_list("index", flat=True))
            kwargs["initial"] = {"gpu_indices": gpus[:1], "port": 8000, "backend": "vllm"}
            kwargs["initial"].update(downloads.offered_initial(self.request.GET))  # "already on this host"
        return kwargs

    def save(self, form: DeploymentForm) -> Deployment:
        deployment = form.save(self.request.user)
        services.check_fit(deployment, arch=services.host_architecture(deployment))
        return deployment

    def saved_message(self, obj: Deployment, form: DeploymentForm) -> str:
        return str(self.saved[0]) % {"deployment": obj}

    def get_cancel_url(self) -> str:
        if self.object is not None:
            return self.get_success_url(self.object)
        return reverse("host_detail", args=[self.host.pk])

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        if self.creating:
            context["title"] = str(self.title[0]) % {"host": self.host.name}
        context.update(host=self.host, deployment=self.object)
        context["on_host"] = downloads.downloaded_on(self.host) if self.creating else []
        return context

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if "preview" not in request.POST:
            return super().post(request, *args, **kwargs)
        form = DeploymentForm(request.POST, **self.get_form_kwargs())
        preview = _preview_context(form) if form.is_valid() else {}
        return render(request, self.template_name, self.get_context_data(form=form, **preview))


deployment_create = DeploymentFormView.as_view()
deployment_edit = DeploymentFormView.as_view()


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
            "tool_calling_note": services.tool_calling_note(deployment),
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
            messages.error(self.request, str(exc.text))
            return redirect("deployment_detail", pk=deployment.pk)
        return redirect("job_detail", pk=job.pk)


class DeploymentForgetView(DeploymentConfirmView):
    """The way out when a server cannot be stopped because its host no longer answers over SSH."""

    title = _("Forget this server")
    question = _("Forget the server of %(name)s without stopping it?")
    detail = _(
        "Nothing is sent to the host: if the host comes back, the server may still be running there and "
        "using its GPUs, and you stop it by hand. The deployment becomes failed, is no longer supervised, and "
        "its channel is disabled, so the gateway stops routing its model to it. You can then delete the "
        "deployment, and its host. Refused while SSH to the host works: stop the deployment instead."
    )
    button = _("Forget this server")
    danger = True

    def check(self, deployment: Deployment) -> None:
        services.check_forgettable(deployment)  # asked again by forget_deployment, with SSH

    def act(self, deployment: Deployment) -> HttpResponse:
        try:
            services.forget_deployment(deployment, user=self.request.user)
        except ValidationError as exc:
            messages.error(self.request, " ".join(exc.messages))
        else:
            messages.success(self.request, _("%(name)s forgotten; its server was not stopped.") % names(deployment))
        return redirect("deployment_detail", pk=deployment.pk)


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
