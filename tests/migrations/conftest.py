import contextlib

import pytest

from tests.migrations.scratch import scratch_database


@pytest.fixture
def fresh_database(django_db_setup, django_db_blocker):
    """Call it for a connection to a new, empty database on the test server; each is dropped at teardown.

    Outside pytest-django's test case on purpose: these connections come and go with the test, and the test
    case admits only the aliases it knew when it started.
    """
    with django_db_blocker.unblock(), contextlib.ExitStack() as stack:
        yield lambda: stack.enter_context(scratch_database())
