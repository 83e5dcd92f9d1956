"""GPU inventory over SSH: run nvidia-smi, parse its CSV, store one row per GPU.

Parsing is kept apart from SSH so real outputs (tests/fixtures/nvidia_smi_*.csv) are tested as
they are, odd values included: `[N/A]`, `[Not Supported]`, `[Unknown Error]` become None.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext_noop

from portal.i18n import Message

from ..choices import HostStatus
from ..models import GPU, Host
from . import ssh

logger = logging.getLogger(__name__)

GPU_QUERY = [
    "nvidia-smi",
    "--query-gpu=index,uuid,name,memory.total,memory.used,utilization.gpu,temperature.gpu",
    "--format=csv,noheader,nounits",
]
APPS_QUERY = [
    "nvidia-smi",
    "--query-compute-apps=gpu_uuid,pid,process_name,used_memory",
    "--format=csv,noheader,nounits",
]
VERSION_QUERY = ["nvidia-smi", "--version"]
INTERFACES_QUERY = ["ip", "-o", "addr", "show"]
HEADER_QUERY = ["nvidia-smi"]


class InventoryError(ValueError):
    """The GPUs could not be read; `text` says why, stored on the host and read in the reader's language."""

    def __init__(self, text: Message) -> None:
        self.text = text
        super().__init__(text.english)


@dataclass
class GPUInfo:
    index: int
    uuid: str
    name: str
    memory_total_mib: int | None
    memory_used_mib: int | None
    utilization_pct: int | None
    temperature_c: int | None
    processes: list[dict[str, Any]] = field(default_factory=list)


def _value(raw: str) -> str | None:
    raw = raw.strip()
    if not raw or (raw.startswith("[") and raw.endswith("]")) or raw.upper() == "N/A":
        return None
    return raw


def _int(raw: str) -> int | None:
    value = _value(raw)
    if value is None:
        return None
    try:
        return int(float(value.split()[0]))  # "81559", "81559 MiB", "97 %"
    except ValueError:
        return None


def parse_gpus(text: str) -> list[GPUInfo]:
    """Parse `--query-gpu=index,uuid,name,memory.total,memory.used,utilization.gpu,temperature.gpu`."""
    gpus = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 7:
            raise InventoryError(Message(gettext_noop("Unexpected nvidia-smi line: %(line)s"), line=repr(line[:200])))
        # A name never holds a comma in practice, but keep the fixed columns at both ends anyway.
        index, uuid, *name, total, used, util, temp = parts
        idx = _int(index)
        if idx is None:
            raise InventoryError(
                Message(gettext_noop("nvidia-smi listed a GPU without an index: %(line)s"), line=repr(line[:200]))
            )
        gpus.append(
            GPUInfo(
                index=idx,
                uuid=_value(uuid) or "",
                name=_value(", ".join(name)) or "Unknown GPU",
                memory_total_mib=_int(total),
                memory_used_mib=_int(used),
                utilization_pct=_int(util),
                temperature_c=_int(temp),
            )
        )
    return gpus


def parse_apps(text: str) -> list[dict[str, Any]]:
    """Parse `--query-compute-apps=gpu_uuid,pid,process_name,used_memory` (names may hold commas)."""
    apps = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 4:
            continue
        uuid, pid, *name, used = parts
        apps.append({"gpu_uuid": uuid, "pid": _int(pid), "name": _value(", ".join(name)) or "", "used_mib": _int(used)})
    return apps


_DRIVER = re.compile(r"DRIVER\s+version\s*:\s*([\w.]+)|Driver Version:\s*([\w.]+)", re.IGNORECASE)
_CUDA = re.compile(r"CUDA\s+Version\s*:\s*([\w.]+)", re.IGNORECASE)


def parse_versions(text: str) -> tuple[str, str]:
    """(driver, CUDA) from `nvidia-smi --version` or from the plain `nvidia-smi` banner."""
    driver = _DRIVER.search(text)
    cuda = _CUDA.search(text)
    return (
        (driver.group(1) or driver.group(2)) if driver else "",
        cuda.group(1) if cuda else "",
    )


def attach_processes(gpus: list[GPUInfo], apps: list[dict[str, Any]]) -> None:
    by_uuid = {g.uuid: g for g in gpus}
    for app in apps:
        gpu = by_uuid.get(app["gpu_uuid"])
        if gpu is not None:
            gpu.processes.append({"pid": app["pid"], "name": app["name"], "used_mib": app["used_mib"]})


def parse_interfaces(text: str) -> list[dict[str, Any]]:
    """`ip -o addr show` → [{"name": "eth0", "addresses": ["10.0.0.5/24", …]}, …] in the order seen."""
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[2] in ("inet", "inet6"):
            name = parts[1].split("@", 1)[0]
            found.setdefault(name, []).append(parts[3])
    return [{"name": name, "addresses": addresses} for name, addresses in found.items()]


@dataclass
class Inventory:
    gpus: list[GPUInfo]
    driver_version: str
    cuda_version: str
    interfaces: list[dict[str, Any]] = field(default_factory=list)


