"""Sphinx configuration of durable-django's documentation site (MyST Markdown, built with -W in CI)."""

import os
import sys

import django
from django.conf import settings

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)

# autodoc imports the package, whose models need settings; no database is reached while building.
settings.configure(
    INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "django.contrib.admin", "durable_django"],
    DATABASES={"default": {"ENGINE": "django.db.backends.postgresql", "NAME": "docs"}},
    USE_TZ=True,
    DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
)
django.setup()

import durable_django  # noqa: E402  (after settings, as every Django import must be)

project = "durable-django"
author = "durable-django developers"
copyright = "durable-django developers"
release = durable_django.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build"]

# Headings become link targets, as GitHub renders them, so "guide.md#concepts" works in both places.
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence", "deflist"]

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": True}
napoleon_google_docstring = True
napoleon_numpy_docstring = False

html_theme = "furo"
html_title = f"durable-django {release}"
