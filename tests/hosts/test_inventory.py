"""nvidia-smi parsing on real outputs, and the inventory over SSH with a fake nvidia-smi."""

from __future__ import annotations

from pathlib import Path

import pytest

from hosts.choices import HostStatus
from hosts.models import GPU
from hosts.remote import inventory

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def read(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_it_parses_eight_h100s_with_their_processes():
    gpus = inventory.parse_gpus(read("nvidia_smi_8xh100.csv"))
    inventory.attach_processes(gpus, inventory.parse_apps(read("nvidia_smi_apps_8xh100.csv")))
    assert [g.index for g in gpus] == list(range(8))
    assert {g.name for g in gpus} == {"NVIDIA H100 80GB HBM3"}
    assert gpus[0].memory_total_mib == 81559 and gpus[0].memory_used_mib == 78431
    assert gpus[0].processes == [{"pid": 48213, "name": "/usr/bin/python3", "used_mib": 78420}]
    assert gpus[7].processes == [] and gpus[7].utilization_pct == 0


def test_it_parses_consumer_cards():
    (rtx4090,) = inventory.parse_gpus(read("nvidia_smi_rtx4090.csv"))
    (rtx3080,) = inventory.parse_gpus(read("nvidia_smi_rtx3080ti.csv"))
    assert (rtx4090.name, rtx4090.memory_total_mib, rtx4090.temperature_c) == ("NVIDIA GeForce RTX 4090", 24564, 45)
    assert (rtx3080.name, rtx3080.memory_total_mib, rtx3080.memory_used_mib) == (
        "NVIDIA GeForce RTX 3080 Ti",
        12288,
        287,
    )


def test_odd_values_become_unknown_instead_of_breaking_the_row():
    a100, t4, gtx = inventory.parse_gpus(read("nvidia_smi_odd.csv"))
    assert (a100.utilization_pct, a100.temperature_c) == (None, None)
    assert (t4.memory_used_mib, t4.utilization_pct, t4.temperature_c) == (None, None, 52)
    assert gtx.memory_total_mib is None and gtx.temperature_c == -3
    (app,) = inventory.parse_apps(read("nvidia_smi_apps_odd.csv"))
    assert app == {"gpu_uuid": a100.uuid, "pid": 777, "name": "", "used_mib": None}


def test_it_reads_driver_and_cuda_from_either_output():
    assert inventory.parse_versions(read("nvidia_smi_version.txt")) == ("550.54.15", "12.4")
    assert inventory.parse_versions(read("nvidia_smi_header.txt")) == ("535.104.05", "12.2")


def test_refresh_over_ssh_stores_gpus_and_marks_the_host_online(gpu_host, ssh_target):
    ssh_target.use_gpus("nvidia_smi_8xh100", apps="nvidia_smi_apps_8xh100")
    assert inventory.refresh(gpu_host) == HostStatus.ONLINE
    gpu_host.refresh_from_db()
    assert (gpu_host.driver_version, gpu_host.cuda_version) == ("550.54.15", "12.4")
    assert GPU.objects.filter(host=gpu_host).count() == 8
    assert GPU.objects.get(host=gpu_host, index=0).memory_free_mib == 81559 - 78431

    ssh_target.use_gpus("nvidia_smi_rtx4090", apps="nvidia_smi_apps_rtx4090")
    inventory.refresh(gpu_host)
    (gpu,) = GPU.objects.filter(host=gpu_host)
    assert gpu.name == "NVIDIA GeForce RTX 4090"
    assert [p["name"] for p in gpu.processes] == ["/usr/lib/xorg/Xorg", "llama-server"]


def test_a_host_without_driver_says_so(gpu_host, ssh_target):
    ssh_target.use_gpus(None)
    assert inventory.refresh(gpu_host) == HostStatus.NO_DRIVER
    gpu_host.refresh_from_db()
    assert "couldn't communicate with the NVIDIA driver" in gpu_host.status_message


def test_a_broken_driver_is_said_in_the_admins_language(gpu_host, ssh_target, admin_client):
    """The host's status message of a failed nvidia-smi was stored as English text only."""
    ssh_target.use_gpus(None)
    assert inventory.refresh(gpu_host) == HostStatus.NO_DRIVER
    body = admin_client.get(f"/api/hosts/{gpu_host.pk}/", HTTP_ACCEPT_LANGUAGE="zh-hans").json()
    assert body["status_message"].startswith("nvidia-smi 执行失败（退出码 ")
    assert "couldn't communicate with the NVIDIA driver" in body["status_message"]  # nvidia-smi's own words
    assert body["status_message_code"] == "nvidia-smi failed (exit %(code)s): %(detail)s"


def test_a_host_that_lost_nvidia_smi_keeps_its_gpus_as_stale_and_unselectable(gpu_host, ssh_target):
    from django.core.exceptions import ValidationError

    from hosts.deployments import services
    from hosts.deployments.forms import DeploymentForm

    assert inventory.refresh(gpu_host) == HostStatus.ONLINE
    assert not gpu_host.gpus.get().stale
    ssh_target.use_gpus(None)  # the driver broke after an update
    assert inventory.refresh(gpu_host) == HostStatus.NO_DRIVER
    gpu_host.refresh_from_db()
    gpu = gpu_host.gpus.get()
    assert gpu.stale and gpu.name == "NVIDIA GeForce RTX 3080 Ti"  # kept, so the admin sees what was there
    spec = {
        "host": gpu_host,
        "backend": "llamacpp",
        "model_path": "/models/m-Q4_K_M.gguf",
        "served_model_name": "m",
        "gpu_indices": [0],
        "port": 8080,
        "options": {},
        "extra_args": [],
    }
    with pytest.raises(ValidationError) as err:
        services.clean_deployment(**spec)
    assert "GPU 0 of gpu-box is stale: the last inventory failed" in err.value.message_dict["gpu_indices"][0]
    # A deployment that already has GPU 0 can still be edited (its auto restart turned off while
    # the host is down): the GPUs it keeps are not checked again; a launch checks them.
    from hosts.models import Deployment

    kept = Deployment.objects.create(
        host=gpu_host, name="m", backend="llamacpp", model_path="/models/m-Q4_K_M.gguf", gpu_indices=[0], port=8080
    )
    assert services.clean_deployment(**spec, instance=kept)["gpu_indices"] == [0]
    form = DeploymentForm(host=gpu_host)
    assert form.fields["gpu_indices"].choices == [] and "GPU 0 not offered" in form.fields["gpu_indices"].help_text
    ssh_target.use_gpus("nvidia_smi_rtx3080ti")
    assert inventory.refresh(gpu_host) == HostStatus.ONLINE
    assert not gpu_host.gpus.get().stale  # seen again: selectable again


def test_network_interfaces_are_parsed_from_ip_addr():
    out = (
        "1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever\n"
        "1: lo    inet6 ::1/128 scope host \\       valid_lft forever preferred_lft forever\n"
        "4: eth0    inet 10.0.0.5/24 brd 10.0.0.255 scope global eth0\\       valid_lft forever\n"
        "7: ib0@if6    inet 192.168.100.2/24 scope global ib0\\       valid_lft forever\n"
    )
    assert inventory.parse_interfaces(out) == [
        {"name": "lo", "addresses": ["127.0.0.1/8", "::1/128"]},
        {"name": "eth0", "addresses": ["10.0.0.5/24"]},
        {"name": "ib0", "addresses": ["192.168.100.2/24"]},
    ]


@pytest.mark.django_db
def test_storing_the_same_inventory_again_writes_no_gpu_row_and_a_change_only_its_row():
    """A placement stores the inventory it just took on every cold start: GPUs that did not change
    cost no write; one that did is the only one written; a new one is added, a vanished one deleted."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from hosts.models import Host

    host = Host.objects.create(name="gpu-eight", address="127.0.0.1", username="gpu", private_key="unused")
    gpus = inventory.parse_gpus(read("nvidia_smi_8xh100.csv"))
    seen = inventory.Inventory(gpus=gpus, driver_version="550.54.15", cuda_version="12.4")
    inventory.store(host, seen)
    first = {g.index: (g.pk, g.updated) for g in GPU.objects.filter(host=host)}

    def gpu_writes(queries: CaptureQueriesContext) -> list[str]:
        sql = [q["sql"] for q in queries.captured_queries]
        return [q for q in sql if '"hosts_gpu"' in q and not q.startswith("SELECT")]

    with CaptureQueriesContext(connection) as again:
        rows = inventory.store(host, seen)
    assert gpu_writes(again) == []
    assert {g.index: (g.pk, g.updated) for g in GPU.objects.filter(host=host)} == first
    assert sorted(rows) == list(range(8)) and rows[0].memory_used_mib == 78431

    gpus[3].memory_used_mib = 1000
    del gpus[7]
    gpus.append(
        inventory.GPUInfo(
            index=9,
            uuid="GPU-new",
            name="NVIDIA H100",
            memory_total_mib=81559,
            memory_used_mib=0,
            utilization_pct=0,
            temperature_c=30,
        )
    )
    with CaptureQueriesContext(connection) as moved:
        rows = inventory.store(host, seen)
    assert len(gpu_writes(moved)) == 3  # one update, one insert, one delete
    stored = {g.index: g for g in GPU.objects.filter(host=host)}
    assert sorted(stored) == sorted(rows) == [0, 1, 2, 3, 4, 5, 6, 9]
    assert stored[3].memory_used_mib == 1000 and stored[3].updated > first[3][1]
    assert all(stored[i].updated == first[i][1] for i in (0, 1, 2, 4, 5, 6))
