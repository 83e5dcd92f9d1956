"""A budget an admin topped up is the admin's (`keys.budgets.services.top_up` marks it since): those
topped up before, still marked as a lead's, are marked now, so the lead cannot remove the cap."""

from django.db import migrations


def mark_topped_up(apps, schema_editor):
    Budget = apps.get_model("keys", "Budget")
    Budget.objects.filter(topup_until__isnull=False, set_by_admin=False).update(set_by_admin=True)


class Migration(migrations.Migration):
    dependencies = [
        ("keys", "0020_budget_set_by_admin"),
    ]

    operations = [
        migrations.RunPython(mark_topped_up, migrations.RunPython.noop),
    ]
