"""Admin pages for channel health: per-channel chart and probe log, overview, alert targets."""

from __future__ import annotations

from functools import wraps

from django.contrib import messages
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from channels.health import alerts, history, schedule, service
from channels.health_forms import AlertTargetForm, ProbeScheduleForm, ProbeSettingsForm
from channels.models import AlertDelivery, AlertTarget, Channel

PROBE_LOG_LIMIT = 50


def admin_required(view):
    """Anonymous → login page; a signed-in developer → 403."""

    @wraps(view)
    def wrapped(request: HttpRequest, *args, **kwargs):
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        if not request.user.is_admin:
            raise PermissionDenied("Only admins can see channel health.")
        return view(request, *args, **kwargs)

    return wrapped


def _channel_context(channel: Channel) -> dict:
    history.attach_health([channel])
    return {
        "channel": channel,
        "routes": list(channel.routes.select_related("model")),
        "probes": list(channel.probes.all()[:PROBE_LOG_LIMIT]),
        "status_changes": list(channel.status_changes.all()[:10]),
    }


@admin_required
@require_http_methods(["GET", "POST"])
def channel_health(request: HttpRequest, pk: int) -> HttpResponse:
    channel = get_object_or_404(Channel, pk=pk)
    form = ProbeSettingsForm(request.POST or None, instance=channel)
    if request.method == "POST":
        if form.is_valid():
            form.save()
            messages.success(request, "Probe settings saved.")
            return redirect("channel-health", pk=channel.pk)
    return render(request, "channels/health_channel.html", {**_channel_context(channel), "settings_form": form})


@admin_required
@require_GET
def channel_health_series(request: HttpRequest, pk: int) -> JsonResponse:
    channel = get_object_or_404(Channel, pk=pk)
    range_ = request.GET.get("range", "24h")
    if range_ not in history.RANGES:
        return JsonResponse({"error": f"range must be one of {', '.join(history.RANGES)}"}, status=400)
    return JsonResponse(history.series(channel, range_))


@admin_required
@require_POST
def channel_health_check(request: HttpRequest, pk: int) -> HttpResponse:
    """The "Check now" button: probe at once and answer with the result and the refreshed log."""
    channel = get_object_or_404(Channel, pk=pk)
    done = service.check_channel(channel.pk)
    channel.refresh_from_db()
    ctx = {**_channel_context(channel), "done": done, "oob": True}
    if not request.headers.get("HX-Request"):
        if done is None:
            messages.warning(request, "The channel is disabled; enable it to check it.")
        return redirect("channel-health", pk=channel.pk)
    return render(request, "channels/_health_check_result.html", ctx)


@admin_required
@require_GET
def health_overview(request: HttpRequest) -> HttpResponse:
    channels = history.attach_health(list(Channel.objects.all()))
    current = schedule.get_probe_schedule()
    form = ProbeScheduleForm(initial={"interval_seconds": current["interval_seconds"], "enabled": current["enabled"]})
    return render(
        request,
        "channels/health_overview.html",
        {"channels": channels, "schedule": current, "schedule_form": form, **history.dashboard()},
    )


@admin_required
@require_POST
def health_schedule(request: HttpRequest) -> HttpResponse:
    form = ProbeScheduleForm(request.POST)
    if form.is_valid():
        schedule.set_probe_schedule(
            interval_seconds=form.cleaned_data["interval_seconds"], enabled=form.cleaned_data["enabled"]
        )
        messages.success(request, "Probe schedule saved; the scheduler picks it up within a few seconds.")
        return redirect("channel-health-overview")
    channels = history.attach_health(list(Channel.objects.all()))
    return render(
        request,
        "channels/health_overview.html",
        {"channels": channels, "schedule": schedule.get_probe_schedule(), "schedule_form": form, **history.dashboard()},
        status=400,
    )


@admin_required
@require_http_methods(["GET", "POST"])
def alert_targets(request: HttpRequest) -> HttpResponse:
    form = AlertTargetForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        target = form.save()
        messages.success(request, f"Alert target {target.name} added.")
        return redirect("channel-alert-targets")
    return render(
        request,
        "channels/health_alert_targets.html",
        {
            "targets": AlertTarget.objects.all(),
            "form": form,
            "deliveries": AlertDelivery.objects.select_related("status_change__channel")[:20],
        },
        status=400 if request.method == "POST" else 200,
    )


@admin_required
@require_http_methods(["GET", "POST"])
def alert_target_delete(request: HttpRequest, pk: int) -> HttpResponse:
    target = get_object_or_404(AlertTarget, pk=pk)
    if request.method == "POST":
        name = target.name
        target.delete()
        messages.success(request, f"Alert target {name} deleted.")
        return redirect("channel-alert-targets")
    return render(request, "channels/health_alert_target_delete.html", {"target": target})


@admin_required
@require_POST
def alert_target_test(request: HttpRequest, pk: int) -> HttpResponse:
    target = get_object_or_404(AlertTarget, pk=pk)
    ok, error = alerts.send_test(target)
    return render(request, "channels/_health_alert_test.html", {"target": target, "ok": ok, "error": error})
