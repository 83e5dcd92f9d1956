"""Budgets remember whether an admin set them (a team lead may then neither change nor remove
them). Nothing recorded who set the budgets there are, so they count as an admin's: an admin can
still change any of them, and no lead keeps a way around a cap an admin may have put there."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("keys", "0019_usage_references_without_own_indexes"),
    ]

    operations = [
        migrations.AddField(
            model_name="budget",
            name="set_by_admin",
            field=models.BooleanField(default=True),
        ),
        migrations.AlterField(
            model_name="budget",
            name="set_by_admin",
            field=models.BooleanField(
                default=False, help_text="An admin set this budget: a team lead can neither change nor remove it."
            ),
        ),
    ]
