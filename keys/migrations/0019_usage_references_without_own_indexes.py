"""The usage records' four references lose their single-column indexes: each leads one of the
(reference, created) indexes, which serve the same lookups. The indexes are dropped by name, and the
fields' state changed apart: Django's own AlterField would drop and re-add (and so re-validate over
every record) each foreign key constraint on PostgreSQL, and copy the whole table four times on SQLite."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

# (field, the index Django named for it when it was created: the same name on every backend)
DROPPED = (
    ("channel", "keys_usagerecord_channel_id_4cc679ce"),
    ("key", "keys_usagerecord_key_id_b0f7e216"),
    ("team", "keys_usagerecord_team_id_15931b18"),
    ("user", "keys_usagerecord_user_id_c6d302be"),
)


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0004_user_language"),
        ("channels", "0009_probe_error_message_code"),
        ("keys", "0018_usage_indexes_for_model_and_channel_days"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    f'DROP INDEX IF EXISTS "{index}"',
                    reverse_sql=f'CREATE INDEX IF NOT EXISTS "{index}" ON "keys_usagerecord" ("{field}_id")',
                )
                for field, index in DROPPED
            ],
            state_operations=[
                migrations.AlterField(
                    model_name="usagerecord",
                    name="channel",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="usage",
                        to="channels.channel",
                    ),
                ),
                migrations.AlterField(
                    model_name="usagerecord",
                    name="key",
                    field=models.ForeignKey(
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="usage",
                        to="keys.key",
                    ),
                ),
                migrations.AlterField(
                    model_name="usagerecord",
                    name="team",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="usage",
                        to="accounts.team",
                    ),
                ),
                migrations.AlterField(
                    model_name="usagerecord",
                    name="user",
                    field=models.ForeignKey(
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="usage",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
        )
    ]
