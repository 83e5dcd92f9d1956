"""Admin pages for channel health: per-channel chart and probe log, overview, alert targets."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.db.models import CharField
from django.db.models.functions import Concat
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.translation import gettext_lazy as _
from django.views import View

from channels.models import AlertDelivery, AlertTarget, Channel
from portal.permissions import AdminRequiredMixin
from portal.ui import ObjectDeleteView, sort_queryset

from . import alerts, history, schedule, services
from .forms import AlertTargetForm, ProbeScheduleForm, ProbeSettingsForm

PROBE_LOG_LIMIT = 50


class HealthAdminView(AdminRequiredMixin, View):
    permission_denied_message = _("Only admins can see channel health.")


def _channel_context(channel: Channel) -> dict[str, Any]:
    history.attach_health([channel])
    return {
        "channel": channel,
        "routes": list(channel.routes.select_related("model")),
        "probes": list(channel.probes.all()[:PROBE_LOG_LIMIT]),
        "status_changes": list(channel.status_changes.all()[:10]),
    }


def _overview(
    request: HttpRequest, form: ProbeScheduleForm, current: dict[str, Any], status: int = 200
) -> HttpResponse:
    channels = history.attach_health(list(Channel.objects.all()))
    return render(
        request,
        "channels/health_overview.html",
        {"channels": channels, "schedule": current, "schedule_form": form, **history.dashboard()},
        status=status,
    )


class ChannelHealthView(HealthAdminView):
    http_method_names = ["get", "post"]

    def get(self, request: HttpRequest, pk: int) -> HttpResponse:
        channel = get_object_or_404(Channel, pk=pk)
        form = ProbeSettingsForm(request.POST or None, instance=channel)
        if request.method == "POST" and form.is_valid():
            form.save()
            messages.success(request, _("Probe settings saved."))
            return redirect("channel-health", pk=channel.pk)
        return render(request, "channels/health_channel.html", {**_channel_context(channel), "settings_form": form})

    post = get


class ChannelHealthSeriesView(HealthAdminView):
    http_method_names = ["get"]

    def get(self, request: HttpRequest, pk: int) -> JsonResponse:
        channel = get_object_or_404(Channel, pk=pk)
        range_ = request.GET.get("range", "24h")
        if range_ not in history.RANGES:
            return JsonResponse({"error": f"range must be one of {', '.join(history.RANGES)}"}, status=400)
        return JsonResponse(history.series(channel, range_))


class ChannelHealthCheckView(HealthAdminView):
    """The "Check now" button: probe at once and answer with the result and the refreshed log."""

    http_method_names = ["post"]

    def post(self, request: HttpRequest, pk: int) -> HttpResponse:
        channel = get_object_or_404(Channel, pk=pk)
        done = services.check_channel(channel.pk)
        channel.refresh_from_db()
        ctx = {**_channel_context(channel), "done": done, "oob": True}
        if not request.headers.get("HX-Request"):
            if done is None:
                messages.warning(request, _("The channel is disabled; enable it to check it."))
            return redirect("channel-health", pk=channel.pk)
        return render(request, "channels/_health_check_result.html", ctx)


class HealthOverviewView(HealthAdminView):
    http_method_names = ["get"]

    def get(self, request: HttpRequest) -> HttpResponse:
        current = schedule.get_probe_schedule()
        form = ProbeScheduleForm(
            initial={"interval_seconds": current["interval_seconds"], "enabled": current["enabled"]}
        )
        return _overview(request, form, current)


class HealthScheduleView(HealthAdminView):
    http_method_names = ["post"]

    def post(self, request: HttpRequest) -> HttpResponse:
        form = ProbeScheduleForm(request.POST)
        if form.is_valid():
            schedule.set_probe_schedule(
                interval_seconds=form.cleaned_data["interval_seconds"], enabled=form.cleaned_data["enabled"]
            )
            messages.success(request, _("Probe schedule saved; the scheduler picks it up within a few seconds."))
            return redirect("channel-health-overview")
        return _overview(request, form, schedule.get_probe_schedule(), status=400)


class AlertTargetsView(HealthAdminView):
    http_method_names = ["get", "post"]
    sort_fields = {"name": "name", "kind": "kind", "destination": "destination_sort", "enabled": "enabled"}

    def get(self, request: HttpRequest) -> HttpResponse:
        form = AlertTargetForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            target = form.save()
            messages.success(request, _("Alert target %(target)s added.") % {"target": target.name})
            return redirect("channel-alert-targets")
        # A target has a URL or an e-mail address (the other is blank): sort by whichever it has.
        targets = AlertTarget.objects.annotate(destination_sort=Concat("url", "email", output_field=CharField()))
        targets, sort = sort_queryset(request, targets, self.sort_fields)
        return render(
            request,
            "channels/health_alert_targets.html",
            {
                "targets": targets,
                "sort": sort,
                "form": form,
                "deliveries": AlertDelivery.objects.select_related("status_change__channel")[:20],
            },
            status=400 if request.method == "POST" else 200,
        )

    post = get


class AlertTargetDeleteView(AdminRequiredMixin, ObjectDeleteView):
    permission_denied_message = HealthAdminView.permission_denied_message
    queryset = AlertTarget.objects.all()
    success = "channel-alert-targets"
    title = _("Delete alert target")
    question = _("Delete alert target %(name)s?")
    detail = _("Notifications will no longer go to %(destination)s. Past notifications stay in the log.")
    button = _("Delete")
    deleted = _("Alert target %(name)s deleted.")

    def names(self, target: AlertTarget) -> dict[str, Any]:
        return {"name": target.name, "destination": target.destination}

    def get_cancel_url(self, target: AlertTarget) -> str:
        return reverse("channel-alert-targets")


class AlertTargetTestView(HealthAdminView):
    http_method_names = ["post"]

    def post(self, request: HttpRequest, pk: int) -> HttpResponse:
        target = get_object_or_404(AlertTarget, pk=pk)
        ok, error = alerts.send_test(target)
        return render(request, "channels/_health_alert_test.html", {"target": target, "ok": ok, "error": error})
