"""Create the default beat schedule for the health tasks (idempotent; edits by admins are kept)."""

from django.db import migrations


def create_schedule(apps, schema_editor):
    from channels.health.schedule import ensure_default_schedule

    ensure_default_schedule(apps.get_model("django_celery_beat", "IntervalSchedule"), apps.get_model("django_celery_beat", "PeriodicTask"))


class Migration(migrations.Migration):
    dependencies = [
        ("channels", "0002_initial"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(create_schedule, migrations.RunPython.noop)]
