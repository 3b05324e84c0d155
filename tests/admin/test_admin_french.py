"""The admin in French: a browser that asks for French (``Accept-Language: fr``, through Django's
LocaleMiddleware) reads the package's pages in French, and none of the package's English texts.

The pages are read as a person reads them: the text of the page and the attributes a person sees (titles,
button labels, aria labels), not the markup's class names or the stored values (function names, ids).
"""

from collections.abc import Iterator
from html.parser import HTMLParser

import pytest
from django.conf import settings
from django.contrib.admin.utils import quote
from django.test import Client
from django.utils import translation

from durable_django.api import schedules as schedules_api

RUNS = "/admin/durable_django/run/"
SCHEDULES = "/admin/durable_django/schedule/"
WORKERS = "/admin/durable_django/worker/"

# Texts of the package's pages, in English: none may show on a French page.
ENGLISH = [
    # the runs listing
    "Created in the last hour",
    "Created in the last day",
    "Oldest pending run",
    "Runs per minute",
    "Held by limits",
    "no limit holds a run back",
    "Auto-refresh",
    "Reload this page every 5 seconds",
    "waiting for",
    "held by a limit",
    "parent run",
    "Cancel the selected runs",
    "Retry the selected runs as new runs",
    "Send a signal to the selected runs",
    "An exact run id, idempotency key",
    "Durable execution",
    "queue / tenant",
    "claimed 1 time",
    "not claimed yet",
    # a run's page
    "Timeline chart",
    "Parent and children",
    "Step journal",
    "journalled at",
    "first claimed",
    "last claimed",
    "after creation",
    "Retry as a new run",
    "queue / priority",
    "retry policy",
    "cancellation",
    "Axis from",
    "each claim is an attempt",
    "claims and failures",
    # the schedules
    "next fire (its zone)",
    "last fired",
    "Enable the selected schedules",
    "Fire the selected schedules now",
    "Next fire:",
    "Last runs:",
    "pauses on a failed run",
    "once enabled",
    ", disabled",
    "Schedule id",
    "Unique per tenant",
    "Catchup window",
    "Pause on failure",
    # a confirmation page
    "are you sure?",
    "No, take me back",
    "Pending and waiting runs are cancelled now",
    # the workers page
    "Versions live workers register",
    "Due runs no live worker can run",
]


class _Readable(HTMLParser):
    """The text a person reads on a page: text nodes (not scripts or styles) and the attributes shown."""

    SHOWN = ("title", "aria-label", "placeholder", "alt")

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self._hidden = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("script", "style"):
            self._hidden += 1
        attributes = dict(attrs)
        for name in self.SHOWN:
            if attributes.get(name):
                self.parts.append(attributes[name] or "")
        if tag == "input" and attributes.get("type") in ("submit", "button") and attributes.get("value"):
            self.parts.append(attributes["value"] or "")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style"):
            self._hidden -= 1

    def handle_data(self, data: str) -> None:
        if not self._hidden:
            self.parts.append(data)


def readable(response) -> str:
    assert response.status_code == 200, response.status_code
    parser = _Readable()
    parser.feed(response.content.decode())
    return " ".join(" ".join(parser.parts).split())


@pytest.fixture
def french(settings_with_locale, admin_user) -> Iterator[Client]:
    """A logged-in superuser whose browser asks for French."""
    client = Client(headers={"accept-language": "fr"})
    client.force_login(admin_user)
    yield client
    # LocaleMiddleware leaves the request's language active in this thread; the next test starts without one.
    translation.deactivate()


@pytest.fixture
def settings_with_locale(settings):
    # LocaleMiddleware goes after the session middleware and before the common one, as Django's docs say.
    middleware = list(settings.MIDDLEWARE)
    middleware.insert(
        middleware.index("django.middleware.common.CommonMiddleware"), "django.middleware.locale.LocaleMiddleware"
    )
    settings.MIDDLEWARE = middleware
    return settings


def assert_french(text: str, *expected: str) -> None:
    missing = [phrase for phrase in expected if phrase not in text]
    assert not missing, f"French texts missing: {missing}\n{text[:3000]}"
    english = [phrase for phrase in ENGLISH if phrase in text]
    assert not english, f"English texts on a French page: {english}\n{text[:3000]}"


