"""A run's page stays under a fixed size whatever the run holds.

The run is built with SQL (generate_series): megabytes of input, output and
error, thousands of 20 KB journal entries, hundreds of signals and children.
PostgreSQL cuts every value before the admin reads it, and the journal is shown
a page at a time.
"""

import re

import pytest

from tests.admin.test_admin_pages import run_url
from tests.helpers import sql

pytestmark = pytest.mark.django_db(transaction=True)

RUN = "a-very-large-run"
STEPS = 3000
# Every value below is cut to a few thousand characters; the page's own markup is a few tens of KB.
PAGE_BOUND = 400_000


@pytest.fixture
def large_run(transactional_db):
    sql(
        """INSERT INTO durable_run (run_id, name, status, attempts, retry_policy, input, output, error, error_type)
           VALUES (%(run)s, 'tests.noop', 'failed', 3, '{}',
                   jsonb_build_object('blob', repeat('i', 1000000)), jsonb_build_object('blob', repeat('o', 1000000)),
                   'Traceback (most recent call last):' || repeat(E'\\n  File "deep.py", line 1, in f', 100000)
                       || E'\\nValueError: the end of a 3 MB error',
                   'builtins.ValueError')""",
        {"run": RUN},
    )
    sql(
        """INSERT INTO durable_step (run_id, step_id, result, created_at)
           SELECT %(run)s, 'v1:step-' || lpad(i::text, 4, '0') || ':0', to_jsonb(repeat('r', 20000)),
                  now() + make_interval(secs => i)
           FROM generate_series(1, %(steps)s) i""",
        {"run": RUN, "steps": STEPS},
    )
    sql(
        """INSERT INTO durable_signal (run_id, signal, occurrence, value)
           SELECT %(run)s, 'note', i, to_jsonb(repeat('s', 20000)) FROM generate_series(0, 299) i""",
        {"run": RUN},
    )
    sql(
        """INSERT INTO durable_run (run_id, name, status, retry_policy, parent_run_id)
           SELECT 'child-' || i, 'tests.noop', 'cancelled', '{}', %(run)s FROM generate_series(1, 300) i""",
        {"run": RUN},
    )
    assert sql("SELECT length(error) FROM durable_run WHERE run_id = %s", [RUN])[0][0] > 3_000_000
    return RUN


def journal_step_ids(html: str) -> list[str]:
    return re.findall(r'<tr class="durable-step" data-step-id="([^"]+)"', html)


def test_the_page_of_a_huge_run_is_bounded_and_says_what_it_cut(large_run, admin_client):
    response = admin_client.get(run_url(large_run))
    assert response.status_code == 200
    assert len(response.content) < PAGE_BOUND
    html = response.content.decode()
    # Input and output: their beginning, and how much more the record holds.
    for section in ("durable-input", "durable-output"):
        shown = html[html.index(f'id="{section}"') :]
        shown = shown[: shown.index("</fieldset>")]
        assert re.search(r"… cut here: [\d,]+ more characters", shown), section
    # The error: its beginning and its end (the exception), with the middle cut.
    error = html[html.index('id="durable-error"') :]
    error = error[: error.index("</fieldset>")]
    assert "Traceback (most recent call last):" in error and "ValueError: the end of a 3 MB error" in error
    assert re.search(r"… [\d,]+ characters cut here …", error)
    # The journal: one page of entries, each result cut, and a way to the rest.
    assert journal_step_ids(html) == [f"v1:step-{i:04}:0" for i in range(1, 51)]
    assert f"Entries 1–50 of {STEPS}." in html  # noqa: RUF001 - the page prints an en dash
    assert "?journal_page=2#durable-journal" in html
    # Signals and children: the first ones, and a note that there are more.
    assert html.count("<tr><td><code>note</code>") == 50 and "Only the first 50 signals are shown." in html
    assert html.count('<li><a href="/admin/durable_django/run/child-') == 50 and "all children…" in html
    # The large values were never read whole into the web process.
    assert {"input", "output", "error"} <= response.context["original"].get_deferred_fields()


def test_the_journal_pages_reach_every_entry(large_run, admin_client):
    last = admin_client.get(run_url(large_run), {"journal_page": "60"}).content.decode()
    assert journal_step_ids(last) == [f"v1:step-{i:04}:0" for i in range(2951, 3001)]
    assert f"Entries 2951–3000 of {STEPS}." in last  # noqa: RUF001 - the page prints an en dash
    assert "?journal_page=59#durable-journal" in last
    # A page number that is not one shows the first or the last page.
    for number, first in (("0x00", 1), ("\x00", 1), ("-3", 2951), ("99999", 2951)):
        html = admin_client.get(run_url(large_run), {"journal_page": number}).content.decode()
        assert journal_step_ids(html)[0] == f"v1:step-{first:04}:0", number
