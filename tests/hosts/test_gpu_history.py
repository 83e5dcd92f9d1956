"""GPU history through the real sshd whose `nvidia-smi` prints the canned CSV of a fixture: one
`--query-gpu` call per host and minute, rolled up hourly, pruned after 30 days, charted on the host
page and exported as Prometheus gauges."""

from __future__ import annotations

import datetime as dt

from django.urls import reverse
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from hosts import gpu_history, tasks
from hosts.metrics import GPUCollector
from hosts.models import GPU, GPUHour
from hosts.remote import inventory

T0 = dt.datetime(2026, 12, 1, 10, 5, tzinfo=dt.UTC)


def test_samples_roll_up_per_gpu_and_hour(gpu_host, ssh_target):
    ssh_target.use_gpus("nvidia_smi_8xh100")
    inventory.refresh(gpu_host)  # the inventory itself is a sample (of the hour it ran in: now)
    GPUHour.objects.all().delete()
    assert gpu_history.sample(gpu_host, now=T0) == 8
    assert gpu_history.sample(gpu_host, now=T0 + dt.timedelta(minutes=1)) == 8
    ssh_target.use_gpus("nvidia_smi_rtx4090")  # GPU 0 now says 12 %, 1873 MiB, 45 °C
    assert gpu_history.sample(gpu_host, now=T0 + dt.timedelta(minutes=2)) == 1
    assert gpu_history.sample(gpu_host, now=T0 + dt.timedelta(hours=1)) == 1

    first = GPUHour.objects.get(host=gpu_host, gpu_index=0, hour=T0.replace(minute=0))
    assert first.samples == 3
    assert first.utilization_sum == 97 + 97 + 12 and first.utilization_max == 97
    assert first.memory_used_sum_mib == 78431 * 2 + 1873 and first.temperature_max == 63
    assert GPUHour.objects.filter(hour=T0.replace(minute=0)).count() == 8
    assert GPUHour.objects.get(gpu_index=0, hour=T0.replace(minute=0) + dt.timedelta(hours=1)).samples == 1
    # The live figures follow the last sample.
    gpu = GPU.objects.get(host=gpu_host, index=0)
    assert (gpu.utilization_pct, gpu.memory_used_mib, gpu.temperature_c) == (12, 1873, 45)

    data = gpu_history.series(gpu_host, now=T0 + dt.timedelta(hours=1))
    assert data["labels"] == ["12-01 10:00", "12-01 11:00"]
    util0 = next(d for d in data["datasets"] if d["label"] == "GPU 0 %")
    assert util0["data"] == [round((97 + 97 + 12) / 3, 1), 12.0]


def test_the_per_minute_task_samples_every_confirmed_host_and_prunes_after_30_days(gpu_host, ssh_target):
    ssh_target.use_gpus("nvidia_smi_rtx4090")
    inventory.refresh(gpu_host)
    now = dt.datetime.now(dt.UTC)
    old = GPUHour.objects.create(host=gpu_host, gpu_index=0, hour=now - dt.timedelta(days=31), samples=1)
    kept = GPUHour.objects.create(host=gpu_host, gpu_index=0, hour=now - dt.timedelta(days=29), samples=1)
    before = sum(GPUHour.objects.filter(hour__gte=now - dt.timedelta(hours=2)).values_list("samples", flat=True))
    tasks.sample_gpus()
    after = sum(GPUHour.objects.filter(hour__gte=now - dt.timedelta(hours=2)).values_list("samples", flat=True))
    assert after == before + 1  # one GPU, one sample
    assert not GPUHour.objects.filter(pk=old.pk).exists() and GPUHour.objects.filter(pk=kept.pk).exists()


def test_the_host_page_charts_the_history_with_the_vendored_chart_code(admin_client, gpu_host, ssh_target):
    page = admin_client.get(reverse("host_detail", args=[gpu_host.pk])).content.decode()
    assert 'id="gpu-history-empty"' in page
    ssh_target.use_gpus("nvidia_smi_rtx4090")
    gpu_history.sample(gpu_host)
    page = admin_client.get(reverse("host_detail", args=[gpu_host.pk])).content.decode()
    assert 'id="gpu-history-chart"' in page and 'id="gpu-history-data"' in page
    assert "/static/vendor/chart-4.6.1.umd.min.js" in page and "/static/hosts/gpu-history.js" in page
    assert "https://" not in page.split('id="gpu-history-chart"')[1].split("</script>")[0]  # no CDN


def test_gpu_gauges_for_prometheus(gpu_host, ssh_target):
    ssh_target.use_gpus("nvidia_smi_8xh100")
    inventory.refresh(gpu_host)
    registry = CollectorRegistry()
    registry.register(GPUCollector())
    text = generate_latest(registry).decode()
    assert 'portal_gpu_utilization_percent{gpu="0",host="gpu-box"} 97.0' in text
    samples = {
        (s.name, s.labels["gpu"]): s.value for family in text_string_to_metric_families(text) for s in family.samples
    }
    assert samples[("portal_gpu_memory_used_bytes", "1")] == 78431 * 1024**2
    assert 'portal_gpu_temperature_celsius{gpu="2",host="gpu-box"} 66.0' in text
    GPU.objects.filter(index=2).update(stale=True)
    assert 'gpu="2"' not in generate_latest(registry).decode()
