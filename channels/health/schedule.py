"""The django-celery-beat schedule of the health tasks: created once, interval editable in UI and API."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.utils.translation import gettext as _

if TYPE_CHECKING:
    from django_celery_beat.models import PeriodicTask

PROBE_TASK_NAME = "Probe all channels"
DEFAULT_TASKS = (
    # (periodic task name, celery task, every, period)
    (PROBE_TASK_NAME, "channels.tasks.probe_all_channels", 60, "seconds"),
    ("Aggregate channel probes hourly", "channels.tasks.aggregate_probe_hours", 1, "hours"),
    ("Prune old channel probes", "channels.tasks.prune_probe_results", 1, "days"),
)
MIN_INTERVAL, MAX_INTERVAL = 10, 86_400


def ensure_default_schedule(interval_model: Any, task_model: Any) -> None:
    """Create the default periodic tasks if missing; never touches ones an admin has edited.

    Takes the model classes so the data migration can pass its historical models.
    """
    for name, task, every, period in DEFAULT_TASKS:
        if task_model.objects.filter(name=name).exists():
            continue
        interval, _created = interval_model.objects.get_or_create(every=every, period=period)
        task_model.objects.create(name=name, task=task, interval=interval, enabled=True)


def probe_task() -> PeriodicTask:
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    ensure_default_schedule(IntervalSchedule, PeriodicTask)
    return PeriodicTask.objects.select_related("interval").get(name=PROBE_TASK_NAME)


def get_probe_schedule() -> dict[str, Any]:
    task = probe_task()
    seconds = task.interval.every * {"days": 86400, "hours": 3600, "minutes": 60, "seconds": 1}.get(
        task.interval.period, 1
    )
    return {"interval_seconds": seconds, "enabled": task.enabled, "last_run_at": task.last_run_at}


def set_probe_schedule(*, interval_seconds: int, enabled: bool) -> dict[str, Any]:
    """Point the probe task at an IntervalSchedule of `interval_seconds`; beat picks it up by itself."""
    from django_celery_beat.models import IntervalSchedule

    if not MIN_INTERVAL <= interval_seconds <= MAX_INTERVAL:
        raise ValueError(
            _("Choose an interval between %(low)d and %(high)d seconds.") % {"low": MIN_INTERVAL, "high": MAX_INTERVAL}
        )
    task = probe_task()
    interval, _created = IntervalSchedule.objects.get_or_create(every=interval_seconds, period=IntervalSchedule.SECONDS)
    task.interval = interval
    task.enabled = enabled
    task.save()  # PeriodicTask.save bumps PeriodicTasks.last_update, which makes beat reload
    return get_probe_schedule()
