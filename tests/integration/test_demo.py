"""The one-command demo, run as a user runs it, then checked against the database it used.

The demo honours ``DATABASE_URL``. To keep it off the test database, this test
creates a scratch database on the same server, points the demo at it, and
drops it afterwards: the demo itself needs no test-only switch.
"""

import contextlib
import http.cookiejar
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import urllib.request
import uuid
from collections import Counter
from datetime import UTC, datetime
from urllib.parse import urlencode, urlsplit

import psycopg
import pytest

from tests.helpers import ROOT, free_port, wait_until, warning_lines

DEMO = os.path.join(ROOT, "example_project", "demo.py")
# The demo takes about 15-30 s on a 2-core machine; both bounds keep a 10x margin.
DEMO_TIMEOUT = 240
PROCESS_TIMEOUT = 300

pytestmark = pytest.mark.process

RUN_ROW = re.compile(
    r"^  (?P<label>(?:order \d+(?: confirmation| shipping)?|nightly report))\s+(?P<function>\S+)\s+"
    r"(?P<state>\w+(?: \([^)]*\))?)\s+(?P<expected>\w+(?: \([^)]*\))?)\s+(?P<claims>\d+)\s+(?P<failures>\d+)"
    r"\s+(?P<recovered>\d+)$"
)
EFFECT_ROW = re.compile(
    r"^  (?P<subject>order \d+|report until \S+)\s+(?P<step>\S.*?)\s+(?P<requests>\d+)\s+(?P<effects>\d+)(?P<note>.*)$"
)


def server_url() -> str:
    """The PostgreSQL server the test settings use (they export DATABASE_URL, starting pgserver if needed)."""
    return os.environ["DATABASE_URL"]


def with_database(url: str, name: str) -> str:
    return urlsplit(url)._replace(path=f"/{name}").geturl()


