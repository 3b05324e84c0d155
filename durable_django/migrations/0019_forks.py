from django.db import migrations, models


class Migration(migrations.Migration):
    """A fork records the run and step it was forked from; and the pauses' key loses the text_pattern_ops
    index Django added beside it in 0013 (it serves no query; Django creates it after that migration's
    operations, see 0002)."""

    dependencies = [
        ("durable_django", "0018_pauses"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="forked_from",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.RunSQL("DROP INDEX IF EXISTS durable_pause_key_60584f8d_like", reverse_sql=migrations.RunSQL.noop),
    ]
