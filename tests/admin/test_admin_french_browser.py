"""An operator's clicks through the admin in French, in headless Chromium: the site's language is French
(``LANGUAGE_CODE``), the browser asks for French, and a run is cancelled from its page.

Chromium and Playwright as in ``test_admin_browser`` (whose fixtures these are): without them these tests
skip, except in CI, where they fail.
"""

import re

import pytest

from tests.admin.conftest import status_of
from tests.admin.test_admin_browser import chromium, page  # noqa: F401  (the browser fixtures)


@pytest.fixture
def french_site(settings):
    """The live server speaks French: Django's translation default follows LANGUAGE_CODE (reset on change)."""
    settings.LANGUAGE_CODE = "fr"
    return settings


def test_an_operator_reads_the_runs_and_cancels_one_in_french(french_site, example_runs, page):  # noqa: F811
    overview = page.locator(".durable-overview").text_content()  # the text, not its upper-cased rendering
    assert "Créées dans la dernière heure" in overview and "Plus ancienne exécution en file" in overview
    assert "Created in the last hour" not in overview
    assert "Maintenant" in page.locator("#result_list thead").text_content()

    page.goto(f"/admin/durable_django/run/{example_runs.waiting}/change/")
    assert "Journal des étapes" in page.locator("#durable-journal").text_content()
    assert "signal « " in page.locator(".field-waiting").text_content()
    page.get_by_role("link", name="Annuler", exact=True).click()
    page.wait_for_url(re.compile(rf"/run/{example_runs.waiting}/cancel/$"))
    assert "Annuler : êtes-vous sûr ?" in page.locator("#content").text_content()
    assert status_of(example_runs.waiting) == "waiting"

    page.get_by_role("button", name="Oui, annuler").click()
    page.wait_for_url(re.compile(rf"/run/{example_runs.waiting}/change/$"))
    assert "Annuler : annulée" in page.locator(".messagelist").inner_text()
    assert page.locator(".field-colored_status .durable-status").inner_text() == "Annulée"
    assert status_of(example_runs.waiting) == "cancelled"