@pytest.fixture
def scratch_database():
    """A fresh, empty database on the test server, dropped afterwards whatever happened."""
    name = f"durable_demo_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_url(), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield with_database(server_url(), name)
    finally:
        with psycopg.connect(server_url(), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def zone_far_from_the_nightly_tick() -> str:
    """A fixed-offset zone where it is about noon now, so the report's 02:00 tick cannot fire mid-demo."""
    offset = (12 - datetime.now(UTC).hour + 12) % 24 - 12  # hours to add to UTC, -12..11
    return f"Etc/GMT{-offset:+d}"  # POSIX sign: Etc/GMT-5 is UTC+5


def run_demo(database_url: str, tmp_path) -> subprocess.CompletedProcess:
    """``python example_project/demo.py`` from the repository root, in its own process group."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key != "DJANGO_SETTINGS_MODULE" and not key.startswith(("DURABLE_", "SHOP_"))
    }
    # TMPDIR: the worker logs the demo keeps go to the test's own directory.
    env.update(
        {
            "DATABASE_URL": database_url,
            "PYTHONPATH": ROOT,
            "TMPDIR": str(tmp_path),
            "SHOP_TIME_ZONE": zone_far_from_the_nightly_tick(),
        }
    )
    proc = subprocess.Popen(
        [sys.executable, DEMO, "--plain", "--timeout", str(DEMO_TIMEOUT)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its workers join the group, so a timeout can end them all
    )
    try:
        output, _ = proc.communicate(timeout=PROCESS_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        pytest.fail(f"the demo did not finish within {PROCESS_TIMEOUT}s:\n{output}")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # nothing of it may outlive the test
    return subprocess.CompletedProcess(proc.args, proc.returncode, output)


def section(output: str, heading: str, titles: str) -> list[str]:
    """The rows of the table under ``heading``: after its ``titles`` line, up to the next blank line."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(heading))
    start = next(i for i in range(start, len(lines)) if lines[i].startswith(f"  {titles} "))
    body = []
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        body.append(line)
    return body


def query(database_url: str, sql: str):
    with psycopg.connect(database_url) as conn:
        return conn.execute(sql).fetchall()


ADMIN_PAGES = """
import django
django.setup()
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client
from shop.models import Order

settings.ALLOWED_HOSTS.append("testserver")
client = Client()
client.force_login(User.objects.create_superuser("admin", "admin@shop.example", "unused"))
order = Order.objects.order_by("pk").first()
pages = ["/admin/shop/order/", f"/admin/shop/order/{order.pk}/change/", "/admin/shop/ledgerentry/",
         "/admin/shop/servicecall/", "/admin/durable_django/run/",
         f"/admin/durable_django/run/{order.fulfilment_run_id}/change/", "/admin/durable_django/schedule/"]
for page in pages:
    response = client.get(page)
    print(response.status_code, page)
listing = client.get("/admin/shop/order/").content.decode()
print("run link", f"/admin/durable_django/run/{order.fulfilment_run_id}/change/" in listing)
"""


def example_env(database_url: str, **extra: str) -> dict:
    """The environment of a user's shell: the demo's DATABASE_URL, no test settings."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key != "DJANGO_SETTINGS_MODULE" and not key.startswith(("DURABLE_", "SHOP_"))
    }
    env.update({"DATABASE_URL": database_url, "PYTHONPATH": ROOT, **extra})
    return env


def check_admin_pages(database_url: str) -> None:
    """The example site's admin pages for the demo's orders, ledger, runs and schedule answer 200."""
    env = example_env(database_url, DJANGO_SETTINGS_MODULE="shopsite.settings")
    result = subprocess.run(
        [sys.executable, "-c", ADMIN_PAGES],
        cwd=os.path.join(ROOT, "example_project"),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 8, result.stdout
    assert all(line.startswith("200 ") for line in lines[:7]), result.stdout
    assert lines[7] == "run link True", result.stdout


@pytest.mark.long
def test_demo_runs_every_workflow_to_its_state_and_each_side_effect_once(scratch_database, tmp_path):
    result = run_demo(scratch_database, tmp_path)
    output = result.stdout
    assert result.returncode == 0, output
    assert "DEMO OK" in output, output

    # The worker really was killed, and another one took its runs over.
    assert re.search(r"Killed worker #1 with SIGKILL .* It was running order \d+", output), output
    # Claims and failures apart: a reclaim after a worker died is a claim, not a failure.
    assert re.search(
        r"order \d+: its lease expired, so another worker reclaimed it \(claim \d+(, after \d+ failures?)?\)", output
    ), output
    assert list(tmp_path.glob("durable-demo-logs-*/worker-2.log")), output

    runs = [RUN_ROW.match(line) for line in section(output, "Final state of every run:", "RUN")]
    assert all(runs), output
    states = Counter(match["state"] for match in runs if match["function"] == "shop.fulfil_order")
    assert states == Counter(
        {"succeeded (shipped)": 1, "succeeded (rejected)": 1, "succeeded (approval timed out)": 1, "cancelled": 1}
    ), output
    by_function = Counter((match["function"], match["state"]) for match in runs)
    assert by_function[("shop.tasks.send_order_confirmation", "succeeded")] == 4, output
    assert by_function[("shop.ship_order", "succeeded")] == 1, output
    assert by_function[("shop.nightly_report", "succeeded")] == 1, output
    assert len(runs) == 10, output
    assert all(match["state"] == match["expected"] for match in runs), output
    assert any(int(match["recovered"]) for match in runs), output
    # A run that succeeded was claimed once more after each failure and for each recovery (and after each
    # sleep or wait): claims and failures are counted apart.
    succeeded = [m for m in runs if m["state"].startswith("succeeded")]
    assert all(int(m["claims"]) >= 1 + int(m["failures"]) + int(m["recovered"]) for m in succeeded), output
    assert any(int(m["claims"]) > 1 + int(m["failures"]) + int(m["recovered"]) for m in succeeded), output

    effects = [EFFECT_ROW.match(line) for line in section(output, "Side effects per step", "SUBJECT")]
    assert all(effects), output
    assert len(effects) == 3 * 6 + 1 + 1, output  # three orders that got as far as a decision, a pre-order, the report
    assert all(int(match["effects"]) == 1 for match in effects), output
    assert all(1 <= int(match["requests"]) <= 2 for match in effects), output
    assert "MISMATCH" not in output, output
    # An answer streamed word by word, read as it was written.
    assert re.search(r"Streamed answer \(31 words; .*\): Your order ships from the Leipzig warehouse", output), output

    # The database the demo used agrees with what it printed.
    assert query(
        scratch_database, "SELECT count(*) FROM durable_run WHERE status IN ('pending', 'running', 'waiting')"
    ) == [(0,)]
    ledger = {
        (subject, action): count
        for subject, action, count in query(
            scratch_database, "SELECT subject, action, count(*) FROM shop_ledger GROUP BY subject, action"
        )
    }
    calls = {
        (subject, action): count
        for subject, action, count in query(
            scratch_database, "SELECT subject, action, count(*) FROM shop_service_call GROUP BY subject, action"
        )
    }
    printed = {(m["subject"], m["step"]): (int(m["requests"]), int(m["effects"])) for m in effects}
    assert set(ledger.values()) == {1}
    assert {key: (calls[key], ledger[key]) for key in ledger} == printed
    assert query(scratch_database, "SELECT count(*) FROM durable_run WHERE recoveries > 0")[0][0] >= 1

    # The site the demo tells the user to open shows all of it.
    check_admin_pages(scratch_database)
    # Nothing in what it printed warns of anything.
    assert warning_lines(output) == [], output
    follow_the_printed_instructions(output, scratch_database, tmp_path)


# The commands the demo prints for the admin, each on a line of its own.
INSTRUCTION = re.compile(r"^  (python example_project/manage\.py \w+)$", re.MULTILINE)
PASSWORD = "a-newcomers-password-1"


def follow_the_printed_instructions(output: str, database_url: str, tmp_path) -> None:
    """``createsuperuser`` and ``runserver`` as the demo prints them, from the repository root, on its data.

    createsuperuser gets ``--noinput`` and Django's DJANGO_SUPERUSER_* variables in place of
    a person typing; runserver gets a free port, so that a test never collides with port 8000.
    """
    commands = {shlex.split(line)[-1]: shlex.split(line)[1:] for line in INSTRUCTION.findall(output)}
    assert sorted(commands) == ["createsuperuser", "runserver"], output
    created = subprocess.run(
        [sys.executable, *commands["createsuperuser"], "--noinput"],
        cwd=ROOT,
        env=example_env(
            database_url,
            DJANGO_SUPERUSER_USERNAME="newcomer",
            DJANGO_SUPERUSER_EMAIL="newcomer@shop.example",
            DJANGO_SUPERUSER_PASSWORD=PASSWORD,
        ),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert created.returncode == 0 and "Superuser created successfully." in created.stdout, created.stderr
    assert warning_lines(created.stdout + created.stderr) == [], created.stderr

    port = free_port()
    log_path = tmp_path / "runserver.log"
    with open(log_path, "w") as log:
        # Its own session: the autoreloader's parent and the server child are stopped together.
        server = subprocess.Popen(
            [sys.executable, *commands["runserver"], f"127.0.0.1:{port}"],
            cwd=ROOT,
            env=example_env(database_url, PYTHONUNBUFFERED="1"),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_until(lambda: answers(port) or server.poll() is not None, timeout=120, message="runserver")
        assert server.poll() is None, log_path.read_text()
        admin = log_in(f"http://127.0.0.1:{port}", "newcomer", PASSWORD)
        assert "Site administration" in admin and "Durable execution" in admin and "Shop" in admin, admin
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=30)
    served = log_path.read_text()
    assert re.search(rf"Starting (WSGI )?development server at http://127\.0\.0\.1:{port}/", served), served
    assert '"GET /admin/login/?next=/admin/ HTTP/1.1" 200' in served, served
    assert warning_lines(served) == [], served


def answers(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def log_in(base_url: str, username: str, password: str) -> str:
    """Log in on the admin's login page as a browser does; returns the admin index it leads to."""
    browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
    login_url = f"{base_url}/admin/login/?next=/admin/"
    form = browser.open(login_url, timeout=30).read().decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form).group(1)
    fields = {"csrfmiddlewaretoken": token, "username": username, "password": password, "next": "/admin/"}
    return browser.open(login_url, data=urlencode(fields).encode(), timeout=30).read().decode()
