from django.db import migrations


class Migration(migrations.Migration):
    """Drop the text_pattern_ops indexes Django adds beside text primary keys.

    They serve LIKE queries nobody runs on run and schedule ids and cost every
    insert on a hot table. Django creates them after a migration's operations
    (deferred SQL), so they are dropped in a migration of their own.
    """

    dependencies = [("durable_django", "0001_initial")]

    operations = [
        migrations.RunSQL(
            sql=r"""
            DO $$
            DECLARE index_name text;
            BEGIN
                FOR index_name IN
                    SELECT indexname FROM pg_indexes
                    WHERE schemaname = current_schema()
                      AND tablename IN ('durable_run', 'durable_schedule')
                      AND indexname LIKE '%\_like'
                LOOP
                    EXECUTE format('DROP INDEX %I', index_name);
                END LOOP;
            END $$;
            """,
            reverse_sql=migrations.RunSQL.noop,
        ),
    ]
