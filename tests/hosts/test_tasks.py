"""Periodic inventory schedule and the inventory task."""

from __future__ import annotations

from django_celery_beat.models import PeriodicTask

from hosts import tasks
from hosts.choices import HostStatus
from hosts.models import GPU, Host


def test_migrate_registers_the_default_schedule(db):
    # The test database was built by `migrate`, whose post_migrate signal registers the schedule.
    assert PeriodicTask.objects.filter(task=tasks.INVENTORY_TASK, interval__every=5).exists()


def test_default_schedule_is_registered_once(db):
    tasks.ensure_schedule()
    tasks.ensure_schedule()
    inventory = PeriodicTask.objects.get(task=tasks.INVENTORY_TASK)
    assert (inventory.interval.every, inventory.interval.period) == (5, "minutes")
    assert PeriodicTask.objects.filter(task=tasks.RECOVER_TASK).count() == 1


def test_an_admins_change_to_the_schedule_survives(db):
    tasks.ensure_schedule()
    PeriodicTask.objects.filter(task=tasks.INVENTORY_TASK).update(enabled=False)
    tasks.ensure_schedule()
    assert PeriodicTask.objects.get(task=tasks.INVENTORY_TASK).enabled is False


def test_periodic_inventory_skips_hosts_whose_key_is_not_confirmed(gpu_host, ssh_target):
    unconfirmed = Host.objects.create(
        name="new-box", address="127.0.0.1", ssh_port=ssh_target.port, username=ssh_target.username, private_key="x"
    )
    tasks.refresh_inventory()
    gpu_host.refresh_from_db()
    unconfirmed.refresh_from_db()
    assert gpu_host.status == HostStatus.ONLINE and GPU.objects.filter(host=gpu_host).count() == 1
    assert unconfirmed.status == HostStatus.UNKNOWN


def test_refresh_now_of_a_new_host_records_the_key_to_confirm(db, ssh_target):
    host = Host.objects.create(
        name="new-box",
        address="127.0.0.1",
        ssh_port=ssh_target.port,
        username=ssh_target.username,
        private_key=ssh_target.client_private_key,
    )
    tasks.refresh_inventory(host.pk)
    host.refresh_from_db()
    assert host.status == HostStatus.HOST_KEY_UNCONFIRMED
    assert host.seen_host_key_fingerprint == ssh_target.host_key_fingerprint
