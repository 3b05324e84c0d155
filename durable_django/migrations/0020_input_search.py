from django.db import migrations


class Migration(migrations.Migration):
    """An index for search by input (jsonb containment), built without locking out enqueues.

    In SQL rather than a GinIndex in the model's Meta: Django 6.1 refuses a GinIndex unless
    django.contrib.postgres is installed, which durable-django does not ask of a project.
    """

    atomic = False

    dependencies = [
        ("durable_django", "0019_forks"),
    ]

    operations = [
        migrations.RunSQL(
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS durable_run_input ON durable_run USING gin (input jsonb_path_ops)",
            reverse_sql="DROP INDEX CONCURRENTLY IF EXISTS durable_run_input",
        ),
    ]
