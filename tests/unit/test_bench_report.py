"""The benchmarks' Markdown report (bench/report.py) states the facts a reader needs to weigh its table.

No benchmark runs here: the facts are read by the report's own functions, from this interpreter, from
another interpreter process (as the peers' venv is read), from git and from the machine's load average.
"""

import datetime
import importlib.metadata
import logging
import os
import platform
import re
import subprocess
import sys

from bench import report
from tests.helpers import wait_until

ROWS = [
    ("enqueue (api.enqueue vs INSERT + NOTIFY)", "3366 vs 4357 runs/s", "0.78", ">= 0.90"),
    ("a row with a | in it", "p50 3.3 ms", "", "p50 < 10 ms"),
]


def sampled_load() -> report.Load:
    sampler = report.LoadSampler(interval=0.01)
    sampler.start()
    wait_until(lambda: sampler.samples >= 3, message="three samples of the load average")
    return sampler.stop()


def facts(**overrides) -> report.RunFacts:
    started = datetime.datetime(2026, 1, 2, 3, 4, tzinfo=datetime.UTC)
    values = {
        "started": started,
        "finished": started + datetime.timedelta(minutes=15),
        "command": "python bench/run_all.py",
        "selection": None,
        "commit": "v0.1.0-3-gabc1234",
        "versions": report.local_versions(),
        "server": "16.2 (embedded pgserver)",
        "peers": report.interpreter_versions(sys.executable, ["Django", "psycopg", "procrastinate"]),
        "peers_interpreter": "bench/.peers-venv",
        "cpus": 2,
        "load": sampled_load(),
    }
    return report.RunFacts(**{**values, **overrides})


def test_the_header_states_the_versions_the_commit_and_the_load_as_numbers():
    text = report.markdown(facts(), ROWS)
    header = text[: text.index("| benchmark |")]
    assert header.startswith("# The latest benchmark run\n")
    assert "- Date: 2026-01-02 03:04 UTC, 15.0 minutes" in header
    assert "- Commit: `v0.1.0-3-gabc1234`" in header
    django, psycopg = importlib.metadata.version("django"), importlib.metadata.version("psycopg")
    assert f"Python {platform.python_version()}, Django {django}, psycopg {psycopg}, durable-django " in header
    assert "- PostgreSQL 16.2 (embedded pgserver)" in header
    assert f"(`bench/.peers-venv`): Python {platform.python_version()}, Django {django}, psycopg {psycopg}" in header
    assert "- CPUs: 2" in header
    [load] = re.findall(
        r"^- Load average \(1 minute\): (\S+) at the start, (\S+) at the end, (\S+) at the highest "
        r"\((\d+) samples, every 0.01 s\)$",
        header,
        re.M,
    )
    start, end, highest, samples = (float(figure) for figure in load)
    assert highest >= max(start, end) >= 0
    assert samples >= 3


def test_the_rows_are_those_of_the_printed_table_with_pipes_escaped():
    table = report.markdown(facts(), ROWS).split("\n\n")[-1].splitlines()
    assert table == [
        "| benchmark | measured | ratio | target |",
        "| --- | --- | --- | --- |",
        "| enqueue (api.enqueue vs INSERT + NOTIFY) | 3366 vs 4357 runs/s | 0.78 | >= 0.90 |",
        "| a row with a \\| in it | p50 3.3 ms |  | p50 < 10 ms |",
    ]


def test_a_partial_run_says_so_and_a_run_outside_git_or_without_peers_says_nothing_false():
    header = report.header(facts(selection="--only store", commit=None, peers={}))
    assert header[0] == "# A partial benchmark run (`--only store`)"
    assert "not the default set" in header[2]
    assert "- Peers measured: none" in header
    assert not any(line.startswith("- Commit") for line in header)


def test_another_interpreter_reports_its_own_versions_and_what_it_lacks():
    versions = report.interpreter_versions(sys.executable, ["Django", "no-such-distribution-here"])
    assert versions == {
        "Python": platform.python_version(),
        "Django": importlib.metadata.version("django"),
        "no-such-distribution-here": "not installed",
    }


def test_the_commit_is_read_at_the_top_of_a_checkout_and_nowhere_else(tmp_path):
    assert report.commit(str(tmp_path)) is None
    git = ["git", "-C", str(tmp_path), "-c", "user.name=bench", "-c", "user.email=bench@example.com"]
    subprocess.run([*git, "init", "-q"], check=True)
    (tmp_path / "file").write_text("one")
    subprocess.run([*git, "add", "file"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "one"], check=True)
    short = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert report.commit(str(tmp_path)) == short
    (tmp_path / "file").write_text("two")
    assert report.commit(str(tmp_path)) == f"{short}-dirty"
    (tmp_path / "below").mkdir()
    assert report.commit(str(tmp_path / "below")) is None


def test_a_failed_sample_is_logged_and_the_sampling_goes_on(caplog):
    readings = iter([1.5, OSError("no load average here"), 4.0])

    def read() -> float:
        reading = next(readings, 2.0)
        if isinstance(reading, Exception):
            raise reading
        return reading

    sampler = report.LoadSampler(interval=0.01, read=read)
    with caplog.at_level(logging.ERROR, logger="bench.report"):
        sampler.start()
        wait_until(lambda: sampler.highest == 4.0, message="the sample after the failed one")
        load = sampler.stop()
    assert "could not read the load average" in caplog.text
    assert (load.start, load.end, load.highest) == (1.5, 2.0, 4.0)
    assert load.samples >= 3  # the first, the one after the failure, the last


def test_the_report_is_written_where_asked_its_directory_made(tmp_path):
    path = tmp_path / "benchmarks" / "latest.md"
    text = report.markdown(facts(), ROWS)
    report.write(str(path), text)
    assert path.read_text() == text


def test_only_a_run_of_the_default_set_writes_the_docs_page_unasked():
    from bench import run_all

    def parsed(*argv: str):
        return run_all.build_parser().parse_args(argv)

    assert run_all.destination(parsed()) == run_all.DOCS_TABLE
    assert run_all.destination(parsed("--runs", "3000")) == run_all.DOCS_TABLE
    assert run_all.destination(parsed("--only", run_all.DEFAULT_SET)) == run_all.DOCS_TABLE
    assert run_all.destination(parsed("--no-write")) is None
    assert run_all.destination(parsed("--output", "elsewhere.md")) == "elsewhere.md"
    assert run_all.destination(parsed("--only", "store")) is None
    assert run_all.destination(parsed("--big")) is None
    assert run_all.destination(parsed("--only", "store", "--output", "store.md")) == "store.md"
    assert run_all.selection(parsed("--only", "store,e2e")) == "--only store,e2e"
    assert run_all.selection(parsed("--big")) == "--big"
    assert run_all.DOCS_TABLE.endswith(os.path.join("docs", "benchmarks", "latest.md"))


def test_the_command_line_names_what_was_measured_not_where_it_was_written():
    from bench import run_all

    parser = run_all.build_parser()
    args = parser.parse_args(["--only", "store", "--store-runs", "300", "--output", "/somewhere/store.md", "--big"])
    assert run_all.measured_command(parser, args) == "python bench/run_all.py --only store --store-runs 300 --big"