def test_the_runs_listing_reads_in_french(example_runs, french):
    text = readable(french.get(RUNS))
    assert_french(
        text,
        "Exécution durable",
        "Créées dans la dernière heure",
        "Plus ancienne exécution en file",
        "Exécutions par minute (dernière heure)",
        "Actualisation auto",
        # Column headers (Django capitalises them) and a filter's title.
        "Statut",
        "Prises en charge",
        "Quand",
        "Maintenant",
        "File / locataire",
        # Cells: claims counted in plural forms, the time that matters for the status.
        "prise en charge 1 fois",
        "pas encore prise en charge",
        "en cours depuis",
        "Par retenue par une limite",
        "Annuler les exécutions sélectionnées",
        "échouée",
        "réussie",
    )


def test_a_failed_runs_page_reads_in_french(example_runs, french):
    text = readable(french.get(f"{RUNS}{quote(example_runs.failed)}/change/"))
    assert_french(
        text,
        "Chronologie",
        "Graphique chronologique",
        "Tentatives",
        "chaque prise en charge est une tentative",
        "Prises en charge et échecs",
        "Erreur",
        "Entrée",
        "Parent et enfants",
        "Journal des étapes",
        "première prise en charge",
        "Relancer en nouvelle exécution",
        "tentative 1 : à réessayer",
        "File / priorité",
    )


def test_a_waiting_runs_page_says_what_it_waits_for_in_french(example_runs, french):
    text = readable(french.get(f"{RUNS}{quote(example_runs.waiting)}/change/"))
    assert_french(text, "signal « ", "Envoyer un signal", "Annuler", "en attente")


def test_the_schedules_pages_read_in_french(transactional_db, french):
    schedules_api.schedule("weekly", "tests.noop", "0 9 * * 1", tz="Europe/Paris", pause_on_failure=True)
    listing = readable(french.get(SCHEDULES))
    assert_french(
        listing,
        "planifications",
        "Id de planification",
        "Prochain déclenchement (dans son fuseau)",
        "Dernier déclenchement",
        "Activer les planifications sélectionnées",
    )
    page = readable(french.get(f"{SCHEDULES}weekly/change/"))
    assert_french(
        page,
        "Prochain déclenchement :",
        "5 prochains déclenchements :",
        "Dernières exécutions :",
        "se met en pause à l'échec d'une exécution",
        "Id de planification",
        "Fenêtre de rattrapage",
        "Pause en cas d'échec",
        "Déclencher maintenant",
        "Rattrapage",
    )


def test_a_disabled_schedule_reads_in_french(transactional_db, french):
    schedules_api.schedule("nightly", "tests.noop", "0 2 * * *", tz="Europe/Paris", enabled=False)
    assert_french(readable(french.get(SCHEDULES)), "—, désactivée")
    assert_french(
        readable(french.get(f"{SCHEDULES}nightly/change/")),
        "Prochain déclenchement : —, désactivée",
        "5 prochains déclenchements, une fois activée :",
    )


def test_an_actions_confirmation_page_reads_in_french(example_runs, french):
    response = french.post(RUNS, {"action": "cancel_runs", "_selected_action": [example_runs.pending], "index": "0"})
    assert_french(
        readable(response),
        "Annuler : êtes-vous sûr ?",
        "Les exécutions en file et en attente sont annulées tout de suite",
        "Oui, annuler",
        "1 exécution",
    )


def test_the_outcome_of_an_action_reads_in_french(example_runs, french):
    response = french.post(
        RUNS,
        {"action": "cancel_runs", "_selected_action": [example_runs.pending], "index": "0", "confirm": "yes"},
    )
    assert_french(readable(response), "Annuler : résultat", "annulée", "Retour aux exécutions")


def test_the_workers_page_reads_in_french(transactional_db, french):
    assert_french(
        readable(french.get(WORKERS)),
        "Versions enregistrées par les workers actifs",
        "Exécutions dues qu'aucun worker actif ne peut exécuter",
    )


def test_english_stays_the_default(example_runs, admin_client):
    """Without a French request the same pages read in English (the check of the list above can fail)."""
    assert settings.LANGUAGE_CODE.startswith("en")
    text = readable(admin_client.get(RUNS))
    assert "Created in the last hour" in text and "Oldest pending run" in text and "waiting for" in text
