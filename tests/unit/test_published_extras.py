"""What a clone needs to test, lint and drive a browser stays out of the metadata the package publishes.

pyproject.toml's ``[project]`` table becomes the wheel's metadata (Requires-Dist, Provides-Extra); the
PEP 735 ``[dependency-groups]`` table is never published. The test-only packages must be in a group,
and in no published extra nor in the dependencies.
"""

import os
import re
import tomllib

import pytest
from packaging.requirements import Requirement

from tests.helpers import ROOT

# Packages only the suite, the checks or the browser tests use. A name beginning "pytest" or "types-" is one too.
TEST_ONLY = {
    "django-stubs",
    "hypothesis",
    "import-linter",
    "mypy",
    "playwright",
    "pytest",
    "pytest-django",
    "pytest-xdist",
    "ruff",
    "vulture",
}
# The extras a user installs the package with.
USER_EXTRAS = {"binary", "c", "tasks", "otel", "prometheus"}


def pyproject():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as handle:
        return tomllib.load(handle)


def name(requirement: str) -> str:
    """The requirement's project name, normalised as PEP 503 compares names."""
    return re.sub(r"[-_.]+", "-", Requirement(requirement).name).lower()


def is_test_only(requirement: str) -> bool:
    found = name(requirement)
    return found in TEST_ONLY or found.startswith(("pytest", "types-"))


def published_test_only(project: dict) -> list[str]:
    """Each published requirement of a ``[project]`` table that names a test-only package, with where it is."""
    published = [("dependencies", requirement) for requirement in project.get("dependencies", [])]
    for extra, requirements in project.get("optional-dependencies", {}).items():
        published += [(f"extra {extra!r}", requirement) for requirement in requirements]
    return [f"{where}: {requirement}" for where, requirement in published if is_test_only(requirement)]


def group_requirements(groups: dict, group: str) -> list[str]:
    """A dependency group's requirements, its ``include-group`` entries resolved (PEP 735)."""
    found = []
    for entry in groups[group]:
        found += group_requirements(groups, entry["include-group"]) if isinstance(entry, dict) else [entry]
    return found


def test_no_published_extra_nor_dependency_names_a_test_only_package():
    assert published_test_only(pyproject()["project"]) == []


def test_the_check_finds_a_test_only_package_in_an_extra_or_the_dependencies():
    project = {
        "dependencies": ["django>=5.2", "pytest_django>=4.8"],
        "optional-dependencies": {"tasks": ["django-tasks>=0.12"], "test": ["Hypothesis>=6; python_version<'4'"]},
    }
    assert published_test_only(project) == [
        "dependencies: pytest_django>=4.8",
        "extra 'test': Hypothesis>=6; python_version<'4'",
    ]


def test_the_user_extras_stay_published():
    assert set(pyproject()["project"]["optional-dependencies"]) >= USER_EXTRAS


@pytest.mark.parametrize("package", sorted(TEST_ONLY))
def test_each_test_only_package_is_in_a_dependency_group(package):
    groups = pyproject()["dependency-groups"]
    assert any(name(requirement) == package for group in groups for requirement in group_requirements(groups, group))
