"""System checks for LISTEN_DATABASE, READ_DATABASE and PREPARED_STATEMENTS (no database needed).

tests/settings.py has "pooled", an alias with DISABLE_SERVER_SIDE_CURSORS (the sign of a transaction
pooler), and "direct" and "replica", aliases without it.
"""

import pytest

from durable_django.checks import check_deployment, check_settings


@pytest.fixture
def durable(settings):
    def configure(**keys):
        settings.DURABLE = {**{k: v for k, v in settings.DURABLE.items() if k != "LISTEN_DATABASE"}, **keys}

    return configure


def ids():
    """What the deployment checks report, and the settings rules (a value of the wrong kind is theirs)."""
    return sorted(message.id for message in [*check_deployment(), *check_settings()])


def test_the_test_settings_pass():
    assert check_deployment() == []


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        ({"LISTEN_DATABASE": "nowhere"}, ["durable_django.E201"]),
        ({"READ_DATABASE": "nowhere"}, ["durable_django.E203"]),
        ({"LISTEN_DATABASE": "pooled"}, ["durable_django.W202"]),
        ({"LISTEN_DATABASE": "direct", "READ_DATABASE": "replica"}, []),
        ({"PREPARED_STATEMENTS": "sometimes"}, ["durable_django.E204"]),
        ({"PREPARED_STATEMENTS": True, "DATABASE": "pooled", "LISTEN_DATABASE": "direct"}, ["durable_django.W205"]),
        ({"PREPARED_STATEMENTS": True, "DATABASE": "direct", "READ_DATABASE": "pooled"}, ["durable_django.W205"]),
        ({"PREPARED_STATEMENTS": "auto", "DATABASE": "pooled", "LISTEN_DATABASE": "direct"}, []),
        ({"PREPARED_STATEMENTS": False, "DATABASE": "pooled"}, []),
    ],
)
def test_each_risky_or_broken_setting_is_reported(durable, keys, expected):
    durable(**keys)
    assert ids() == expected


def test_an_alias_that_is_not_postgresql_is_refused(durable, monkeypatch, settings):
    monkeypatch.setitem(settings.DATABASES["replica"], "ENGINE", "django.db.backends.sqlite3")
    durable(READ_DATABASE="replica", LISTEN_DATABASE="replica")
    messages = check_deployment()
    assert sorted(message.id for message in messages) == ["durable_django.E201", "durable_django.E203"]
    assert all("sqlite3, not PostgreSQL" in message.msg for message in messages)


def test_pgbouncers_port_without_disable_server_side_cursors_is_a_warning(durable, monkeypatch, settings):
    monkeypatch.setitem(settings.DATABASES["replica"], "PORT", 6432)
    durable(READ_DATABASE="replica")
    assert ids() == ["durable_django.W206"]
    monkeypatch.setitem(settings.DATABASES["replica"], "DISABLE_SERVER_SIDE_CURSORS", True)
    assert ids() == []
    durable(READ_DATABASE="replica", PREPARED_STATEMENTS=False)
    monkeypatch.setitem(settings.DATABASES["replica"], "DISABLE_SERVER_SIDE_CURSORS", False)
    assert ids() == []
