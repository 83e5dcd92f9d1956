"""GPU history: utilisation, memory used and temperature per GPU, sampled every minute and kept
hourly for 30 days.

A sample is the same `nvidia-smi --query-gpu` line the inventory parses: every inventory stores one
(`inventory.store`), and the per-minute task takes one with that single call per host (`sample`),
which also refreshes the GPU rows' live figures. Samples are rolled up at once into the hour they
fall in (`GPUHour`: count, sums and maxima, moved with F() updates, so two workers add up), never
stored one by one; hours older than HISTORY_DAYS are deleted by the same task (`prune`).
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F
from django.db.models.functions import Greatest
from django.utils import timezone

from .models import GPU, GPUHour, Host
from .remote import ssh

logger = logging.getLogger(__name__)

HISTORY_DAYS = 30


def _hour(now: dt.datetime) -> dt.datetime:
    return now.replace(minute=0, second=0, microsecond=0)


def record(host: Host, gpus: list[Any], now: dt.datetime | None = None) -> int:
    """Fold one sample per GPU (objects with index, utilization_pct, memory_used_mib, temperature_c)
    into its hour; returns how many GPUs were recorded."""
    hour = _hour(now or timezone.now())
    count = 0
    for g in gpus:
        util, mem, temp = g.utilization_pct or 0, g.memory_used_mib or 0, g.temperature_c or 0
        values = {
            "samples": F("samples") + 1,
            "utilization_sum": F("utilization_sum") + util,
            "utilization_max": Greatest(F("utilization_max"), util),
            "memory_used_sum_mib": F("memory_used_sum_mib") + mem,
            "memory_used_max_mib": Greatest(F("memory_used_max_mib"), mem),
            "temperature_sum": F("temperature_sum") + temp,
            "temperature_max": Greatest(F("temperature_max"), temp),
        }
        rows = GPUHour.objects.filter(host=host, gpu_index=g.index, hour=hour)
        if not rows.update(**values):
            try:
                with transaction.atomic():
                    GPUHour.objects.create(
                        host=host,
                        gpu_index=g.index,
                        hour=hour,
                        samples=1,
                        utilization_sum=util,
                        utilization_max=util,
                        memory_used_sum_mib=mem,
                        memory_used_max_mib=mem,
                        temperature_sum=temp,
                        temperature_max=temp,
                    )
            except IntegrityError:  # another worker created the hour meanwhile
                rows.update(**values)
        count += 1
    return count


def sample(host: Host, now: dt.datetime | None = None) -> int:
    """One `nvidia-smi --query-gpu` call on the host: the GPU rows' live figures and the history."""
    from .remote import inventory

    try:
        with ssh.connect(host) as remote:
            result = remote.run(inventory.GPU_QUERY)
    except ssh.SSHError as exc:
        ssh.mark_contact(host, status=exc.status, message=exc.text)
        return 0
    if not result.ok:
        return 0
    try:
        gpus = inventory.parse_gpus(result.stdout)
    except inventory.InventoryError as exc:
        logger.info("GPU sample of host %s unreadable: %s", host.pk, exc)
        return 0
    for g in gpus:
        GPU.objects.filter(host=host, index=g.index).update(
            memory_used_mib=g.memory_used_mib, utilization_pct=g.utilization_pct, temperature_c=g.temperature_c
        )
    return record(host, gpus, now)


def prune(now: dt.datetime | None = None) -> int:
    cutoff = (now or timezone.now()) - dt.timedelta(days=HISTORY_DAYS)
    return GPUHour.objects.filter(hour__lt=cutoff).delete()[0]


def series(host: Host, *, days: int = 7, now: dt.datetime | None = None) -> dict[str, Any]:
    """Chart.js data for the host page: hourly averages per GPU over the last `days`."""
    since = _hour(now or timezone.now()) - dt.timedelta(days=days)
    rows = list(GPUHour.objects.filter(host=host, hour__gte=since).order_by("hour", "gpu_index"))
    hours = sorted({r.hour for r in rows})
    labels = [h.strftime("%m-%d %H:00") for h in hours]
    by_gpu: dict[int, dict[dt.datetime, GPUHour]] = {}
    for r in rows:
        by_gpu.setdefault(r.gpu_index, {})[r.hour] = r

    def avg(r: GPUHour | None, total: str, scale: float = 1.0) -> float | None:
        return round(getattr(r, total) / r.samples / scale, 1) if r and r.samples else None

    datasets = []
    for index, per_hour in sorted(by_gpu.items()):
        got = [per_hour.get(h) for h in hours]
        datasets.append({"label": f"GPU {index} %", "data": [avg(r, "utilization_sum") for r in got], "yAxisID": "pct"})
        datasets.append(
            {"label": f"GPU {index} GiB", "data": [avg(r, "memory_used_sum_mib", 1024) for r in got], "yAxisID": "gib"}
        )
        datasets.append(
            {"label": f"GPU {index} °C", "data": [avg(r, "temperature_sum") for r in got], "yAxisID": "pct"}
        )
    return {"labels": labels, "datasets": datasets}
