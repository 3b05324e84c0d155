from django.db import migrations


class Migration(migrations.Migration):
    """Django adds a LIKE pattern index beside a text column's index (at the end of the migration that
    creates it, so it is dropped in the next); a replay divergence is looked up by its whole run id."""

    dependencies = [
        ("durable_django", "0021_schedule_policies"),
    ]

    operations = [
        migrations.RunSQL(
            "DROP INDEX IF EXISTS durable_replay_divergence_run_id_b30ea51b_like", reverse_sql=migrations.RunSQL.noop
        ),
    ]
