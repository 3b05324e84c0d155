"""The suite's flush after a transactional test (tests/flush.py) leaves what Django's own flush leaves."""

import pytest
from django.contrib.auth.models import Permission, User
from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command
from django.db import connection

from durable_django import api
from durable_django.testing import run_until_idle

pytestmark = pytest.mark.django_db(transaction=True)

MADE_BY_POST_MIGRATE = ("django_content_type", "auth_permission")


def flush():
    """As TransactionTestCase flushes after each test."""
    call_command("flush", verbosity=0, interactive=False, reset_sequences=False, inhibit_post_migrate=False)


def rows_left() -> dict[str, int]:
    counts = {}
    with connection.cursor() as cursor:
        for table in connection.introspection.django_table_names(only_existing=True, include_views=False):
            cursor.execute(f"SELECT count(*) FROM {connection.ops.quote_name(table)}")
            counts[table] = cursor.fetchone()[0]
    return {table: count for table, count in counts.items() if count and table not in MADE_BY_POST_MIGRATE}


def permissions() -> set[tuple]:
    return set(Permission.objects.values_list("id", "content_type__app_label", "codename"))


def test_a_flush_empties_every_table_and_keeps_only_what_post_migrate_made():
    made = permissions()
    run = api.enqueue("tests.parent", {"child": {"wait_signal": True}})
    run_until_idle(functions=["tests.parent", "tests.child"])
    api.emit_signal(api.list_runs(name="tests.child").items[0].run_id, "note", {})
    User.objects.create_user("someone").user_permissions.set(Permission.objects.all()[:2])
    assert {"durable_run", "durable_step", "durable_signal", "auth_user", "auth_user_user_permissions"} <= set(
        rows_left()
    )

    flush()
    assert rows_left() == {}
    assert permissions() == made  # kept as they were, ids and all
    assert api.get_run(run.run_id) is None


def test_a_permission_a_test_added_is_gone_after_the_flush_and_the_others_are_made_again():
    made = {(label, codename) for _, label, codename in permissions()}
    users = ContentType.objects.get_for_model(User)
    Permission.objects.create(codename="extra", name="Extra", content_type=users)
    ContentType.objects.create(app_label="elsewhere", model="thing")

    flush()
    assert {(label, codename) for _, label, codename in permissions()} == made
    assert not ContentType.objects.filter(app_label="elsewhere").exists()
    assert rows_left() == {}
