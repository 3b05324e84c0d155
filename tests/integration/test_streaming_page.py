"""The example project's streaming page in headless Chromium: the answer fills in, across a worker's SIGKILL.

The example project runs as a user runs it (``manage.py runserver`` and
``manage.py durable_worker``) on a scratch database; the browser watches the
page's words arrive through EventSource while a worker is killed mid-answer.
"""

import contextlib
import os
import shutil
import signal
import subprocess
import sys

import psycopg
import pytest

from tests.admin.test_admin_browser import CHROMIUM_ARGS, TIMEOUT_MS, unavailable
from tests.helpers import ROOT, free_port, wait_until
from tests.integration.test_demo import scratch_database  # noqa: F401 - a fixture

pytestmark = [pytest.mark.process, pytest.mark.browser]

EXAMPLE = os.path.join(ROOT, "example_project")


class Example:
    """The example project's processes on one database, killed at the end whatever happened."""

    def __init__(self, database_url: str, tmp_path) -> None:
        self.database_url = database_url
        self.tmp_path = tmp_path
        self.procs: list[subprocess.Popen] = []
        self.env = {
            key: value
            for key, value in os.environ.items()
            if key != "DJANGO_SETTINGS_MODULE" and not key.startswith(("DURABLE_", "SHOP_"))
        }
        self.env.update({"DATABASE_URL": database_url, "PYTHONPATH": ROOT, "DURABLE_LEASE_SECONDS": "2"})

    def manage(self, *args: str) -> None:
        subprocess.run([sys.executable, "manage.py", *args], cwd=EXAMPLE, env=self.env, check=True, timeout=300)

    def start(self, *args: str) -> subprocess.Popen:
        with open(self.tmp_path / f"example-{len(self.procs)}.log", "w") as log:  # the process keeps its copy
            proc = subprocess.Popen(
                [sys.executable, "manage.py", *args], cwd=EXAMPLE, env=self.env, stdout=log, stderr=subprocess.STDOUT
            )
        self.procs.append(proc)
        return proc

    def stop(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait(timeout=30)

    def stream(self) -> list[tuple[int, str, int]]:
        with psycopg.connect(self.database_url) as conn:
            return conn.execute(
                "SELECT item_offset, value #>> '{}', attempt FROM durable_stream_item ORDER BY item_offset"
            ).fetchall()


@pytest.fixture
def example(scratch_database, tmp_path):  # noqa: F811 - the imported fixture
    running = Example(scratch_database, tmp_path)
    yield running
    running.stop()


@pytest.fixture
def chromium_browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("playwright is not installed (pip install --group browser)")
    executable = shutil.which("chromium") or shutil.which("chromium-browser")
    if executable is None:
        unavailable("no chromium executable on PATH (apt-get install chromium)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


def test_the_answer_fills_in_as_it_is_written_and_a_sigkill_mid_answer_leaves_no_duplicate_and_no_gap(
    example, chromium_browser
):
    example.manage("migrate", "--verbosity", "0")
    port = free_port()
    example.start("runserver", "--noreload", f"127.0.0.1:{port}")
    doomed = example.start("durable_worker", "--concurrency", "2")
    tab = chromium_browser.new_page()
    tab.set_default_timeout(TIMEOUT_MS)
    wait_until(lambda: _answers(port), timeout=60, message="the example's server")
    tab.goto(f"http://127.0.0.1:{port}/ask/?delay=0.25")
    words = tab.locator("#answer .word")
    # The page fills in while the run writes: some words are shown, the answer is not done.
    words.nth(5).wait_for()
    assert tab.locator("#answer").get_attribute("data-state") == "streaming"
    doomed.send_signal(signal.SIGKILL)
    doomed.wait(timeout=10)
    shown_at_the_kill = words.count()
    example.start("durable_worker", "--concurrency", "2")
    tab.locator('#answer[data-state="done"]').wait_for(timeout=120_000)
    stream = example.stream()
    assert 5 < shown_at_the_kill < len(stream), "the kill came too late to be mid-answer"
    texts = [text.strip() for text in words.all_inner_texts()]
    offsets = [int(offset) for offset in words.evaluate_all("spans => spans.map(s => s.dataset.offset)")]
    # Every word once, in order: the words of the killed attempt, then the rest from the next one.
    assert offsets == list(range(len(stream)))
    assert texts == [value for _, value, _ in stream]
    assert {attempt for _, _, attempt in stream} == {1, 2}
    assert " ".join(texts).startswith("Your order ships from the Leipzig warehouse")


def _answers(port: int) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/admin/login/", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False