# The queries in order, so a caller can ask them with others in one session (`from_results`).
QUERIES: list[list[str] | str] = [GPU_QUERY, APPS_QUERY, VERSION_QUERY, INTERFACES_QUERY]


def collect(remote: ssh.Remote) -> Inventory:
    """Run the queries over an open connection, in one session. Raises `InventoryError` when
    there is no driver."""
    return from_results(remote, *remote.run_many(QUERIES))


def from_results(
    remote: ssh.Remote, result: ssh.Result, apps: ssh.Result, version: ssh.Result, interfaces: ssh.Result
) -> Inventory:
    """The inventory from the QUERIES' results (an old driver's banner is asked for on `remote`)."""
    if result.exit_status == 127 or "command not found" in result.stderr:
        raise InventoryError(Message(gettext_noop("nvidia-smi was not found on the host: install the NVIDIA driver.")))
    if not result.ok:
        detail = (result.stderr or result.stdout).strip().splitlines()
        raise InventoryError(
            Message(
                gettext_noop("nvidia-smi failed (exit %(code)s): %(detail)s"),
                code=result.exit_status,
                detail=detail[0][:200] if detail else Message(gettext_noop("no output")),
            )
        )
    gpus = parse_gpus(result.stdout)
    if apps.ok:
        attach_processes(gpus, parse_apps(apps.stdout))
    driver, cuda = parse_versions(version.stdout)
    if not (driver and cuda):  # an old driver: its banner says what --version does not
        banner = remote.run(HEADER_QUERY)
        driver2, cuda2 = parse_versions(banner.stdout)
        driver, cuda = driver or driver2, cuda or cuda2
    # No `ip` (a minimal image): no interfaces offered, the admin types the address instead.
    return Inventory(
        gpus=gpus,
        driver_version=driver,
        cuda_version=cuda,
        interfaces=parse_interfaces(interfaces.stdout) if interfaces.ok else [],
    )


GPU_FIELDS = ("uuid", "name", "memory_total_mib", "memory_used_mib", "utilization_pct", "temperature_c", "processes")


@transaction.atomic
def store(host: Host, inventory: Inventory) -> dict[int, GPU]:
    """Bring the host's GPU rows to what was seen, writing only the rows that differ (a placement
    stores the inventory it just took on every cold start: an unchanged GPU costs no write); GPUs
    that vanished are deleted. Returns the rows now stored, by index."""
    rows = {g.index: g for g in GPU.objects.filter(host=host)}
    added: list[GPU] = []
    changed: list[GPU] = []
    now = timezone.now()
    for info in inventory.gpus:
        values: dict[str, Any] = {name: getattr(info, name) for name in GPU_FIELDS}
        values["stale"] = False
        row = rows.get(info.index)
        if row is None:
            rows[info.index] = row = GPU(host=host, index=info.index, **values)
            added.append(row)
        elif any(getattr(row, name) != value for name, value in values.items()):
            for name, value in values.items():
                setattr(row, name, value)
            row.updated = now  # bulk_update does not run auto_now
            changed.append(row)
    fields = [*GPU_FIELDS, "stale", "updated"]
    if added:  # another worker's inventory may insert the same GPU meanwhile: theirs is updated
        GPU.objects.bulk_create(added, update_conflicts=True, unique_fields=["host", "index"], update_fields=fields)
    if changed:
        GPU.objects.bulk_update(changed, fields)
    seen = {info.index for info in inventory.gpus}
    if gone := set(rows) - seen:
        GPU.objects.filter(host=host, index__in=gone).delete()
        rows = {index: row for index, row in rows.items() if index in seen}
    from .. import gpu_history

    gpu_history.record(host, inventory.gpus)  # every inventory is a sample of the history too
    if inventory.gpus:
        status, message = HostStatus.ONLINE, Message(gettext_noop("%(count)s GPU(s) seen."), count=len(inventory.gpus))
    else:
        status, message = HostStatus.NO_DRIVER, Message(gettext_noop("nvidia-smi answered but lists no GPU."))
    Host.objects.filter(pk=host.pk).update(
        status=status,
        **message.columns("status_message", 300),
        last_checked=timezone.now(),
        driver_version=inventory.driver_version[:50],
        cuda_version=inventory.cuda_version[:50],
        network_interfaces=inventory.interfaces,
    )
    return rows


def mark_stale(host: Host) -> int:
    """The inventory failed: keep the rows (an admin wants to see what was there) but make them
    unselectable until an inventory sees them again."""
    return GPU.objects.filter(host=host, stale=False).update(stale=True)


def refresh(host: Host) -> str:
    """Connect, collect and store. Returns the host's new status; failures land on the host."""
    try:
        with ssh.connect(host) as remote:
            inventory = collect(remote)
    except ssh.SSHError as exc:
        ssh.mark_contact(host, status=exc.status, message=exc.text)
        mark_stale(host)
        return exc.status
    except InventoryError as exc:
        ssh.mark_contact(host, status=HostStatus.NO_DRIVER, message=exc.text)
        mark_stale(host)
        return HostStatus.NO_DRIVER
    store(host, inventory)
    host.refresh_from_db()
    return host.status
