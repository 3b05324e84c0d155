from django.db import migrations, models


class Migration(migrations.Migration):
    """Claim indexes per queue and per tenant: a worker bound to queues or to a tenant reads its own runs in
    claim order instead of reading past every pending run of the queues and tenants it does not serve.

    No field changes. On a large table, build the indexes by hand with CREATE INDEX CONCURRENTLY first
    (docs/guide.md, "Large tables").
    """

    dependencies = [
        ("durable_django", "0009_storage_tuning"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                models.F("queue"),
                models.OrderBy(models.F("priority"), descending=True),
                models.F("created_at"),
                condition=models.Q(("held_by__isnull", True), ("status", "pending")),
                name="durable_run_claim_queue",
            ),
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                models.F("tenant_id"),
                models.OrderBy(models.F("priority"), descending=True),
                models.F("created_at"),
                condition=models.Q(("held_by__isnull", True), ("status", "pending"), ("tenant_id__isnull", False)),
                name="durable_run_claim_tenant",
            ),
        ),
    ]
