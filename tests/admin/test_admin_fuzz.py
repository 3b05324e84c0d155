"""Every admin form, fuzzed through Django's test client as a superuser.

The property, for each form: the page answers (never a 500, which the test client
raises as the view's exception) and either shows a form error (or the listing's
"invalid lookup" notice) having written nothing, or succeeds and the value read
back is the one sent. Bodies are sent as raw UTF-8 bytes (a lone surrogate
encoded as a browser never would), decoded by Django as any request is.
"""

import json
from urllib.parse import parse_qsl, quote

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from durable_django import api
from durable_django.api import schedules as schedules_api
from durable_django.models import Schedule
from tests.admin.conftest import TENANT
from tests.helpers import sql
from tests.strategies import fuzz, integers, json_trees, texts

pytestmark = pytest.mark.django_db(transaction=True)

RUNS = "/admin/durable_django/run/"
SCHEDULES = "/admin/durable_django/schedule/"


def dumped(value) -> str:
    """JSON text as an operator may paste it: lone surrogates and NUL as escapes, NaN as the bare word."""
    return json.dumps(value, ensure_ascii=True, allow_nan=True)


# JSON text: well-formed values of every kind, and what breaks a parser or PostgreSQL.
json_texts = st.one_of(
    json_trees.map(dumped),
    st.sampled_from(
        [
            "1" * 5_000,
            "-" + "9" * 5_000,
            "[" * 100_000,
            "[" * 100_000 + "]" * 100_000,
            '{"a":' * 600 + "1" + "}" * 600,
            '"\\ud800"',
            '{"\\udfff": 1}',
            '"\\u0000"',
            "NaN",
            '{"a": Infinity}',
            "1e999",
            "",
            "{nope",
        ]
    ),
    texts,
)
# An integer as typed: small, at and past PostgreSQL's integer, thousands of digits, or not a number at all.
integer_texts = st.one_of(integers.map(str), st.just("9" * 5_000), st.just("2147483648"), texts)


def form_body(fields: dict[str, str]) -> str:
    """An urlencoded body of the fields' UTF-8 bytes (a lone surrogate passes as its three bytes)."""
    return "&".join(
        f"{quote(key)}={quote(value.encode('utf-8', 'surrogatepass'), safe='')}" for key, value in fields.items()
    )


def as_received(fields: dict[str, str]) -> dict[str, str]:
    """The fields as Django decodes that body (undecodable bytes become U+FFFD)."""
    return dict(parse_qsl(form_body(fields), keep_blank_values=True, encoding="utf-8", errors="replace"))


def post(client, url: str, fields: dict[str, str]):
    return client.post(url, form_body(fields), content_type="application/x-www-form-urlencoded")


def parsed_json(text: str):
    return None if not text.strip() else json.loads(text)


@pytest.fixture
def target_run(transactional_db):
    return api.enqueue("tests.noop", {"for": "signals"}).run_id


def test_the_signal_form_refuses_what_cannot_be_stored_and_stores_the_rest(target_run, admin_client):
    url = f"{RUNS}{quote(target_run)}/signal/"

    @fuzz(20)
    @given(signal=texts, occurrence=integer_texts, value=json_texts)
    # What was reproduced, always tried: a 5,000-digit number, 100,000 nested brackets, a lone surrogate, an
    # occurrence past integer.
    @example(signal="approval", occurrence="0", value="1" * 5_000)
    @example(signal="approval", occurrence="0", value="[" * 100_000)
    @example(signal="approval", occurrence="0", value='"\\ud800"')
    @example(signal="approval", occurrence="2147483648", value="1")
    @example(signal="s" * 513, occurrence="0", value="1")
    def check(signal, occurrence, value):
        sent = {"confirm": "yes", "signal": signal, "occurrence": occurrence, "value": value}
        response = post(admin_client, url, sent)
        assert response.status_code in (200, 302), response.status_code
        rows = sql("SELECT signal, occurrence, value FROM durable_signal")
        sql("DELETE FROM durable_signal")
        if response.status_code == 200:
            assert response.context["form"].errors, "a page shown again must say what was wrong"
            assert rows == []
            return
        if rows:
            received = as_received(sent)
            expected = (received["signal"].strip(), int(received["occurrence"]), parsed_json(received["value"]))
            [(name, number, stored)] = rows
            assert (name, number, json.loads(stored) if isinstance(stored, str) else stored) == expected

    check()


SCHEDULE_CRONS = st.one_of(st.sampled_from(["* * * * *", "0 3 * * *", "@daily", "61 * * * *"]), texts)
SCHEDULE_ZONES = st.one_of(st.sampled_from(["UTC", "Europe/Berlin", "localtime", "posixrules", "Mars/Olympus"]), texts)


def test_the_schedule_add_form_refuses_what_cannot_be_stored_and_stores_the_rest(admin_client, transactional_db):
    @fuzz(20)
    @given(
        key=st.one_of(texts, st.just("k" * 512), st.just("k" * 513)),
        tenant=st.sampled_from(["", TENANT]),
        cron=SCHEDULE_CRONS,
        tz=SCHEDULE_ZONES,
        value=json_texts,
    )
    @example(key="k", tenant="", cron="* * * * *", tz="UTC", value="1" * 5_000)
    @example(key="k", tenant="", cron="* * * * *", tz="UTC", value="[" * 100_000)
    @example(key="k", tenant="", cron="* * * * *", tz="UTC", value='["\\udfff"]')
    @example(key="k", tenant="", cron="* * * * *", tz="localtime", value="1")
    def check(key, tenant, cron, tz, value):
        sent = {"key": key, "tenant": tenant, "name": "tests.noop", "cron": cron, "tz": tz, "input": value}
        sent["enabled"] = "on"
        response = post(admin_client, f"{SCHEDULES}add/", sent)
        assert response.status_code in (200, 302), response.status_code
        stored = Schedule.objects.count()
        received = as_received(sent)
        schedule = schedules_api.get_schedule(received["key"].strip(), tenant_id=tenant or None) if stored else None
        sql("DELETE FROM durable_schedule")
        if response.status_code == 200:
            assert response.context["adminform"].form.errors
            assert stored == 0
            return
        assert stored == 1 and schedule is not None, "a saved schedule is read back"
        assert (schedule.tz, schedule.input) == (received["tz"].strip(), parsed_json(received["input"]))

    check()


def listed(response) -> bool:
    """The listing, or the admin's redirect to its "invalid lookup" notice."""
    return response.status_code == 200 or (response.status_code == 302 and response.url.endswith("?e=1"))


def test_the_listings_and_a_runs_page_answer_any_search_filter_and_id(admin_client, transactional_db):
    api.enqueue("tests.noop", {"listed": True})

    @fuzz(15)
    @given(
        parameter=st.sampled_from(["q", "function", "held_by", "parent", "tenant", "status", "created_at__gte"]),
        value=texts,
    )
    @example(parameter="function", value="\x00")
    @example(parameter="q", value="\udcff")
    def check(parameter, value):
        query = f"{quote(parameter)}={quote(value.encode('utf-8', 'surrogatepass'), safe='')}"
        assert listed(admin_client.get(f"{RUNS}?{query}"))
        assert listed(admin_client.get(f"{SCHEDULES}?q={quote(value.encode('utf-8', 'surrogatepass'), safe='')}"))
        # A run's page (and its operations) for any id in the URL: shown, or not found.
        for suffix in ("change/", "signal/"):
            page = admin_client.get(f"{RUNS}{quote(value.encode('utf-8', 'surrogatepass'), safe='')}/{suffix}")
            assert page.status_code in (200, 302, 404), (suffix, page.status_code)

    check()
