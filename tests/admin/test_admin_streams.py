"""A run's admin page shows its events and the last items of each of its streams."""

import pytest

from durable_django import api
from durable_django.testing import run_until_idle

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_run_page_shows_events_and_each_streams_last_items(admin_client):
    words = [f"word-{n}" for n in range(8)]
    run = api.enqueue("tests.stream_words", {"words": words, "inner": ["x"]})
    run_until_idle()
    page = admin_client.get(f"/admin/durable_django/run/{run.run_id}/change/").content.decode()
    assert 'id="durable-events"' in page and "<code>status</code>" in page and "&quot;done&quot;" in page
    assert "Stream <code>tokens</code>: 8 items, closed" in page
    assert "Stream <code>inner</code>: 1 item</h2>" in page
    # The newest five words of "tokens", not the first three.
    tokens = page.split("Stream <code>tokens</code>", 1)[1].split("</fieldset>", 1)[0]
    assert all(f"&quot;{word}&quot;" in tokens for word in words[3:])
    assert not any(f"&quot;{word}&quot;" in tokens for word in words[:3])
