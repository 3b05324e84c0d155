"""The README's test command passes on a machine with the system Python alone, and CI still runs everything.

tox.ini skips an environment whose interpreter is missing; .ci/run turns that off before it runs tox.
Both are read as tox and bash read them, so the test fails if either side changes.
"""

import configparser
import os

from tests.helpers import ROOT


def test_tox_skips_a_missing_interpreter_outside_ci():
    config = configparser.ConfigParser(interpolation=None)
    config.read(os.path.join(ROOT, "tox.ini"))
    assert config["tox"].getboolean("skip_missing_interpreters") is True


def readme_test_command() -> str:
    """The command under the README's "Run the whole test suite"."""
    with open(os.path.join(ROOT, "README.md")) as readme:
        text = readme.read()
    section = text[text.index("**Run the whole test suite**") :]
    block = section[section.index("```sh") + len("```sh") : section.index("```", section.index("```sh") + 5)]
    [command] = [line.strip() for line in block.splitlines() if line.strip()]
    return command


def test_ci_makes_a_missing_interpreter_fail_then_runs_the_readmes_test_command():
    with open(os.path.join(ROOT, ".ci", "run")) as script:
        lines = [line.strip() for line in script if line.strip() and not line.strip().startswith("#")]
    exported = next(i for i, line in enumerate(lines) if line == "export TOX_SKIP_MISSING_INTERPRETERS=false")
    runs_tox = next(i for i, line in enumerate(lines) if line == readme_test_command())
    assert exported < runs_tox
    assert "tox" in readme_test_command()


def test_every_tier_of_the_suite_runs_in_some_environment():
    """Each environment names the tiers it runs: a new tests/ directory must be given to one of them."""
    config = configparser.ConfigParser(interpolation=None)
    config.read(os.path.join(ROOT, "tox.ini"))
    commands = " ".join(section.get("commands", "") for section in config.values())
    commands = commands.replace("{", " ").replace("}", " ").replace("\\", " ")
    tiers = sorted(
        entry
        for entry in os.listdir(os.path.join(ROOT, "tests"))
        if os.path.isdir(os.path.join(ROOT, "tests", entry))
        and any(name.startswith("test_") for name in os.listdir(os.path.join(ROOT, "tests", entry)))
    )
    assert tiers and [tier for tier in tiers if f"tests/{tier} " not in commands + " "] == []
